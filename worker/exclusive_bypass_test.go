package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/worker"
)

// TestBypassedExclusiveJobsWaitWithoutUsingAttempts: three jobs of one
// exclusive key published without a reservation (the producer's Redis
// down, fail open) find the key's lease held, by the worker's Redis, for
// many more deliveries than MaxDeliver; once it is given up each runs once,
// as its first attempt, and none is dead-lettered: waiting for the key is
// no attempt, for a bypassed job as for a round's. On 5937b3a the waits of
// a bypassed job (token 0) were not subtracted from its deliveries, and a
// job that had only waited was dead-lettered ("started N times without
// finishing"); before that they were counted per token, one counter for
// every bypassed job of the key.
func TestBypassedExclusiveJobsWaitWithoutUsingAttempts(t *testing.T) {
	t.Parallel()
	const maxDeliver = 2
	p := debounce.Policy{Type: "report", Mode: debounce.ModeDedup, KeyFields: []string{"k"}, Exclusive: true, Lease: 3 * time.Second}
	srv := testenv.NATS(t)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	down := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), DisableIdentity: true, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = down.Close() })
	producer := newStackWith(t, srv, down, nil, p)
	w := newStackWith(t, srv, testenv.SharedRedis(t).Client(t), nil, p)
	ctx := context.Background()

	key, err := w.co.RoundKeyOf(debounce.Event{Type: p.Type, Args: json.RawMessage(`{"k":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	holder := debounce.Job{Type: p.Type, Key: key}
	if kl, err := w.co.TakeKey(ctx, holder, "another-worker"); err != nil || !kl.Taken {
		t.Fatalf("TakeKey: %+v %v", kl, err)
	}
	for n := range 3 {
		if d := producer.submit(t, p.Type, fmt.Sprintf(`{"k":1,"n":%d}`, n)); d.Outcome != debounce.OutcomeBypassed {
			t.Fatalf("event %d: %+v, want bypassed", n, d)
		}
	}

	var busy, dead atomic.Int64
	var mu sync.Mutex
	ran := map[string][]int{} // args -> attempts
	w.run(t, func(_ context.Context, j *worker.Job) error {
		mu.Lock()
		defer mu.Unlock()
		ran[string(j.Args)] = append(ran[string(j.Args)], j.Attempt)
		return nil
	}, worker.Config{Types: []string{p.Type}, MaxDeliver: maxDeliver, Hooks: countResults(&busy, &dead)})
	// Hold the key until the three jobs together found it busy far more
	// often than their attempts allow.
	holdKey(t, w.co, holder, &busy, 3*(maxDeliver+3))
	mu.Lock()
	early := len(ran)
	mu.Unlock()
	if early != 0 {
		t.Fatalf("%d jobs ran while another held the key", early)
	}
	if ok, err := w.co.ReleaseKey(ctx, holder, "another-worker"); err != nil || !ok {
		t.Fatalf("ReleaseKey: %v %v", ok, err)
	}
	waitFor(t, 30*time.Second, "the three jobs, or a dead letter", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == 3 || dead.Load() > 0
	})
	quiet(t, 500*time.Millisecond, "runs", func() int { mu.Lock(); defer mu.Unlock(); return len(ran) })
	mu.Lock()
	defer mu.Unlock()
	if dead.Load() != 0 {
		t.Errorf("%d jobs dead-lettered after %d deliveries found their key busy: waiting is no attempt", dead.Load(), busy.Load())
	}
	for n := range 3 {
		args := fmt.Sprintf(`{"k":1,"n":%d}`, n)
		if a := ran[args]; len(a) != 1 || a[0] != 1 {
			t.Errorf("job %s ran with attempts %v, want once as attempt 1", args, a)
		}
	}
}

// holdKey holds job's key for "another-worker" (taken already), refreshing
// its lease, until busy counts enough deliveries that found it busy.
func holdKey(t *testing.T, co *debounce.Coalescer, job debounce.Job, busy *atomic.Int64, enough int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for busy.Load() < enough {
		if time.Now().After(deadline) {
			t.Fatalf("only %d deliveries found the key busy within 60 s, want %d", busy.Load(), enough)
		}
		if ok, err := co.RefreshKey(context.Background(), job, "another-worker"); err != nil || !ok {
			t.Fatalf("RefreshKey: %v %v", ok, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestReplayedExclusiveJobWaitsWithoutUsingAttempts: a dead letter of an
// exclusive key replayed while another job holds the key waits, for many
// more deliveries than MaxDeliver, then runs once: its waits are counted
// apart from its job's first run (same identity), and are no attempts. On
// 5937b3a a replay's waits were not subtracted from its deliveries: it was
// dead-lettered again ("replayed, then started N times without
// finishing") without running.
func TestReplayedExclusiveJobWaitsWithoutUsingAttempts(t *testing.T) {
	t.Parallel()
	const maxDeliver = 2
	p := debounce.Policy{Type: "report", Mode: debounce.ModeDedup, KeyFields: []string{"k"}, Exclusive: true, Lease: 3 * time.Second}
	s := newStack(t, testenv.NATS(t), p)
	ctx := context.Background()
	d := s.submit(t, p.Type, `{"k":1}`)
	var busy, dead atomic.Int64
	h := &diesOnce{}
	s.run(t, h.handle, worker.Config{Types: []string{p.Type}, MaxDeliver: maxDeliver, Hooks: countResults(&busy, &dead)})
	deadLetters, letter := oneDeadLetter(t, s, p.Type, 15*time.Second)
	holder := debounce.Job{Type: p.Type, Key: d.Key}
	waitFor(t, 15*time.Second, "the key free after the dead job", func() bool {
		kl, err := s.co.TakeKey(ctx, holder, "another-worker")
		return err == nil && kl.Taken
	})
	if _, err := deadLetters.Replay(ctx, letter.Seq); err != nil {
		t.Fatalf("replay: %v", err)
	}
	holdKey(t, s.co, holder, &busy, maxDeliver+3)
	if ok, err := s.co.ReleaseKey(ctx, holder, "another-worker"); err != nil || !ok {
		t.Fatalf("ReleaseKey: %v %v", ok, err)
	}
	waitFor(t, 30*time.Second, "the replay, or a second dead letter", func() bool {
		return len(h.ran()) == 2 || dead.Load() > 1
	})
	runs := h.ran()
	if dead.Load() != 1 {
		t.Errorf("%d dead letters, want the first run's only: the replay only waited for its key (%d busy deliveries)", dead.Load(), busy.Load())
	}
	if len(runs) != 2 || runs[1].Replay == "" || runs[1].Attempt != 1 || runs[1].ID() != runs[0].ID() {
		t.Errorf("runs %d; want the replay once as attempt 1, with its job's identity", len(runs))
	}
}

// TestBypassedExclusiveJobRunsWhenRedisGoesAwayAfterItsWaits: a job
// published without a reservation (fail open) finds its key busy for more
// deliveries than MaxDeliver (waits, no attempts), then Redis goes away:
// it runs without the lease, as its policy chose availability, as a first
// attempt. Its waits are in the unreachable Redis; counting its deliveries
// instead dead-lettered it unrun, "started 5 times without finishing"
// (chaos 7a's long form on held rounds, 2 events lost; fails so on
// 14928e3).
func TestBypassedExclusiveJobRunsWhenRedisGoesAwayAfterItsWaits(t *testing.T) {
	t.Parallel()
	const maxDeliver = 5
	p := debounce.Policy{Type: "report", Mode: debounce.ModeDedup, KeyFields: []string{"k"}, Exclusive: true, Lease: 3 * time.Second}
	pub := debounce.PublisherFunc(func(context.Context, debounce.Job) error { return nil })
	prefix := testenv.Prefix(t)
	up, err := debounce.New(debounce.Config{Redis: testenv.SharedRedis(t).Client(t), Publisher: pub, Prefix: prefix, Policies: []debounce.Policy{p}})
	if err != nil {
		t.Fatal(err)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	gone := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), DisableIdentity: true, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = gone.Close() })
	away, err := debounce.New(debounce.Config{Redis: gone, Publisher: pub, Prefix: prefix, Policies: []debounce.Policy{p}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key, err := up.RoundKeyOf(debounce.Event{Type: p.Type, Args: json.RawMessage(`{"k":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	holder := debounce.Job{Type: p.Type, Key: key}
	if kl, err := up.TakeKey(ctx, holder, "another-worker"); err != nil || !kl.Taken {
		t.Fatalf("TakeKey: %+v %v", kl, err)
	}
	bypassed := debounce.Job{Type: p.Type, Key: key, Mode: debounce.ModeDedup, Bypass: "b-7a", TTL: time.Hour, Args: json.RawMessage(`{"k":1}`)}
	for delivery := 1; delivery <= maxDeliver; delivery++ {
		job := worker.Job{Job: bypassed, Attempt: delivery}
		st, err := worker.StartDelivery(ctx, up, pub, &job, maxDeliver, time.Second)
		if err != nil || st.Action != worker.StartRetry || st.Result != worker.JobKeyBusy {
			t.Fatalf("delivery %d, the key held by another: %+v %v; want a wait", delivery, st, err)
		}
	}
	job := worker.Job{Job: bypassed, Attempt: maxDeliver + 1}
	st, err := worker.StartDelivery(ctx, away, pub, &job, maxDeliver, time.Second)
	if err != nil || st.Action != worker.StartRun || job.Attempt != 1 {
		t.Errorf("delivery %d, Redis away: %+v %v, attempt %d; want it run without the lease as a first attempt", maxDeliver+1, st, err, job.Attempt)
	}
	// Past the backstop on deliveries, it is dead-lettered all the same.
	job = worker.Job{Job: bypassed, Attempt: worker.MaxDeliveries(maxDeliver) + 1}
	if st, err := worker.StartDelivery(ctx, away, pub, &job, maxDeliver, time.Second); err != nil || st.Action != worker.StartDead {
		t.Errorf("delivery %d, Redis away: %+v %v; want it dead-lettered", worker.MaxDeliveries(maxDeliver)+1, st, err)
	}
}
