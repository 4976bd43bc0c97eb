// Accumulated ids: a stream of "product N changed" events for a tenant
// becomes one reindex job that carries the distinct product ids that changed.
// The policy is a 1 second debounce keyed on key_fields [tenant_id] with
// payload accumulate of item_field product_id: tenant 1's 200 changes to 40
// products become one job, a second after the first change, holding the 40
// ids. Reaching max_items (100) fires a round at once instead of at the
// window's end: tenant 2's bulk import fills its round with 100 products and
// the job starts right away; the import's next changes, arriving after that
// job started, open the next round.
//
// max_items is when to fire, not a cap on the payload: changes that arrive
// between the round filling and its job starting still join it, so a job can
// carry a few more than max_items ids.
//
//	go run ./examples/accumulate-ids                       # in-process NATS and Redis
//	go run ./examples/accumulate-ids --redis redis://127.0.0.1:6379/0 --nats nats://127.0.0.1:4222
//
// The producer half is what the catalogue service embeds; the worker half
// reindexes. They share Redis (reservations) and NATS (jobs).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"
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

// Names of this example's stream, subjects and keys, so it can share real
// servers with the other examples.
const (
	stream      = "EXAMPLE_PRODUCTS"
	prefix      = "ex-products"
	jobType     = "reindex_products"
	window      = time.Second
	maxItems    = 100
	waitForJobs = 10 * time.Second // bound on every wait for a job
)

func main() {
	redisURL := flag.String("redis", "", "Redis URL (default: an in-process Redis)")
	natsURL := flag.String("nats", "", "NATS URL, server 2.12 or later (default: an in-process NATS)")
	flag.Parse()
	if err := run(context.Background(), *redisURL, *natsURL, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// change is the event's args.
type change struct {
	TenantID  int    `json:"tenant_id"`
	ProductID int    `json:"product_id"`
	Field     string `json:"field"`
}

func run(ctx context.Context, redisURL, natsURL string, out io.Writer) error {
	if redisURL == "" || natsURL == "" {
		// In-process servers, as a test would use (package coalescetest).
		dev, err := coalescetest.StartServers()
		if err != nil {
			return err
		}
		defer dev.Close()
		redisURL, natsURL = dev.RedisURL, dev.NATSURL
	}
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
	pub, err := publisher.New(ctx, js, &publisher.Config{Stream: stream, Prefix: prefix})
	if err != nil {
		return err
	}
	co, err := debounce.New(debounce.Config{
		Redis:     rdb,
		Publisher: pub,
		Prefix:    prefix,
		Policies: []debounce.Policy{{
			Type:      jobType,
			Mode:      debounce.ModeDebounce,
			Window:    window,
			KeyFields: []string{"tenant_id"}, // one round per tenant
			Payload:   debounce.PayloadAccumulate,
			ItemField: "product_id", // the job gets the distinct product ids, not whole events
			MaxItems:  maxItems,
		}},
	})
	if err != nil {
		return err
	}

	// Worker half: reindex the products each job names.
	jobs := make(chan started, 16)
	w, err := worker.New(worker.Config{
		JetStream: js, // stream and subjects: the Publisher's
		Coalescer: co, Publisher: pub, Types: []string{jobType},
		ShutdownTimeout: 2 * time.Second,
	})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	runCtx, stop := context.WithCancel(ctx)
	defer wg.Wait()
	defer stop()
	wg.Go(func() {
		_ = w.Run(runCtx, func(ctx context.Context, job *worker.Job) error {
			select {
			case jobs <- started{job, time.Now()}: // here: reindex job.Summary.Items
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	})

	// Producer half.
	submit := func(tenant string, changes []change) error {
		outcomes := map[debounce.Outcome]int{}
		var due time.Time
		filled := false
		for _, c := range changes {
			args, _ := json.Marshal(c)
			d, err := co.Submit(ctx, debounce.Event{Type: jobType, Args: args})
			if err != nil {
				return err
			}
			outcomes[d.Outcome]++
			if d.Outcome == debounce.OutcomeScheduled {
				due = d.DueAt
			}
			// The event that fills the round brings its due time forward to now.
			filled = filled || d.DueAt.Before(due)
		}
		fmt.Fprintf(out, "%s: %d events -> %d scheduled, %d coalesced", tenant, len(changes),
			outcomes[debounce.OutcomeScheduled], outcomes[debounce.OutcomeCoalesced])
		if filled {
			fmt.Fprintf(out, "; the round reached %d products: due now", maxItems)
		} else {
			fmt.Fprintf(out, "; due in %v", window)
		}
		fmt.Fprintln(out)
		if outcomes[debounce.OutcomeScheduled] != 1 || outcomes[debounce.OutcomeCoalesced] != len(changes)-1 {
			return fmt.Errorf("%s: outcomes %v, want one round", tenant, outcomes)
		}
		return nil
	}
	var trickle, imported, more []change
	for i := range 200 { // 200 edits, five to each of 40 products
		trickle = append(trickle, change{TenantID: 1, ProductID: 1 + i%40, Field: []string{"price", "stock"}[i%2]})
	}
	for i := range maxItems + 30 { // a bulk import of 130 new products
		c := change{TenantID: 2, ProductID: 2001 + i, Field: "created"}
		if i < maxItems {
			imported = append(imported, c)
		} else {
			more = append(more, c)
		}
	}
	if err := submit("tenant 1, 40 products edited", trickle); err != nil {
		return err
	}
	if err := submit("tenant 2, bulk import (first 100)", imported); err != nil {
		return err
	}

	c := collector{jobs: jobs, out: out}
	if err := c.expect(2, 2001, 2100, len(imported), true); err != nil {
		return err
	}
	if err := c.expect(1, 1, 40, len(trickle), false); err != nil {
		return err
	}
	// The import goes on after its full round's job started: the next round.
	if err := submit("tenant 2, bulk import (30 more)", more); err != nil {
		return err
	}
	if err := c.expect(2, 2101, 2130, len(more), false); err != nil {
		return err
	}
	select {
	case s := <-jobs:
		return fmt.Errorf("unexpected job %s with %d products", s.job.Args, len(s.job.Summary.Items))
	case <-time.After(500 * time.Millisecond):
	}
	return nil
}

// started is a job as its handler got it.
type started struct {
	job *worker.Job
	at  time.Time
}

// collector hands out jobs in the order the story tells them, whatever the
// order they started in.
type collector struct {
	jobs    <-chan started
	out     io.Writer
	stashed []started
}

// expect waits for the job of tenant, checks it carries the products from
// first to last and counts events, and prints it. full: the job fired when
// its round reached max_items, not at the window's end.
func (c *collector) expect(tenant, first, last, events int, full bool) error {
	timeout := time.After(waitForJobs)
	for {
		if i := slices.IndexFunc(c.stashed, func(s started) bool { return tenantOf(s.job) == tenant }); i >= 0 {
			s := c.stashed[i]
			c.stashed = slices.Delete(c.stashed, i, i+1)
			return c.check(s, tenant, first, last, events, full)
		}
		select {
		case s := <-c.jobs:
			c.stashed = append(c.stashed, s)
		case <-timeout:
			return fmt.Errorf("expected a job for tenant %d, timed out", tenant)
		}
	}
}

func (c *collector) check(s started, tenant, first, last, events int, full bool) error {
	job := s.job
	ids := make([]int, 0, len(job.Summary.Items))
	for _, it := range job.Summary.Items {
		id, err := strconv.Atoi(string(it))
		if err != nil {
			return fmt.Errorf("tenant %d: item %s is not a product id", tenant, it)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids) // items come sorted by their JSON text: "10" before "9"
	// A full round is due when it filled, before its window's end (a round
	// held in Redis is then forwarded at once; one with a JetStream schedule
	// is published again, as version 1).
	fired := job.DueAt.Before(job.OpenedAt.Add(window))
	why := "the window ended"
	if fired {
		why = fmt.Sprintf("fired when it reached %d products", maxItems)
	}
	fmt.Fprintf(c.out, "job: tenant %d, reindex %d products %s from %d events, started %v after the first: %s\n",
		tenant, len(ids), span(ids), job.Summary.Events, s.at.Sub(job.Summary.FirstSeen).Round(100*time.Millisecond), why)

	var want []int
	for id := first; id <= last; id++ {
		want = append(want, id)
	}
	switch {
	case !slices.Equal(ids, want):
		return fmt.Errorf("tenant %d: products %s, want %d..%d", tenant, span(ids), first, last)
	case job.Summary.Events != events:
		return fmt.Errorf("tenant %d: %d events, want %d", tenant, job.Summary.Events, events)
	case fired != full:
		return fmt.Errorf("tenant %d: version %d due %v after the first event; want fired when full: %v",
			tenant, job.Version, job.DueAt.Sub(job.OpenedAt), full)
	}
	return nil
}

func tenantOf(job *worker.Job) int {
	var c change
	_ = json.Unmarshal(job.Args, &c) // the args of the round's first event
	return c.TenantID
}

// span writes sorted ids as runs: "1..40", "7 9..12".
func span(ids []int) string {
	var b strings.Builder
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(ids[i]))
		if j > i {
			b.WriteString(".." + strconv.Itoa(ids[j]))
		}
		i = j + 1
	}
	return b.String()
}
