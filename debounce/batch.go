package debounce

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Batching: concurrent Submit calls share Redis round trips. Script calls go
// to a queue served by a few sender goroutines; a sender takes every call
// waiting when it is free and sends them as one pipeline. A lone caller finds
// an idle sender and goes out at once (no fixed delay); under load, calls
// that arrive while a pipeline is in flight ride the next one. Each call is
// still one EVALSHA: atomicity and behaviour are the same as unbatched.

// DefaultPipelines is how many pipelines a Coalescer keeps in flight.
const DefaultPipelines = 4

// maxBatch bounds the calls in one pipeline.
const maxBatch = 256

type call struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
	done   chan struct{}
}

// batcher's senders start when calls wait and no sender is free, and stop
// after a moment without work, so an idle Coalescer holds no goroutines.
type batcher struct {
	rdb      redis.UniversalClient
	queue    chan *call
	max      int32
	active   atomic.Int32
	inflight atomic.Int32 // calls under way, direct or queued
}

// senderIdle is how long a sender waits for work before it stops.
const senderIdle = 200 * time.Millisecond

func newBatcher(rdb redis.UniversalClient, pipelines int) *batcher {
	return &batcher{rdb: rdb, queue: make(chan *call, 4096), max: int32(pipelines)}
}

// eval runs script through the batch queue and returns its reply. A call
// with no other under way goes straight out on the caller's goroutine: a lone
// caller pays nothing for batching.
func (b *batcher) eval(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	defer b.inflight.Add(-1)
	if b.inflight.Add(1) == 1 {
		return script.Run(ctx, b.rdb, keys, args...)
	}
	c := &call{ctx: ctx, script: script, keys: keys, args: args, done: make(chan struct{}, 1)}
	select {
	case b.queue <- c:
	case <-ctx.Done():
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(ctx.Err())
		return cmd
	}
	b.wake()
	<-c.done // always answered: a sender answers every call it takes
	return c.cmd
}

// wake starts a sender when calls wait and fewer than max senders run.
func (b *batcher) wake() {
	for len(b.queue) > 0 {
		a := b.active.Load()
		if a >= b.max {
			return
		}
		if b.active.CompareAndSwap(a, a+1) {
			go b.send()
			return
		}
	}
}

func (b *batcher) send() {
	batch := make([]*call, 0, 16)
	idle := time.NewTimer(senderIdle)
	defer idle.Stop()
	for {
		select {
		case c := <-b.queue:
			batch = append(batch[:0], c)
		case <-idle.C:
			b.active.Add(-1)
			b.wake() // a call may have arrived after we gave up
			return
		}
	more:
		for len(batch) < maxBatch {
			select {
			case c := <-b.queue:
				batch = append(batch, c)
			default:
				break more
			}
		}
		b.run(batch)
		idle.Reset(senderIdle)
	}
}

// run sends one pipeline; calls whose script is not loaded yet (NOSCRIPT,
// after a restart or on a new node) are sent again with EVAL.
func (b *batcher) run(batch []*call) {
	ctx := context.Background()
	if len(batch) == 1 {
		ctx = batch[0].ctx // a lone call keeps its deadline
	}
	pipe := b.rdb.Pipeline()
	live := batch[:0:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.cmd = redis.NewCmd(c.ctx)
			c.cmd.SetErr(err) // gave up while queued: not sent
			c.done <- struct{}{}
			continue
		}
		c.cmd = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	_, _ = pipe.Exec(ctx)
	var retry []*call
	for _, c := range live {
		if isNoScript(c.cmd.Err()) {
			retry = append(retry, c)
			continue
		}
		c.done <- struct{}{}
	}
	if len(retry) > 0 {
		pipe = b.rdb.Pipeline()
		for _, c := range retry {
			c.cmd = c.script.Eval(ctx, pipe, c.keys, c.args...)
		}
		_, _ = pipe.Exec(ctx)
		for _, c := range retry {
			c.done <- struct{}{}
		}
	}
}

func isNoScript(err error) bool {
	return err != nil && !errors.Is(err, redis.Nil) && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
