package simulate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/simulate"
)

// BenchmarkRun measures a simulation per event, on one goroutine: a log
// where most events join a pending round, and one where every event opens
// a round and runs its own job (four script calls and a pipeline each).
// The 1M-event figures are in BENCHMARKS.md.
func BenchmarkRun(b *testing.B) {
	policy := []debounce.Policy{{Type: "t", Mode: debounce.ModeDebounce, Window: 10 * time.Second, KeyFields: []string{"tenant_id"}}}
	for _, tc := range []struct{ name, spec string }{
		{"coalescing", "type=t,tenants=100,rate=50/s,events=%d"},
		{"every_event_a_job", "type=t,tenants=1000000,rate=10/s,events=%d"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			spec, err := simulate.ParseGenSpec(fmt.Sprintf(tc.spec, b.N))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			r, err := simulate.Run(context.Background(), simulate.Config{Policies: policy, Parallel: 1}, simulate.Generate(spec))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(r.Total.Events)/float64(max(r.Total.Jobs, 1)), "events/job")
		})
	}
}
