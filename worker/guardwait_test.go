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

// TestGuardWaitIsNoAttempt: a worker that died mid-job leaves its run-once
// claim until ClaimTTL. Deliveries that find the claim held wait; they must
// not count as attempts, or a small max_deliver dead-letters the job before
// the claim ever expires and it never runs.
func TestGuardWaitIsNoAttempt(t *testing.T) {
	t.Parallel()
	s := newStack(t, testenv.NATS(t), debounce.Policy{Type: "charge", Mode: debounce.ModeDedup, KeyFields: []string{"order"}})
	gprefix := testenv.Prefix(t) + "g"
	d := s.submit(t, "charge", `{"order":9}`)
	// The dead worker's claim: held for 2.5 s more, never completed.
	claimKey := gprefix + "{charge:" + d.Round.String() + "@" + d.Key.String() + "}"
	if err := s.rdb.Set(context.Background(), claimKey, "running:dead", 2500*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	var attempt atomic.Int64
	s.run(t, func(ctx context.Context, j *worker.Job) error {
		ran.Add(1)
		attempt.Store(int64(j.Attempt))
		return nil
	}, worker.Config{Types: []string{"charge"}, MaxDeliver: 2, AckWait: time.Second,
		Guards: map[string]worker.GuardConfig{"charge": {Redis: s.rdb, Prefix: gprefix, ClaimTTL: 900 * time.Millisecond}}})
	waitFor(t, 10*time.Second, "the job to run once the dead worker's claim expired", func() bool { return ran.Load() == 1 })
	if a := attempt.Load(); a != 1 {
		t.Errorf("the job ran as attempt %d; deliveries that waited for the claim are no attempts, want 1", a)
	}
}
