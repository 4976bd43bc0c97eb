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

// TestCancelAfterTheScheduleFired: cancelling a round whose schedule has
// already fired (its job waits in the stream) purges that job too, and
// leaves the round marked done, so no delivery runs it. A round whose job has
// started cannot be cancelled.
func TestCancelAfterTheScheduleFired(t *testing.T) {
	t.Parallel()
	s := newStack(t, testenv.NATS(t), debounce.Policy{Type: "report", Mode: debounce.ModeDebounce, Window: time.Second, KeyFields: []string{"k"}})
	ctx := context.Background()
	d := s.submit(t, "report", `{"k":1}`)
	time.Sleep(1600 * time.Millisecond) // the schedule fires; no worker yet
	_, res, err := s.co.CancelRound(ctx, "report", d.Key, d.Round)
	if err != nil || res != debounce.CancelCancelled {
		t.Fatalf("CancelRound: %s %v", res, err)
	}
	if n, err := s.pub.Cancel(ctx, "report", d.Key, d.Round); err != nil || n != 1 {
		t.Fatalf("purged %d messages (%v), want the fired job", n, err)
	}
	var ran atomic.Int64
	release := make(chan struct{})
	s.run(t, func(ctx context.Context, j *worker.Job) error {
		ran.Add(1)
		<-release
		return nil
	}, worker.Config{Types: []string{"report"}})
	time.Sleep(1500 * time.Millisecond)
	if n := ran.Load(); n != 0 {
		t.Fatalf("the cancelled round's job ran %d times", n)
	}
	// A round whose job is running: too late.
	d2 := s.submit(t, "report", `{"k":2}`)
	waitFor(t, 5*time.Second, "the second round's job to start", func() bool { return ran.Load() == 1 })
	if _, res, err := s.co.CancelRound(ctx, "report", d2.Key, d2.Round); err != nil || res != debounce.CancelStarted {
		t.Errorf("cancel of a started round: %s %v, want already_started", res, err)
	}
	close(release)
}
