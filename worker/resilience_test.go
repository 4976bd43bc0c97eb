package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/worker"
)

// TestWorkerSurvivesItsConsumerGoing: a JetStream failure under the
// worker's fetch loop (its consumer deleted, as after a lost stream leader or
// by an operator; a missed heartbeat) must not stop the worker from taking
// that type's jobs: it used to log "fetching jobs failed" and stop reading
// the type for good, while the process ran on (the long chaos run's NATS
// cluster scenario: 32,300 accepted events never run).
func TestWorkerSurvivesItsConsumerGoing(t *testing.T) {
	t.Parallel()
	s := newStack(t, testenv.NATS(t), debounce.Policy{Type: "sync", Mode: debounce.ModeDebounce, Window: time.Second, KeyFields: []string{"k"}})
	var got started
	s.run(t, got.handler, worker.Config{Types: []string{"sync"}})
	count := func() int { j, _ := got.snapshot(); return len(j) }
	s.submit(t, "sync", `{"k":1}`)
	waitFor(t, 5*time.Second, "the first job", func() bool { return count() == 1 })
	if err := s.js.DeleteConsumer(context.Background(), s.pub.Stream(), worker.ConsumerName(worker.DefaultDurable, "sync")); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		s.submit(t, "sync", fmt.Sprintf(`{"k":%d}`, 10+i))
	}
	waitFor(t, 15*time.Second, "the jobs after the consumer went", func() bool { return count() == 4 })
}
