package worker_test

import (
	"context"
	"fmt"
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
	// The wrong Redis has been used by a daemon of its own, for an hour.
	old := fmt.Sprintf(`{"id":"0123456789abcdef","created":%d,"addr":"elsewhere:6379"}`, time.Now().Add(-time.Hour).UnixMilli())
	if err := wrong.rdb.Set(ctx, producer.prefix+debounce.StoreKey, old, 0).Err(); err != nil {
		t.Fatal(err)
	}
	producer.submit(t, "report", `{"k":1,"n":1}`)
	producer.submit(t, "report", `{"k":1,"n":2}`)
	var ran, refused atomic.Int64
	stopWrong := wrong.run(t, func(context.Context, *worker.Job) error { ran.Add(1); return nil },
		worker.Config{Types: []string{"report"}, Hooks: worker.Hooks{Job: func(_ string, r worker.JobResult, _ debounce.ReleaseResult, _ time.Duration) {
			if r == worker.JobOtherStore {
				refused.Add(1)
			}
		}}})
	waitFor(t, 10*time.Second, "the wrong worker to see the job", func() bool { return refused.Load() > 0 })
	if n := ran.Load(); n != 0 {
		t.Fatalf("a worker on another Redis ran the job %d times", n)
	}
	// It left the job in the stream. (Stopped, so the delivery goes to the
	// right worker: JetStream does not share deliveries fairly between
	// pullers, and CI once saw the wrong one get both redeliveries.)
	stopWrong()
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

// TestWorkerRunsAJobStampedWithAStaleStore is what the chaos short form's
// 6a found (a Redis restarted without persistence, two producers): another
// process wrote the Redis's new identity after the data loss while this
// producer still stamped its jobs with the identity it had cached. Such a
// job, whose round is in this very Redis, must run: it waited forever as
// "another store" on 3391ffa.
func TestWorkerRunsAJobStampedWithAStaleStore(t *testing.T) {
	t.Parallel()
	rdb := testenv.NewRedis(t).Client(t)
	nats := testenv.NATS(t)
	policy := debounce.Policy{Type: "report", Mode: debounce.ModeDebounce, Window: time.Second, KeyFields: []string{"k"}}
	s := newStackWith(t, nats, rdb, nil, policy)
	other := newStackWith(t, nats, rdb, func(c *debounce.Config) { c.Prefix = s.prefix }, policy)
	ctx := context.Background()
	s.submit(t, "report", `{"k":0}`) // s caches the identity
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := other.co.EnsureStore(ctx); err != nil { // another producer's new identity
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	s.submit(t, "report", `{"k":1}`) // stamped with s's cached, now stale, identity
	got := make(chan *worker.Job, 4)
	s.run(t, func(_ context.Context, j *worker.Job) error { got <- j; return nil }, worker.Config{Types: []string{"report"}})
	deadline := time.After(15 * time.Second)
	for {
		select {
		case j := <-got:
			if string(j.Args) == `{"k":1}` {
				if j.Release != debounce.ReleaseReleased {
					t.Errorf("release %s, want released (its round is in this Redis)", j.Release)
				}
				return
			}
		case <-deadline:
			t.Fatal("a job stamped with its Redis's previous identity never ran")
		}
	}
}
