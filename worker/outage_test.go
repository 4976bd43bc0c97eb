package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/worker"
)

// TestJobOutlivesManyFailedCloses: Redis is down while a job is due, long
// enough for more deliveries than ten times max_deliver (the backstop), and
// comes back without its data. The job must run (its round missing), as its
// first attempt: on 233be70 every such job was dead-lettered on recovery
// without running (the deliveries of the outage counted as attempts). The
// round has a JetStream schedule: one held in Redis (the default on a single
// node) is lost with Redis's data, its job with it (README, Production).
func TestJobOutlivesManyFailedCloses(t *testing.T) {
	t.Parallel()
	rs := testenv.NewRedis(t)
	s := newStackWith(t, testenv.NATS(t), rs.Client(t), jetStreamSchedules, debounce.Policy{Type: "report", Mode: debounce.ModeDebounce, Window: time.Second, KeyFields: []string{"k"}})
	s.submit(t, "report", `{"k":1}`)
	rs.Stop()
	var failed atomic.Int64
	ran := make(chan *worker.Job, 1)
	s.run(t, func(_ context.Context, j *worker.Job) error { ran <- j; return nil }, worker.Config{
		Types: []string{"report"}, MaxDeliver: 5, Backoff: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond},
		Hooks: worker.Hooks{Job: func(_ string, r worker.JobResult, _ debounce.ReleaseResult, _ time.Duration) {
			if r == worker.JobReleaseFailed {
				failed.Add(1)
			}
		}},
	})
	waitFor(t, 60*time.Second, "60 failed closes", func() bool { return failed.Load() >= 60 })
	if err := rs.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case j := <-ran:
		if j.Attempt != 1 {
			t.Errorf("attempt %d after an outage of %d failed closes, want 1", j.Attempt, failed.Load())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the job never ran after an outage of %d failed closes", failed.Load())
	}
}
