// Charge once (seed 000, step 6: "record completion in the same database
// transaction as the effect, with a unique constraint, and keep the Redis
// key as a fast pre-check"): a worker charges an invoice, and its handler
// fails afterwards (the receipt e-mail bounces), so the job is retried. The
// Redis run-once guard releases its claim when a handler fails, and its
// "done" would expire anyway (or go with a Redis restart, or not apply to a
// dead letter replayed days later): it cannot tell the retry that the charge
// happened. The effect record can: the charge row and the record
// (coalesce_effects, package effect) commit in one transaction, and the
// retry finds the record and charges nothing.
//
//	go run ./examples/outbox-charge-once --postgres postgres://user:pass@127.0.0.1:5432/billing
//	go run ./examples/outbox-charge-once --postgres URL --redis redis://127.0.0.1:6379/0 --nats nats://127.0.0.1:4222
//
// The example creates the effect table (outbox.Migrate, like `coalesce
// outbox migrate`) and one of its own, example_charges. Redis and NATS
// default to in-process servers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/coalescetest"
	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/effect"
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
		log.Fatal("outbox-charge-once needs a Postgres database: --postgres postgres://user:password@host:5432/db (or COALESCE_OUTBOX_POSTGRES)")
	}
	if err := run(*pgURL, *redisURL, *natsURL, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

const jobType = "charge_invoice"

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
	if err := outbox.Migrate(ctx, db); err != nil { // creates coalesce_effects too
		return err
	}
	if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_charges (invoice text, cents int, at timestamptz DEFAULT now())`); err != nil {
		return err
	}
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return err
	}
	opt.DisableIdentity, opt.MaxRetries = true, -1
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
	pub, err := publisher.New(ctx, js, &publisher.Config{Stream: "EXAMPLE_CHARGE", Prefix: "excharge"})
	if err != nil {
		return err
	}
	co, err := debounce.New(debounce.Config{Redis: rdb, Publisher: pub, Prefix: "excharge",
		Policies: []debounce.Policy{{Type: jobType, Mode: debounce.ModeDedup, KeyFields: []string{"invoice"}}}})
	if err != nil {
		return err
	}
	w, err := worker.New(worker.Config{JetStream: js, Coalescer: co, Publisher: pub, Types: []string{jobType},
		Backoff: []time.Duration{200 * time.Millisecond},
		// The fast pre-check for hot duplicates: kept, but not relied on.
		Guards: map[string]worker.GuardConfig{jobType: {Redis: rdb, Prefix: "excharge-guard"}}})
	if err != nil {
		return err
	}
	var attempts atomic.Int64
	done := make(chan struct{})
	handler := func(ctx context.Context, job *worker.Job) error {
		n := attempts.Add(1)
		// The effect and its record commit together, or neither does.
		charged, err := effect.Once(ctx, db, effect.RecordOf(job), func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO example_charges (invoice, cents) VALUES ($1, 4200)`, string(job.Args))
			return err
		})
		if err != nil {
			return err // nothing was recorded: the retry charges
		}
		if !charged {
			fmt.Fprintf(out, "attempt %d: already charged (coalesce_effects has %s): acknowledged, nothing charged\n", n, effect.KeyOf(job))
			close(done)
			return nil
		}
		fmt.Fprintf(out, "attempt %d: charged %s, then the receipt e-mail bounced: the job is retried\n", n, job.Args)
		return errors.New("receipt e-mail bounced")
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	wg.Go(func() { _ = w.Run(runCtx, handler) })

	if _, err := co.Submit(ctx, debounce.Event{Type: jobType, Args: []byte(`{"invoice":"INV-42"}`)}); err != nil {
		return err
	}
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		return fmt.Errorf("no retry within 15 s (%d attempts)", attempts.Load())
	}
	var charges int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM example_charges WHERE invoice = '{"invoice":"INV-42"}'`).Scan(&charges); err != nil {
		return err
	}
	fmt.Fprintf(out, "charges of INV-42 in the database: %d\n", charges)
	if charges != 1 {
		return fmt.Errorf("INV-42 was charged %d times", charges)
	}
	return nil
}
