package debounce_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
)

// A storm of "recompute tenant 42" events becomes one job, due 30 seconds
// after the first: the round waits in Redis and a forwarder publishes its
// job when due; the worker closes the round as the job starts.
func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	// miniredis's TTLs stand still unless moved; freeze its clock too, so
	// expiry times (part of every round's token) read back exactly.
	var mu sync.Mutex // the Coalescer reads the clock from its flusher too
	clock := time.Now()
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	mr.SetTime(clock)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), DisableIdentity: true, MaxRetries: -1})
	defer rdb.Close()

	var published []debounce.Job
	c, err := debounce.New(debounce.Config{
		Redis: rdb,
		Publisher: debounce.PublisherFunc(func(_ context.Context, job debounce.Job) error {
			published = append(published, job) // the JetStream publisher in real life
			return nil
		}),
		Policies: []debounce.Policy{{
			Type:      "recompute_financials",
			Mode:      debounce.ModeDebounce,
			Window:    30 * time.Second,
			KeyFields: []string{"tenant_id"},
		}},
		Now: now,
		// Rounds wait in Redis until due (the default on a Redis with an
		// append-only file; miniredis has none). The forwarder runs below,
		// by hand; in a producer the Coalescer runs its own while rounds
		// wait (and workers run one).
		Schedules:  debounce.SchedulesRedis,
		Forwarding: debounce.ForwardingOff,
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for order := range 5 {
		args := fmt.Sprintf(`{"tenant_id":42,"order_id":%d}`, 1000+order)
		d, err := c.Submit(ctx, debounce.Event{Type: "recompute_financials", Args: json.RawMessage(args)})
		if err != nil {
			panic(err)
		}
		fmt.Println(d.Outcome, d.Events)
	}
	fmt.Println(len(published), "jobs published: the round waits in Redis until due")

	// Events 2 to 5 were answered without a Redis call: the flush adds them
	// to the round within milliseconds. Flush does it now, as a producer
	// does before it stops.
	if err := c.Flush(ctx); err != nil {
		panic(err)
	}
	// 30 seconds later the job is delivered.
	mu.Lock()
	clock = clock.Add(30 * time.Second)
	mu.Unlock()
	mr.SetTime(now())
	mr.FastForward(30 * time.Second)
	if _, err := c.NewForwarder(nil).Pass(ctx); err != nil { // a worker runs it every 100 ms
		panic(err)
	}
	job := published[0]
	fmt.Printf("%d job, due %v after its first event, args %s\n", len(published), job.DueAt.Sub(job.OpenedAt), job.Args)
	rel, err := c.Start(ctx, job) // in the worker, before the handler runs
	if err != nil {
		panic(err)
	}
	fmt.Println(rel.Result, rel.Summary.Events, "events")
	d, _ := c.Submit(ctx, debounce.Event{Type: "recompute_financials", Args: json.RawMessage(`{"tenant_id":42}`)})
	fmt.Println("next event:", d.Outcome)
	// Output:
	// scheduled 1
	// coalesced 2
	// coalesced 3
	// coalesced 4
	// coalesced 5
	// 0 jobs published: the round waits in Redis until due
	// 1 job, due 30s after its first event, args {"tenant_id":42,"order_id":1000}
	// released 5 events
	// next event: scheduled
}
