package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/worker"
)

// TestWorkerNamesTheForeignConsumer: a consumer of another name already
// takes a type's job subjects (a worker in another language, as a NATS user
// would write it). JetStream refuses the worker's consumer with "filtered
// consumer not unique on workqueue stream"; the worker's error says what
// that means and which consumer and filters to share. It said only the
// server's words on 1ba50f6.
func TestWorkerNamesTheForeignConsumer(t *testing.T) {
	t.Parallel()
	s := newStack(t, testenv.NATS(t), debounce.Policy{Type: "report", Mode: debounce.ModeDebounce, Window: time.Second})
	ctx := context.Background()
	if _, err := s.js.CreateOrUpdateConsumer(ctx, s.pub.Stream(), jetstream.ConsumerConfig{
		Durable: "node-report", FilterSubject: "co.run.report.>", AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Config{JetStream: s.js, Coalescer: s.co, Publisher: s.pub, Types: []string{"report"}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = w.Run(rctx, func(context.Context, *worker.Job) error { return nil })
	if err == nil {
		t.Fatal("the worker ran beside a consumer that takes its subjects")
	}
	for _, want := range []string{"another consumer already takes these jobs", "co.run.report.*.*", `consumer "coalesce_report"`, "docs/worker-protocol.md"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
