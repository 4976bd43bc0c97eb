package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/worker"
)

// TestLostAckDoesNotRunAgain: the worker finishes the round (Finish) before
// it acks; when the ack is lost (its connection dies), the redelivery used
// to run the handler again, with an empty summary. Finish's done marker now
// tells the redelivery the job is done: acknowledged, not run.
func TestLostAckDoesNotRunAgain(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	s := newStack(t, srv, debounce.Policy{Type: "mail", Mode: debounce.ModeDebounce, Window: time.Second, KeyFields: []string{"u"}})
	ncA, jsA := srv.Connect(t, nats.MaxReconnects(0))
	wA, err := worker.New(worker.Config{JetStream: jsA, Coalescer: s.co, Publisher: s.pub, Types: []string{"mail"}, AckWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	ctxA, cancelA := context.WithCancel(context.Background())
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		_ = wA.Run(ctxA, func(ctx context.Context, j *worker.Job) error {
			runs.Add(1)
			ncA.Close() // the ack that follows never reaches the server
			return nil
		})
	}()
	s.submit(t, "mail", `{"u":1}`)
	waitFor(t, 5*time.Second, "the first run", func() bool { return runs.Load() == 1 })
	cancelA()
	<-aDone
	var again atomic.Int64
	s.run(t, func(ctx context.Context, j *worker.Job) error {
		again.Add(1)
		return nil
	}, worker.Config{Types: []string{"mail"}, AckWait: time.Second})
	waitFor(t, 8*time.Second, "the redelivery to be acknowledged", func() bool {
		info, err := s.js.Stream(context.Background(), s.pub.Stream())
		if err != nil {
			return false
		}
		st, _ := info.Info(context.Background())
		return st.State.Msgs == 0
	})
	if n := again.Load(); n != 0 {
		t.Errorf("the job ran again %d times after its ack was lost", n)
	}
}
