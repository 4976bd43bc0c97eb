package worker_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/worker"
)

// TestEarlyDeliveryOfAFixedRoundWaits: a fixed debounce round delivered
// before its due time by the worker's clock (clocks apart) is not taken:
// the same message is retried at the due time, nothing published again,
// and its events (some joined locally) are all in the job that then runs.
func TestEarlyDeliveryOfAFixedRoundWaits(t *testing.T) {
	t.Parallel()
	rdb := testenv.SharedRedis(t).Client(t)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	var published []debounce.Job
	pub := debounce.PublisherFunc(func(_ context.Context, j debounce.Job) error {
		mu.Lock()
		defer mu.Unlock()
		published = append(published, j)
		return nil
	})
	// A JetStream schedule that fires early by the worker's clock (a round
	// held in Redis is forwarded by the forwarder's clock).
	co, err := debounce.New(debounce.Config{Schedules: debounce.SchedulesJetStream, Redis: rdb, Publisher: pub, Prefix: testenv.Prefix(t), Now: clock,
		Policies: []debounce.Policy{{Type: "fixed", Mode: debounce.ModeDebounce, Window: 10 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		if _, err := co.Submit(ctx, debounce.Event{Type: "fixed", Args: json.RawMessage(`{"a":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// The flush adds the two local joins within milliseconds; the fake
	// clock jumps seconds in no time, so wait for it here.
	if err := co.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	job := worker.Job{Job: published[0]}
	now = now.Add(7 * time.Second) // 3 s early
	mu.Unlock()
	st, err := worker.StartDelivery(ctx, co, pub, &job, 5, time.Second)
	if err != nil || st.Action != worker.StartRetry || st.Delay < 2*time.Second || st.Delay > 3*time.Second {
		t.Fatalf("early delivery: %+v %v, want a retry in about 3 s", st, err)
	}
	mu.Lock()
	n := len(published)
	now = now.Add(3 * time.Second)
	mu.Unlock()
	if n != 1 {
		t.Errorf("%d jobs published, want the one (nothing published again)", n)
	}
	st, err = worker.StartDelivery(ctx, co, pub, &job, 5, time.Second)
	if err != nil || st.Action != worker.StartRun || job.Release != debounce.ReleaseReleased || job.Summary.Events != 3 {
		t.Errorf("delivery at due time: %+v %v, job %s with %d events; want run, released with 3", st, err, job.Release, job.Summary.Events)
	}
}
