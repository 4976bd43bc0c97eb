package worker_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/worker"
)

// TestExclusiveKeyOfACrashedWorker: a worker died holding a key's lease
// (taken, never refreshed nor released). The next job of the key waits for
// the lease to lapse — not less, and not much more — and then runs as its
// first attempt, however many deliveries found the key busy; the wait is
// counted and observed.
func TestExclusiveKeyOfACrashedWorker(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	s := newStack(t, testenv.NATS(t), debounce.Policy{Type: "report", Mode: debounce.ModeDebounce, Window: time.Second,
		KeyFields: []string{"k"}, Exclusive: true, Lease: lease})
	ctx := context.Background()
	key, err := s.co.RoundKeyOf(debounce.Event{Type: "report", Args: json.RawMessage(`{"k":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	kl, err := s.co.TakeKey(ctx, debounce.Job{Type: "report", Key: key}, "crashed-worker")
	if err != nil || !kl.Taken {
		t.Fatalf("TakeKey: %+v %v", kl, err)
	}
	crashed := time.Now()
	s.submit(t, "report", `{"k":1}`)
	var busy atomic.Int64
	var waited atomic.Int64
	started := make(chan *worker.Job, 1)
	s.run(t, func(ctx context.Context, j *worker.Job) error {
		started <- j
		return nil
	}, worker.Config{Types: []string{"report"}, Hooks: worker.Hooks{
		Job: func(_ string, r worker.JobResult, _ debounce.ReleaseResult, _ time.Duration) {
			if r == worker.JobKeyBusy {
				busy.Add(1)
			}
		},
		KeyWait: func(_ string, d time.Duration) { waited.Store(int64(d)) },
	}})
	var j *worker.Job
	select {
	case j = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the job never ran after the crashed worker's lease lapsed")
	}
	if since := time.Since(crashed); since < lease {
		t.Errorf("the job ran %v after the crash, before the %v lease lapsed", since, lease)
	} else if since > lease+2*time.Second {
		t.Errorf("the job ran %v after the crash: the key stayed blocked well past its %v lease", since, lease)
	}
	if j.Attempt != 1 || busy.Load() == 0 {
		t.Errorf("attempt %d after %d deliveries found the key busy; want attempt 1 and some", j.Attempt, busy.Load())
	}
	if w := time.Duration(waited.Load()); w <= 0 || w > lease+time.Second {
		t.Errorf("observed wait %v", w)
	}
}

// TestExclusiveLeaseOwnership: only the owner refreshes or releases a
// lease, a released key is free at once, and a policy that is not
// exclusive has no lease.
func TestExclusiveLeaseOwnership(t *testing.T) {
	t.Parallel()
	s := newStack(t, testenv.NATS(t),
		debounce.Policy{Type: "x", Mode: debounce.ModeDedup, Exclusive: true},
		debounce.Policy{Type: "plain", Mode: debounce.ModeDedup})
	ctx := context.Background()
	key, err := s.co.RoundKeyOf(debounce.Event{Type: "x", Args: json.RawMessage(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	job := debounce.Job{Type: "x", Key: key}
	if l, ok := s.co.Lease("x"); !ok || l != debounce.DefaultLease {
		t.Errorf("Lease(x) = %v %v, want the default", l, ok)
	}
	if kl, err := s.co.TakeKey(ctx, job, "one"); err != nil || !kl.Taken {
		t.Fatalf("take: %+v %v", kl, err)
	}
	if kl, err := s.co.TakeKey(ctx, job, "two"); err != nil || kl.Taken || kl.Left <= 0 {
		t.Errorf("a second owner took a held key: %+v %v", kl, err)
	}
	if ok, err := s.co.RefreshKey(ctx, job, "two"); err != nil || ok {
		t.Errorf("a non-owner refreshed the lease: %v %v", ok, err)
	}
	if ok, err := s.co.ReleaseKey(ctx, job, "two"); err != nil || ok {
		t.Errorf("a non-owner released the lease: %v %v", ok, err)
	}
	if ok, err := s.co.RefreshKey(ctx, job, "one"); err != nil || !ok {
		t.Errorf("the owner could not refresh: %v %v", ok, err)
	}
	if ok, err := s.co.ReleaseKey(ctx, job, "one"); err != nil || !ok {
		t.Errorf("the owner could not release: %v %v", ok, err)
	}
	kl, err := s.co.TakeKey(ctx, job, "two")
	if err != nil || !kl.Taken || kl.Waits != 1 {
		t.Errorf("after the release: %+v %v, want taken with the one wait counted", kl, err)
	}
	if _, err := s.co.TakeKey(ctx, debounce.Job{Type: "plain", Key: job.Key}, "one"); err == nil {
		t.Error("TakeKey of a policy that is not exclusive succeeded")
	}
}

// TestExclusiveWithoutThePolicy: a worker whose Coalescer lacks the
// exclusive policy (coalesce work without --config, another build) still
// honours the key's lease, which the job carries (Coalesce-Exclusive): it
// ran beside the lease holder, silently, before.
func TestExclusiveWithoutThePolicy(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	nats := testenv.NATS(t)
	rdb := testenv.SharedRedis(t).Client(t)
	producer := newStackWith(t, nats, rdb, nil, debounce.Policy{Type: "report", Mode: debounce.ModeDebounce, Window: time.Second,
		KeyFields: []string{"k"}, Exclusive: true, Lease: lease})
	plain := newStackWith(t, nats, rdb, func(c *debounce.Config) { c.Prefix = producer.prefix },
		debounce.Policy{Type: "report", Mode: debounce.ModeDebounce, Window: time.Second, KeyFields: []string{"k"}})
	ctx := context.Background()
	key, err := producer.co.RoundKeyOf(debounce.Event{Type: "report", Args: json.RawMessage(`{"k":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if kl, err := producer.co.TakeKey(ctx, debounce.Job{Type: "report", Key: key}, "another-worker"); err != nil || !kl.Taken {
		t.Fatalf("TakeKey: %+v %v", kl, err)
	}
	held := time.Now()
	producer.submit(t, "report", `{"k":1}`)
	started := make(chan time.Time, 1)
	plain.run(t, func(context.Context, *worker.Job) error { started <- time.Now(); return nil }, worker.Config{Types: []string{"report"}})
	select {
	case at := <-started:
		if at.Sub(held) < lease {
			t.Errorf("a worker without the policy ran the job %v after another took its key, inside the %v lease", at.Sub(held), lease)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the job never ran")
	}
}

// exclusiveRound is a Coalescer on the shared Redis with one exclusive
// dedup policy "x" (lease MinLease), the publisher it publishes to, and
// the job of one round it opened.
func exclusiveRound(t *testing.T) (*debounce.Coalescer, debounce.Publisher, debounce.Job) {
	t.Helper()
	var mu sync.Mutex
	var published []debounce.Job
	pub := debounce.PublisherFunc(func(_ context.Context, j debounce.Job) error {
		mu.Lock()
		defer mu.Unlock()
		published = append(published, j)
		return nil
	})
	co, err := debounce.New(debounce.Config{Redis: testenv.SharedRedis(t).Client(t), Publisher: pub, Prefix: testenv.Prefix(t),
		Policies: []debounce.Policy{{Type: "x", Mode: debounce.ModeDedup, Exclusive: true, Lease: debounce.MinLease}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := co.Submit(context.Background(), debounce.Event{Type: "x", Args: json.RawMessage(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return co, pub, published[0]
}

// TestExclusiveStartThatOutlivesItsLease: a delivery whose start took
// longer than its key's lease (Redis stalled between the lease and the
// round's take) does not run when another job took the lapsed lease
// meanwhile: it comes again once the key is free and runs then, with its
// round (taken by the first delivery). It ran beside the other job before
// (chaos 7b, held rounds: an exclusive overlap right after a 3 s stall).
func TestExclusiveStartThatOutlivesItsLease(t *testing.T) {
	co, pub, first := exclusiveRound(t)
	ctx := context.Background()
	job := worker.Job{Job: first}
	other := debounce.Job{Type: "x", Key: job.Key, Token: 1}
	restore := worker.SetAfterKeyTaken(func() {
		time.Sleep(debounce.MinLease + 300*time.Millisecond) // the lease lapses
		if kl, err := co.TakeKey(ctx, other, "another job"); err != nil || !kl.Taken {
			t.Errorf("another job could not take the lapsed lease: %+v %v", kl, err)
		}
	})
	st, err := worker.StartDelivery(ctx, co, pub, &job, 5, time.Second)
	restore()
	if err != nil || st.Action != worker.StartRetry || st.Result != worker.JobKeyBusy {
		t.Fatalf("a start that outlived its lease, another job holding the key: %+v %v; want a retry (key busy)", st, err)
	}
	if ok, err := co.ReleaseKey(ctx, other, "another job"); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	st, err = worker.StartDelivery(ctx, co, pub, &job, 5, time.Second)
	if err != nil || st.Action != worker.StartRun || job.Release != debounce.ReleaseRetry || st.Lease == "" {
		t.Errorf("the next delivery: %+v %v, release %s; want it run with the round its first delivery took", st, err, job.Release)
	}
}

// TestSlowStartsAreNoAttempts: an exclusive job whose start outlives its
// key's lease (Redis stalled) does not run then and comes again; that
// delivery is no attempt, or a job delivered through a long stretch of
// Redis stalls is dead-lettered without having failed once (chaos 7a's
// long form on held rounds: 2 bypassed exclusive jobs dead-lettered,
// "started 5 times without finishing"). Six slow starts in a row, then
// the seventh delivery runs: a round's job, and a job published without a
// reservation (fail open, Token 0).
func TestSlowStartsAreNoAttempts(t *testing.T) {
	co, pub, round := exclusiveRound(t)
	ctx := context.Background()
	bkey, err := co.RoundKeyOf(debounce.Event{Type: "x", Args: json.RawMessage(`{"n":2}`)})
	if err != nil {
		t.Fatal(err)
	}
	bypassed := debounce.Job{Type: "x", Key: bkey, Mode: debounce.ModeDedup, Bypass: "b-1", TTL: time.Hour}
	const maxDeliver = 5
	for _, tc := range []struct {
		name string
		job  debounce.Job
	}{{"round", round}, {"bypassed", bypassed}} {
		t.Run(tc.name, func(t *testing.T) {
			other := debounce.Job{Type: "x", Key: tc.job.Key, Token: 1}
			restore := worker.SetAfterKeyTaken(func() {
				time.Sleep(debounce.MinLease + 300*time.Millisecond) // the lease lapses
				if kl, err := co.TakeKey(ctx, other, "another job"); err != nil || !kl.Taken {
					t.Errorf("another job could not take the lapsed lease: %+v %v", kl, err)
				}
			})
			for delivery := 1; delivery <= maxDeliver+1; delivery++ {
				job := worker.Job{Job: tc.job, Attempt: delivery}
				st, err := worker.StartDelivery(ctx, co, pub, &job, maxDeliver, time.Second)
				if err != nil || st.Action != worker.StartRetry || st.Result != worker.JobKeyBusy {
					restore()
					t.Fatalf("delivery %d, its start outliving the lease: %+v %v; want a retry (key busy)", delivery, st, err)
				}
				if ok, err := co.ReleaseKey(ctx, other, "another job"); err != nil || !ok {
					restore()
					t.Fatalf("release: %v %v", ok, err)
				}
			}
			restore()
			job := worker.Job{Job: tc.job, Attempt: maxDeliver + 2}
			st, err := worker.StartDelivery(ctx, co, pub, &job, maxDeliver, time.Second)
			if err != nil || st.Action != worker.StartRun || job.Attempt != 1 {
				t.Errorf("delivery %d after %d slow starts: %+v %v, attempt %d; want it run as the first attempt", maxDeliver+2, maxDeliver+1, st, err, job.Attempt)
			}
			if st.Lease != "" {
				if _, err := co.ReleaseKey(ctx, job.Job, st.Lease); err != nil {
					t.Error(err)
				}
			}
		})
	}
}
