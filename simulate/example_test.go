package simulate_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/simulate"
)

// A day's log would come from a file (coalesce serve --record); five
// events do here: tenant 1 changes three times within a few seconds, then
// again a minute later; tenant 2 once.
const exampleLog = `{"at":"2026-01-01T09:00:00Z","type":"recompute","args":{"tenant_id":1}}
{"at":"2026-01-01T09:00:02Z","type":"recompute","args":{"tenant_id":1}}
{"at":"2026-01-01T09:00:03Z","type":"recompute","args":{"tenant_id":2}}
{"at":"2026-01-01T09:00:04Z","type":"recompute","args":{"tenant_id":1}}
{"at":"2026-01-01T09:01:00Z","type":"recompute","args":{"tenant_id":1}}
`

func Example() {
	policy := debounce.Policy{Type: "recompute", Mode: debounce.ModeDebounce, Window: 10 * time.Second, KeyFields: []string{"tenant_id"}}
	res, err := simulate.Run(context.Background(), simulate.Config{Policies: []debounce.Policy{policy}},
		simulate.ReadLog(strings.NewReader(exampleLog)))
	if err != nil {
		fmt.Println(err)
		return
	}
	t := res.Types[0]
	fmt.Printf("%d events, %d jobs, %.2f events per job, longest wait %v\n", t.Events, t.Jobs, t.EventsPerJob, t.LatencyMax)
	// Output: 5 events, 3 jobs, 1.67 events per job, longest wait 10.125s
}

// Compare two windows side by side: a longer window runs fewer jobs and
// makes them wait longer.
func ExampleWriteTable() {
	base := simulate.Config{Policies: []debounce.Policy{
		{Type: "recompute", Mode: debounce.ModeDebounce, Window: 10 * time.Second, KeyFields: []string{"tenant_id"}},
	}}
	variants, err := simulate.ParseCompare(base, []string{"window=5s,1m"})
	if err != nil {
		fmt.Println(err)
		return
	}
	var results []simulate.Named
	for _, v := range variants {
		res, err := simulate.Run(context.Background(), v.Config, simulate.ReadLog(strings.NewReader(exampleLog)))
		if err != nil {
			fmt.Println(err)
			return
		}
		results = append(results, simulate.Named{Name: v.Name, Result: res})
	}
	_ = simulate.WriteTable(os.Stdout, results)
	// Output:
	//                     window=5s  window=1m
	// recompute
	//   events                    5          5
	//   jobs                      3          2
	//   events_per_job          1.7        2.5
	//   opened                    3          2
	//   joined                    2          3
	//   dropped                   0          0
	//   p50_latency          5.125s   1m0.125s
	//   p99_latency          5.125s   1m0.125s
	//   max_latency          5.125s   1m0.125s
	//   cap                      5s         1m
	//   max_jobs_per_key    2 in 1m    1 in 1m
	//   keys                      2          2
}
