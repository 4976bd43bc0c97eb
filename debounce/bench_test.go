package debounce_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
)

// benchCoalescer is a Coalescer on the shared real redis-server with a
// publisher that does nothing: these benchmarks measure the decision (an
// opening is one Redis write: its job is published when due).
func benchCoalescer(b *testing.B, policy debounce.Policy) (*debounce.Coalescer, *redis.Client) {
	b.Helper()
	srv := testenv.SharedRedis(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true, MaxRetries: -1, PoolSize: 64})
	b.Cleanup(func() { rdb.Close() })
	c, err := debounce.New(debounce.Config{
		// Rounds held in Redis until due (schedules: redis); no
		// forwarder polls during the benchmark.
		Schedules:  debounce.SchedulesRedis,
		Forwarding: debounce.ForwardingOff,
		Redis:      rdb,
		Publisher:  debounce.PublisherFunc(func(context.Context, debounce.Job) error { return nil }),
		Policies:   []debounce.Policy{policy},
		Prefix:     testenv.Prefix(b),
	})
	if err != nil {
		b.Fatal(err)
	}
	return c, rdb
}

// BenchmarkSubmit measures one decision against a real redis-server: the
// coalesced path (every event joins one pending round per key) and the
// scheduled path (every event opens a new round: a fresh key each time).
func BenchmarkSubmit(b *testing.B) {
	policies := map[string]debounce.Policy{
		"debounce":            {Type: "t", Mode: debounce.ModeDebounce, Window: time.Hour, KeyFields: []string{"tenant_id"}},
		"debounce_extend":     {Type: "t", Mode: debounce.ModeDebounce, Window: time.Minute, Extend: true, MaxWait: time.Hour, KeyFields: []string{"tenant_id"}},
		"debounce_accumulate": {Type: "t", Mode: debounce.ModeDebounce, Window: time.Hour, Payload: debounce.PayloadAccumulate, ItemField: "order", MaxItems: 1 << 20, KeyFields: []string{"tenant_id"}},
		"debounce_last":       {Type: "t", Mode: debounce.ModeDebounce, Window: time.Hour, Payload: debounce.PayloadLast, KeyFields: []string{"tenant_id"}},
		"dedup":               {Type: "t", Mode: debounce.ModeDedup, KeyFields: []string{"tenant_id"}},
		// Payload last joined by one SET XX of the round's payload key
		// (lastkey.go) once this process knows the round.
		"debounce_last_on": {Type: "t", Mode: debounce.ModeDebounce, Window: time.Hour, Payload: debounce.PayloadLast, KeyFields: []string{"tenant_id"}, LocalJoins: debounce.LocalJoinsOn},
		// The same as debounce, every event to Redis (local joins off).
		"debounce_redis": {Type: "t", Mode: debounce.ModeDebounce, Window: time.Hour, KeyFields: []string{"tenant_id"}, LocalJoins: debounce.LocalJoinsOff},
	}
	for _, name := range []string{"debounce", "debounce_redis", "debounce_extend", "debounce_last", "debounce_last_on", "debounce_accumulate", "dedup"} {
		for _, path := range []string{"coalesced", "scheduled"} {
			b.Run(name+"/"+path, func(b *testing.B) {
				c, _ := benchCoalescer(b, policies[name])
				ctx := context.Background()
				var seq atomic.Int64
				args := func() json.RawMessage {
					n := seq.Add(1)
					tenant := n % 1000
					if path == "scheduled" {
						tenant = n
					}
					return json.RawMessage(fmt.Sprintf(`{"tenant_id":"tenant-%d","order":%d}`, tenant, n%50))
				}
				// Warm: open the rounds the coalesced path joins.
				for range 1000 {
					if _, err := c.Submit(ctx, debounce.Event{Type: "t", Args: args()}); err != nil {
						b.Fatal(err)
					}
				}
				b.Run("serial", func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if _, err := c.Submit(ctx, debounce.Event{Type: "t", Args: args()}); err != nil {
							b.Fatal(err)
						}
					}
				})
				b.Run("parallel50", func(b *testing.B) {
					b.ReportAllocs()
					b.SetParallelism(25) // 25 x GOMAXPROCS(2) = 50 in flight
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if _, err := c.Submit(ctx, debounce.Event{Type: "t", Args: args()}); err != nil {
								b.Error(err)
								return
							}
						}
					})
				})
			})
		}
	}
}

// BenchmarkSubmitIdempotencyKey measures what an idempotency key costs a
// decision (the record written in the same script call, the event's args
// canonicalized for its digest): the same events with and without a key,
// local joins off for both (a keyed event always goes to Redis).
func BenchmarkSubmitIdempotencyKey(b *testing.B) {
	for _, payload := range []debounce.Payload{debounce.PayloadFirst, debounce.PayloadAccumulate} {
		for _, keyed := range []bool{false, true} {
			name := fmt.Sprintf("%s/key=%v", payload, keyed)
			b.Run(name, func(b *testing.B) {
				p := debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: time.Hour, Payload: payload,
					KeyFields: []string{"tenant_id"}, LocalJoins: debounce.LocalJoinsOff}
				if payload == debounce.PayloadAccumulate {
					p.MaxItems = 1 << 20
				}
				c, _ := benchCoalescer(b, p)
				ctx := context.Background()
				var seq atomic.Int64
				event := func() debounce.Event {
					n := seq.Add(1)
					ev := debounce.Event{Type: "t", Args: json.RawMessage(fmt.Sprintf(`{"tenant_id":"tenant-%d","order":%d}`, n%1000, n))}
					if keyed {
						ev.IdempotencyKey = fmt.Sprintf("k-%d", n)
					}
					return ev
				}
				b.ReportAllocs()
				b.SetParallelism(25)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := c.Submit(ctx, event()); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
