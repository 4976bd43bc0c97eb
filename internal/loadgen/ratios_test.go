package loadgen_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/coalesce-io/coalesce/internal/loadgen"
)

// TestBenchRatiosReadsResults: scripts/bench-ratios.py summarises the lines
// scripts/bench-vs-asynq.sh prints from coalesce bench's Result and
// asynqbench's JSON, with BASE's fifth field: the ratios to Asynq of both
// builds and the median and range of the new/BASE pairs, read from the
// field names Result has (a renamed field would show as nan or no row).
func TestBenchRatiosReadsResults(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	f := func(v float64) *float64 { return &v }
	result := func(evs, redis, client, allocs float64) string {
		r := loadgen.Result{Mode: "debounce", Payload: "last", Via: "library", Events: 1000, Keys: 10, Concurrency: 50,
			EventsPerS: evs, P50us: 400, P99us: 2000, RedisCPUusPerEvent: f(redis), ClientCPUusPerEvent: client, AllocsPerEvent: allocs}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	asynq := func(evs float64) string {
		return fmt.Sprintf(`{"events_per_s":%g,"p50_us":500,"p99_us":5000,"peer":"asynq"}`, evs)
	}
	// Three repetitions: new/base pairs 2.0, 1.5 and 1.0 (median 1.5), new
	// over Asynq 2.0, 1.5, 2.0 (median 2.0), base over Asynq 1.0, 1.0, 2.0.
	in := strings.Join([]string{
		"1|last-c50|" + asynq(100) + "|" + result(200, 4, 7, 10) + "|" + result(100, 9, 9, 20),
		"2|last-c50|" + asynq(100) + "|" + result(150, 5, 7, 10) + "|" + result(100, 10, 8, 22),
		"3|last-c50|" + asynq(50) + "|" + result(100, 6, 6, 9) + "|" + result(100, 8, 9, 21),
		"1|cold-c1|" + asynq(10) + "|" + result(9, 30, 40, 12),
		"not a result line",
	}, "\n") + "\n"
	cmd := exec.Command(py, "../../scripts/bench-ratios.py")
	cmd.Stdin = strings.NewReader(in)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bench-ratios.py: %v\n%s", err, out)
	}
	got := string(out)
	for _, want := range []string{
		"| last-c50 | 150 | 100 | 2.00x |",
		"| cold-c1 | 9 | 10 | 0.90x |",
		"| last-c50 | 1.00x | 2.00x | 1.50x (1.00-2.00) | 9.00 -> 5.00 µs | 9.00 -> 7.00 µs | 21.00 -> 10.00 | 3 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "nan") {
		t.Errorf("a figure came out nan (a field name the script reads is not Result's):\n%s", got)
	}
	if strings.Count(got, "| cold-c1 |") != 1 {
		t.Errorf("cold-c1 (no BASE field) should have a row in the first table only:\n%s", got)
	}
}
