package simulate

import (
	"context"
	"encoding/binary"
	"iter"
	"sync"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/vredis"
)

// A sharded simulation: the rounds of one key never meet another key's,
// so each goroutine simulates the keys of its share on a store and a
// Coalescer of its own, in its own virtual time, and the figures are added
// up at the end. Only the workers could couple keys (a job waiting for a
// free worker), which Config.shards rules out.

// shardBatch: events go to a shard this many at a time.
const shardBatch = 256

// runSharded simulates on n goroutines.
func runSharded(ctx context.Context, cfg Config, n int, events iter.Seq2[Event, error]) (*Result, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The router only computes round keys: it needs a Coalescer with the
	// policies, whose store it never uses.
	store := vredis.New(time.Now)
	defer store.Close()
	router, err := debounce.New(debounce.Config{Redis: store.Client(), Policies: cfg.Policies, LocalJoins: debounce.LocalJoinsOff, Pipelines: -1,
		Replication: debounce.Replication{Acks: debounce.ReplicationOff}})
	if err != nil {
		return nil, err
	}
	sims := make([]*sim, n)
	feeds := make([]chan []Event, n)
	for i := range sims {
		if sims[i], err = newSim(cfg); err != nil {
			for _, s := range sims[:i] {
				s.close()
			}
			return nil, err
		}
		defer sims[i].close()
		feeds[i] = make(chan []Event, 4)
	}
	var wg sync.WaitGroup
	for i, s := range sims {
		wg.Go(func() {
			feed := func(yield func(Event, error) bool) {
				for batch := range feeds[i] {
					for _, ev := range batch {
						if !yield(ev, nil) {
							return
						}
					}
				}
			}
			if err := s.replay(ctx, feed); err != nil {
				cancel(err)
			}
			for range feeds[i] { // drain: the router never blocks on a shard that stopped
			}
		})
	}
	batches := make([][]Event, n)
	var from, to time.Time
	var readErr error
route:
	for ev, err := range events {
		if err != nil {
			readErr = err
			break
		}
		if ctx.Err() != nil {
			break
		}
		if from.IsZero() {
			from = ev.At
		}
		to = ev.At
		shard := 0 // an event Submit refuses is counted in the first
		if pr, err := router.Prepare(debounce.Event{Type: ev.Type, Args: ev.Args, Key: ev.Key}); err == nil {
			key := pr.Key() // a SHA-256: its bits are spread evenly
			shard = int(binary.LittleEndian.Uint64(key[:8]) % uint64(n))
		}
		batches[shard] = append(batches[shard], ev)
		if len(batches[shard]) == shardBatch {
			select {
			case feeds[shard] <- batches[shard]:
			case <-ctx.Done():
				break route
			}
			batches[shard] = make([]Event, 0, shardBatch)
		}
	}
	for i, b := range batches {
		if len(b) > 0 && ctx.Err() == nil {
			select {
			case feeds[i] <- b:
			case <-ctx.Done():
			}
		}
		close(feeds[i])
	}
	wg.Wait()
	if readErr != nil {
		return nil, readErr
	}
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	first := sims[0]
	for _, s := range sims[1:] {
		first.absorb(s)
	}
	first.from, first.to = from, to
	return first.result(), nil
}

// absorb adds another shard's figures, keys and latencies to s's.
func (s *sim) absorb(o *sim) {
	for i, t := range s.types {
		ot := o.types[i]
		example := t.RefusedExample
		t.add(ot.TypeStats)
		t.RefusedExample = example
		if t.RefusedExample == "" {
			t.RefusedExample = ot.RefusedExample
		}
		t.latencies = append(t.latencies, ot.latencies...)
		for key, k := range ot.keys {
			k.t = t
			t.keys[key] = k
		}
	}
	for typ, n := range o.unknown {
		s.unknown[typ] += n
	}
	s.events += o.events
	s.jobs += o.jobs
	if o.now.After(s.now) {
		s.now = o.now
	}
}
