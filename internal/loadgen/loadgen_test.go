package loadgen_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/coalesce-io/coalesce/internal/loadgen"
)

// TestRunCountsEveryEventOnce: each event is submitted once in batches,
// errors are counted and the first returned, and the counters reach the
// result.
func TestRunCountsEveryEventOnce(t *testing.T) {
	const n = 10_001
	seen := make([]atomic.Int32, n)
	var opened atomic.Int64
	bad := errors.New("refused")
	submit := func(_ context.Context, from, to int) error {
		for i := from; i < to; i++ {
			seen[i].Add(1)
		}
		if from == 500 {
			return bad
		}
		opened.Add(int64(to - from))
		return nil
	}
	var res loadgen.Result
	first, err := loadgen.Run(context.Background(), loadgen.Load{Events: n, Batch: 100, Concurrency: 7, Submit: submit, Keys: 1000, Opened: &opened}, &res)
	if err != nil {
		t.Fatal(err)
	}
	for i := range seen {
		if c := seen[i].Load(); c != 1 {
			t.Fatalf("event %d submitted %d times", i, c)
		}
	}
	if !errors.Is(first, bad) || res.Errors != 1 {
		t.Errorf("first error %v, %d errors; want the refusal, once", first, res.Errors)
	}
	if res.RoundsOpened != n-100 || res.DuplicatesObserved != n-100-1000 {
		t.Errorf("rounds opened %d, duplicates %d", res.RoundsOpened, res.DuplicatesObserved)
	}
	if res.EventsPerS <= 0 || res.P99us < res.P50us || res.RedisCPUusPerEvent != nil {
		t.Errorf("measured %+v", res)
	}
}
