package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/publisher"
	"github.com/coalesce-io/coalesce/worker"
)

// Three events for one tenant become one job a second later; the worker
// closes the round as the job starts and hands the handler its summary.
func Example() {
	// An in-process NATS JetStream and Redis, as coalesce serve's dev mode has.
	dir, _ := os.MkdirTemp("", "example-")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(5 * time.Second)
	mr := miniredis.NewMiniRedis()
	_ = mr.Start()
	defer mr.Close()
	mr.SetTime(time.Now()) // freeze miniredis's clock: round expiries read back exactly

	nc, _ := nats.Connect(ns.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), DisableIdentity: true, MaxRetries: -1})
	defer rdb.Close()
	ctx := context.Background()

	pub, err := publisher.New(ctx, js, nil) // creates the COALESCE stream
	if err != nil {
		panic(err)
	}
	co, err := debounce.New(debounce.Config{Redis: rdb, Publisher: pub, Policies: []debounce.Policy{{
		Type: "recompute_financials", Mode: debounce.ModeDebounce, Window: time.Second,
		KeyFields: []string{"tenant_id"}, Payload: debounce.PayloadAccumulate, ItemField: "order_id",
	}}})
	if err != nil {
		panic(err)
	}
	for _, order := range []int{1001, 1002, 1001} {
		args := fmt.Sprintf(`{"tenant_id":42,"order_id":%d}`, order)
		if _, err := co.Submit(ctx, debounce.Event{Type: "recompute_financials", Args: json.RawMessage(args)}); err != nil {
			panic(err)
		}
	}

	w, err := worker.New(worker.Config{JetStream: js, Coalescer: co, Publisher: pub, Types: []string{"recompute_financials"}})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(runCtx, func(ctx context.Context, job *worker.Job) error {
			fmt.Printf("%s for %s: %d events, orders %s\n", job.Type, job.Args, job.Summary.Events, job.Summary.Items)
			stop()
			return nil
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		fmt.Println("no job")
	}
	// Output: recompute_financials for {"tenant_id":42,"order_id":1001}: 3 events, orders [1001 1002]
}
