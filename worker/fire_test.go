package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/worker"
)

// slowFirstPublisher holds the first publish (the opener's) for a while.
type slowFirstPublisher struct {
	next  debounce.Publisher
	delay time.Duration
	once  sync.Once
	began chan struct{}
}

func (p *slowFirstPublisher) Publish(ctx context.Context, job debounce.Job) error {
	first := false
	p.once.Do(func() { first = true })
	if first {
		close(p.began)
		time.Sleep(p.delay)
	}
	return p.next.Publish(ctx, job)
}

// TestFillingARoundUnderAnOpenersPublishRunsOneJob: the event that fills an
// accumulate round while the opener's publish is still in flight publishes
// the round itself. It used to publish version 0 (due now, so straight to
// the job subject) and then version 1 as a schedule due now: two messages
// with different ids, two jobs, the handler ran twice for one round. Then
// the opener's own version 0 lands too. The handler must run once, with both
// items.
func TestFillingARoundUnderAnOpenersPublishRunsOneJob(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	// The race is the opener's publish of a JetStream schedule: a round held
	// in Redis is published by a forwarder alone (debounce's deferred tests).
	s := newStackWith(t, srv, testenv.SharedRedis(t).Client(t), jetStreamSchedules, debounce.Policy{Type: "batch", Mode: debounce.ModeDebounce, Window: time.Second,
		Payload: debounce.PayloadAccumulate, ItemField: "id", MaxItems: 2, KeyFields: []string{"k"}})
	slow := &slowFirstPublisher{next: s.pub, delay: 1500 * time.Millisecond, began: make(chan struct{})}
	co, err := debounce.New(debounce.Config{Redis: s.rdb, Publisher: slow, Policies: s.co.Policies(), Prefix: s.prefix, Schedules: debounce.SchedulesJetStream})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := 0
	var items [][]byte
	s.run(t, func(ctx context.Context, j *worker.Job) error {
		mu.Lock()
		runs++
		for _, it := range j.Summary.Items {
			items = append(items, it)
		}
		mu.Unlock()
		time.Sleep(300 * time.Millisecond)
		return nil
	}, worker.Config{Types: []string{"batch"}, Concurrency: 4})
	opened := make(chan error, 1)
	go func() {
		_, err := co.Submit(context.Background(), debounce.Event{Type: "batch", Args: []byte(`{"k":1,"id":1}`)})
		opened <- err
	}()
	<-slow.began
	d, err := co.Submit(context.Background(), debounce.Event{Type: "batch", Args: []byte(`{"k":1,"id":2}`)})
	if err != nil || d.Outcome != debounce.OutcomeCoalesced || !d.DueAt.Before(time.Now().Add(100*time.Millisecond)) {
		t.Fatalf("the filling event: %+v %v, want coalesced and due now", d, err)
	}
	if err := <-opened; err != nil {
		t.Fatalf("the opener: %v", err)
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return runs }
	waitFor(t, 10*time.Second, "the round's job", func() bool { return count() >= 1 })
	quiet(t, 3*time.Second, "handler runs", count)
	mu.Lock()
	defer mu.Unlock()
	if runs != 1 || len(items) != 2 {
		t.Fatalf("the handler ran %d times for one round (items %q); want once with both items", runs, items)
	}
}
