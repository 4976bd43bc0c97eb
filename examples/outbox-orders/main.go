// Transactional outbox (seed 002, "an outbox in the database"): an order
// service writes each order and its "sync this tenant's orders" event in
// one Postgres transaction, so the event exists exactly when the order
// does. A relay (outbox.Relay; coalesce serve runs one with
// outbox.postgres) submits committed rows through the policy; one job per
// tenant carries every committed order id, and the order whose transaction
// rolled back (payment declined) is in none. The service "crashes" right
// after a commit, before it could have called Submit: the event is not
// lost, because it was never the service's to send.
//
//	go run ./examples/outbox-orders --postgres postgres://user:pass@127.0.0.1:5432/shop
//	go run ./examples/outbox-orders --postgres URL --redis redis://127.0.0.1:6379/0 --nats nats://127.0.0.1:4222
//
// The database needs the outbox tables; the example creates them
// (outbox.Migrate, like `coalesce outbox migrate`) and a table of its own,
// example_orders. Redis and NATS default to in-process servers.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/coalescetest"
	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/outbox"
	"github.com/coalesce-io/coalesce/publisher"
	"github.com/coalesce-io/coalesce/worker"
)

func main() {
	pgURL := flag.String("postgres", os.Getenv("COALESCE_OUTBOX_POSTGRES"), "Postgres URL (default $COALESCE_OUTBOX_POSTGRES)")
	redisURL := flag.String("redis", "", "Redis URL (default: an in-process Redis)")
	natsURL := flag.String("nats", "", "NATS URL, server 2.12 or later (default: an in-process NATS)")
	flag.Parse()
	if *pgURL == "" {
		log.Fatal("outbox-orders needs a Postgres database: --postgres postgres://user:password@host:5432/db (or COALESCE_OUTBOX_POSTGRES)")
	}
	if err := run(*pgURL, *redisURL, *natsURL, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

const jobType = "sync_orders"

// placeOrder is the order service: the order and its event in one
// transaction. A declined payment rolls both back.
func placeOrder(ctx context.Context, db *pgxpool.Pool, tenant, order int, declined bool) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO example_orders (tenant_id, order_id) VALUES ($1, $2)`, tenant, order); err != nil {
		return err
	}
	// From another language: INSERT INTO coalesce_outbox (type, args) VALUES ($1, $2)
	if _, err := outbox.InsertJSON(ctx, tx, jobType, map[string]int{"tenant_id": tenant, "order_id": order}); err != nil {
		return err
	}
	if declined {
		return errors.New("payment declined")
	}
	return tx.Commit(ctx)
	// A crash here, after the commit, loses nothing: the relay sends the event.
}

func run(pgURL, redisURL, natsURL string, out io.Writer) error {
	ctx := context.Background()
	if redisURL == "" || natsURL == "" {
		dev, err := coalescetest.StartServers()
		if err != nil {
			return err
		}
		defer dev.Close()
		redisURL, natsURL = dev.RedisURL, dev.NATSURL
	}
	db, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := outbox.Migrate(ctx, db); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_orders (tenant_id int, order_id int)`); err != nil {
		return err
	}
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return err
	}
	opt.DisableIdentity, opt.MaxRetries = true, -1 // never resend a command whose reply was lost
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	pub, err := publisher.New(ctx, js, &publisher.Config{Stream: "EXAMPLE_OUTBOX", Prefix: "exobx"})
	if err != nil {
		return err
	}
	policy := debounce.Policy{Type: jobType, Mode: debounce.ModeDebounce, Window: time.Second,
		KeyFields: []string{"tenant_id"}, Payload: debounce.PayloadAccumulate, ItemField: "order_id"}
	// The relay's Coalescer fails closed: with Redis down, rows wait in the
	// outbox instead of being published without a reservation.
	co, err := debounce.New(debounce.Config{Redis: rdb, Publisher: pub, Prefix: "exobx",
		Policies: outbox.FailClosed([]debounce.Policy{policy})})
	if err != nil {
		return err
	}
	relay, err := outbox.New(outbox.Config{Pool: db, Coalescer: co})
	if err != nil {
		return err
	}
	w, err := worker.New(worker.Config{JetStream: js, Coalescer: co, Publisher: pub, Types: []string{jobType}})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	jobs := make(chan *worker.Job, 16)
	wg.Go(func() {
		_ = w.Run(runCtx, func(_ context.Context, job *worker.Job) error { jobs <- job; return nil })
	})

	// The service takes orders before the relay even runs (it could be down
	// for an hour: the events wait in the outbox).
	want := map[int][]string{}
	for _, o := range []struct {
		tenant, order int
		declined      bool
	}{{42, 1001, false}, {42, 1002, false}, {7, 2001, false}, {42, 1003, true}, {7, 2002, false}, {42, 1004, false}} {
		err := placeOrder(ctx, db, o.tenant, o.order, o.declined)
		switch {
		case err != nil && !o.declined:
			return err
		case err != nil:
			fmt.Fprintf(out, "order %d of tenant %d: %v, rolled back with its event\n", o.order, o.tenant, err)
		default:
			want[o.tenant] = append(want[o.tenant], fmt.Sprint(o.order))
			fmt.Fprintf(out, "order %d of tenant %d committed with its event\n", o.order, o.tenant)
		}
	}
	wg.Go(func() { _ = relay.Run(runCtx) })

	got := map[int][]string{}
	deadline := time.After(15 * time.Second)
	for len(got[42]) < len(want[42]) || len(got[7]) < len(want[7]) {
		select {
		case job := <-jobs:
			var args struct {
				Tenant int `json:"tenant_id"`
			}
			_ = json.Unmarshal(job.Args, &args)
			for _, it := range job.Summary.Items {
				got[args.Tenant] = append(got[args.Tenant], string(it))
			}
			fmt.Fprintf(out, "job: sync tenant %d's orders %s\n", args.Tenant, job.Summary.Items)
		case <-deadline:
			return fmt.Errorf("after 15 s the jobs carried %v, want %v", got, want)
		}
	}
	for tenant := range want {
		slices.Sort(got[tenant])
		if !slices.Equal(got[tenant], want[tenant]) {
			return fmt.Errorf("tenant %d: jobs carried orders %v, want the committed %v", tenant, got[tenant], want[tenant])
		}
	}
	left, _, err := outbox.Backlog(ctx, db)
	if err != nil {
		return err
	}
	if left != 0 {
		return fmt.Errorf("%d rows left in the outbox", left)
	}
	fmt.Fprintln(out, "every committed order reached its tenant's job; the declined one none")
	return nil
}
