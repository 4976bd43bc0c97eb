// Tenant recomputation debounce (seed 002): a burst of 1,400 "recompute this
// tenant's financials" events for three tenants becomes three jobs, each 2
// seconds after its tenant's first event, each told how many events it covers.
//
//	go run ./examples/tenant-recompute                       # in-process NATS and Redis
//	go run ./examples/tenant-recompute --redis redis://127.0.0.1:6379/0 --nats nats://127.0.0.1:4222
//
// The producer half is what an event-driven service embeds; the worker half
// is what runs the jobs. They share Redis (reservations) and NATS (jobs).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/coalescetest"
	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/publisher"
	"github.com/coalesce-io/coalesce/worker"
)

func main() {
	redisURL := flag.String("redis", "", "Redis URL (default: an in-process Redis)")
	natsURL := flag.String("nats", "", "NATS URL, server 2.12 or later (default: an in-process NATS)")
	flag.Parse()
	if err := run(*redisURL, *natsURL, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run is the example; it fails unless the storm became one job per round
// (three, one per tenant, when it fits in the window), every event in
// exactly one job.
func run(redisURL, natsURL string, out io.Writer) error {
	if redisURL == "" || natsURL == "" {
		// In-process servers, as a test would use (package coalescetest).
		dev, err := coalescetest.StartServers()
		if err != nil {
			return err
		}
		defer dev.Close()
		redisURL, natsURL = dev.RedisURL, dev.NATSURL
	}
	ctx := context.Background()
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return err
	}
	opt.DisableIdentity = true
	// Never resend a command whose reply was lost: a resent opening could
	// reopen a round that already ran (debounce.New refuses such a client).
	opt.MaxRetries = -1
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

	// Both halves: the stream, and one policy for the job type.
	pub, err := publisher.New(ctx, js, &publisher.Config{Stream: "EXAMPLE_TENANTS", Prefix: "example"})
	if err != nil {
		return err
	}
	co, err := debounce.New(debounce.Config{
		Redis:     rdb,
		Publisher: pub,
		Prefix:    "example",
		Policies: []debounce.Policy{{
			Type:      "recompute_financials",
			Mode:      debounce.ModeDebounce,
			Window:    2 * time.Second,
			KeyFields: []string{"tenant_id"}, // one round per tenant, whatever else the event says
		}},
	})
	if err != nil {
		return err
	}

	// Worker half: run the jobs as they come due.
	var wg sync.WaitGroup
	jobs := make(chan *worker.Job, 16)
	w, err := worker.New(worker.Config{
		JetStream: js, // stream and subjects: the Publisher's
		Coalescer: co, Publisher: pub, Types: []string{"recompute_financials"},
	})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer wg.Wait()
	defer stop()
	wg.Go(func() {
		_ = w.Run(runCtx, func(ctx context.Context, job *worker.Job) error {
			jobs <- job // here: recompute the tenant's financials once
			return nil
		})
	})

	// Producer half: a storm of equivalent events.
	start := time.Now()
	outcomes := map[debounce.Outcome]int{}
	for i := range 1400 {
		args := fmt.Sprintf(`{"tenant_id":%d,"period":"2026-08","order_id":%d}`, 1+i%3, 5000+i)
		d, err := co.Submit(ctx, debounce.Event{Type: "recompute_financials", Args: json.RawMessage(args)})
		if err != nil {
			return err
		}
		outcomes[d.Outcome]++
	}
	fmt.Fprintf(out, "1400 events in %v: %d scheduled, %d coalesced\n",
		time.Since(start).Round(time.Millisecond), outcomes[debounce.OutcomeScheduled], outcomes[debounce.OutcomeCoalesced])

	// One job per round: three when the storm fits in the window (2 s),
	// more when it takes longer (a slow machine): then events after a
	// round's job started open the next round. Either way every event is in
	// exactly one job.
	want := map[int]int{1: 467, 2: 467, 3: 466} // 1,400 events over tenants 1, 2, 3 in turn
	covered, jobsRun := map[int]int{}, 0
	for covered[1] < want[1] || covered[2] < want[2] || covered[3] < want[3] {
		select {
		case job := <-jobs:
			var args struct {
				TenantID int `json:"tenant_id"`
			}
			_ = json.Unmarshal(job.Args, &args)
			covered[args.TenantID] += job.Summary.Events
			jobsRun++
			fmt.Fprintf(out, "job: recompute tenant %d, covering %d events (%v after its first)\n",
				args.TenantID, job.Summary.Events, time.Since(job.Summary.FirstSeen).Round(100*time.Millisecond))
		case <-time.After(15 * time.Second):
			return fmt.Errorf("the jobs covered %v events per tenant within 15 s, want %v", covered, want)
		}
	}
	select {
	case job := <-jobs:
		return fmt.Errorf("a job more: %s covering %d events", job.Args, job.Summary.Events)
	case <-time.After(2500 * time.Millisecond): // a window and more
	}
	if covered[1] != want[1] || covered[2] != want[2] || covered[3] != want[3] || jobsRun != outcomes[debounce.OutcomeScheduled] {
		return fmt.Errorf("%d jobs for %d rounds covered %v events per tenant, want one per round and %v", jobsRun, outcomes[debounce.OutcomeScheduled], covered, want)
	}
	return nil
}
