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

// TestWorkerOnAnotherRedisDoesNotRun is issue 15's first bug: a worker
// connected to another Redis than the producer's (same policies, same
// prefix, same NATS) ran the job with release "missing" and an empty
// summary, and the next event joined the round that had already run. It
// must leave the job alone (counted other_store) until a worker on the
// producer's Redis runs it, released, with its summary.
func TestWorkerOnAnotherRedisDoesNotRun(t *testing.T) {
	t.Parallel()
	nats := testenv.NATS(t)
	policy := debounce.Policy{Type: "report", Mode: debounce.ModeDebounce, Window: time.Second, KeyFields: []string{"k"}}
	producer := newStackWith(t, nats, testenv.NewRedis(t).Client(t), nil, policy)
	wrong := newStackWith(t, nats, testenv.NewRedis(t).Client(t), func(c *debounce.Config) { c.Prefix = producer.prefix }, policy)
	ctx := context.Background()
	// The wrong Redis has been used by a daemon of its own.
	if _, err := wrong.co.EnsureStore(ctx); err != nil {
		t.Fatal(err)
	}
	producer.submit(t, "report", `{"k":1,"n":1}`)
	producer.submit(t, "report", `{"k":1,"n":2}`)
	var ran, refused atomic.Int64
	wrong.run(t, func(context.Context, *worker.Job) error { ran.Add(1); return nil },
		worker.Config{Types: []string{"report"}, Hooks: worker.Hooks{Job: func(_ string, r worker.JobResult, _ debounce.ReleaseResult, _ time.Duration) {
			if r == worker.JobOtherStore {
				refused.Add(1)
			}
		}}})
	waitFor(t, 10*time.Second, "the wrong worker to see the job", func() bool { return refused.Load() > 0 })
	if n := ran.Load(); n != 0 {
		t.Fatalf("a worker on another Redis ran the job %d times", n)
	}
	got := make(chan *worker.Job, 1)
	producer.run(t, func(_ context.Context, j *worker.Job) error { got <- j; return nil }, worker.Config{Types: []string{"report"}})
	select {
	case j := <-got:
		if j.Release != debounce.ReleaseReleased || j.Summary.Events != 2 {
			t.Errorf("the right worker ran it with release %s and %d events, want released and 2", j.Release, j.Summary.Events)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the worker on the producer's Redis never ran the job")
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("the wrong worker ran it %d times", n)
	}
}

// TestWorkerRunsAfterItsRedisLostItsData: a Redis that lost its data (its
// store identity written again after the job's round opened) is the same
// Redis: the job runs, its round missing, rather than never.
func TestWorkerRunsAfterItsRedisLostItsData(t *testing.T) {
	t.Parallel()
	rdb := testenv.NewRedis(t).Client(t)
	s := newStackWith(t, testenv.NATS(t), rdb, nil, debounce.Policy{Type: "report", Mode: debounce.ModeDedup, KeyFields: []string{"k"}})
	ctx := context.Background()
	s.submit(t, "report", `{"k":1}`) // published at once, stamped with the store
	time.Sleep(10 * time.Millisecond)
	if err := rdb.FlushAll(ctx).Err(); err != nil { // the data loss
		t.Fatal(err)
	}
	if _, err := s.co.EnsureStore(ctx); err != nil { // the daemon's next reaper pass
		t.Fatal(err)
	}
	got := make(chan *worker.Job, 1)
	s.run(t, func(_ context.Context, j *worker.Job) error { got <- j; return nil }, worker.Config{Types: []string{"report"}})
	select {
	case j := <-got:
		if j.Release != debounce.ReleaseMissing {
			t.Errorf("release %s, want missing (the round went with the data)", j.Release)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the job of a Redis that lost its data never ran")
	}
}
