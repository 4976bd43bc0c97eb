package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/worker"
)

// flakyRepublisher fails the worker's re-schedules of a not-due round a
// number of times, as NATS trouble would.
type flakyRepublisher struct {
	next  debounce.Publisher
	mu    sync.Mutex
	fails int
	tried int
}

func (p *flakyRepublisher) Publish(ctx context.Context, job debounce.Job) error {
	p.mu.Lock()
	p.tried++
	fail := p.fails > 0
	if fail {
		p.fails--
	}
	p.mu.Unlock()
	if fail {
		return errors.New("nats: timeout")
	}
	return p.next.Publish(ctx, job)
}

// TestNotDueIsNeverDeadLettered: an extended round whose job fires before
// its new due time is published again by the worker. When those publishes
// fail more often than MaxDeliver, the delivery is redelivered each time;
// it must never be dead-lettered (that stranded the round: marked published,
// no schedule, every later event accepted and never run). The job runs once,
// at the extended due time, with every event.
func TestNotDueIsNeverDeadLettered(t *testing.T) {
	t.Parallel()
	s := newStack(t, testenv.NATS(t), debounce.Policy{Type: "sync", Mode: debounce.ModeDebounce, Window: time.Second,
		Extend: true, MaxWait: 20 * time.Second, KeyFields: []string{"doc"}})
	flaky := &flakyRepublisher{next: s.pub, fails: 8}
	var got started
	w, err := worker.New(worker.Config{JetStream: s.js, Coalescer: s.co, Publisher: flaky, Types: []string{"sync"},
		MaxDeliver: 3, AckWait: 2 * time.Second, Backoff: []time.Duration{50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, got.handler) }()
	defer func() { cancel(); <-done }()

	s.submit(t, "sync", `{"doc":1,"n":0}`)
	// Keep extending past the first due time (1s), then go quiet.
	for i := range 6 {
		time.Sleep(300 * time.Millisecond)
		s.submit(t, "sync", `{"doc":1,"n":`+string(rune('1'+i))+`}`)
	}
	count := func() int { j, _ := got.snapshot(); return len(j) }
	waitFor(t, 15*time.Second, "the extended round's job", func() bool { return count() >= 1 })
	quiet(t, 1500*time.Millisecond, "jobs", count)
	jobs, _ := got.snapshot()
	if len(jobs) != 1 || jobs[0].Summary.Events != 7 || jobs[0].Release != debounce.ReleaseReleased {
		t.Fatalf("jobs %d, first %+v: want one released with the 7 events", len(jobs), jobs[0].Summary)
	}
	flaky.mu.Lock()
	tried := flaky.tried
	flaky.mu.Unlock()
	if tried < 9 {
		t.Errorf("the worker tried %d re-schedules; the test wants more failures than MaxDeliver before the job runs", tried)
	}
	// And the key is not stranded: the next event opens a new round that runs.
	s.submit(t, "sync", `{"doc":1,"n":99}`)
	waitFor(t, 10*time.Second, "the next round's job", func() bool { return count() >= 2 })
}
