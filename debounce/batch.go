package debounce

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Batching: concurrent Submit calls share Redis round trips. Script calls go
// to a queue served by a few sender goroutines; a sender takes every call
// waiting when it is free and sends them as one pipeline. A lone caller finds
// an idle sender and goes out at once (no fixed delay); under load, calls
// that arrive while a pipeline is in flight ride the next one. Each call is
// still one decision in one script, in the order the calls came; held
// openings of one type, and joins of one policy, share one EVALSHA
// (merge.go): atomicity and behaviour are the same as unbatched.

// DefaultPipelines is how many pipelines a Coalescer keeps in flight.
const DefaultPipelines = 4

// maxBatch bounds the calls in one pipeline.
const maxBatch = 256

type call struct {
	ctx context.Context
	scriptCall
	done chan struct{}
}

// scriptCall is one script call sent in a pipeline.
type scriptCall struct {
	script evaler
	keys   []string
	args   []any
	cmd    *redis.Cmd
	// doubt: with replication acks, the call ran but too few replicas
	// confirmed it in time (a *ReplicationError); nil otherwise.
	doubt error
}

// evalPipelined sends the calls in one pipeline, with the commands extra
// adds, then sends again with EVAL, in one more pipeline, the calls whose
// script the server did not have (NOSCRIPT: after a restart, or on a new
// node). Each call's reply (or error) is in its cmd. wait, when set, ends
// each pipeline with its command (replication.go: WAIT) and returns what
// checks its answer for the calls that pipeline sent.
func evalPipelined(ctx context.Context, rdb interface{ Pipeline() redis.Pipeliner }, calls []*scriptCall, extra func(redis.Pipeliner), wait func(redis.Pipeliner) func([]*scriptCall)) {
	_, plain := rdb.(*redis.Client) // keys by reference (callargs.go)
	pipe := rdb.Pipeline()
	for _, c := range calls {
		c.cmd = evalSha(ctx, pipe, c.script, plain, c.keys, c.args)
	}
	if extra != nil {
		extra(pipe)
	}
	var checkWait func([]*scriptCall)
	if wait != nil {
		checkWait = wait(pipe)
	}
	_, _ = pipe.Exec(ctx)
	var retry []*scriptCall
	for _, c := range calls {
		if isNoScript(c.cmd.Err()) {
			retry = append(retry, c)
		}
	}
	if checkWait != nil {
		checkWait(calls)
	}
	if len(retry) == 0 {
		return
	}
	pipe = rdb.Pipeline()
	for _, c := range retry {
		c.cmd = evalSource(ctx, pipe, c.script, c.keys, c.args)
	}
	if wait != nil {
		checkWait = wait(pipe)
	}
	_, _ = pipe.Exec(ctx)
	if wait != nil {
		for _, c := range retry {
			c.doubt = nil
		}
		checkWait(retry)
	}
}

// batcher's senders start when calls wait and no sender is free, and stop
// after a moment without work, so an idle Coalescer holds no goroutines.
type batcher struct {
	c        *Coalescer // its pipelines go out through c.runScripts
	rdb      redis.UniversalClient
	queue    chan *call
	max      atomic.Int32
	active   atomic.Int32
	inflight atomic.Int32 // calls under way, direct or queued
	// gate, when set (tests: HoldBatch), sends every call through the
	// queue and holds a sender's batch until the channel is closed.
	gate atomic.Pointer[chan struct{}]
	// merged counts the calls decided in a call shared with others of
	// their kind (merge.go): held openings, joins.
	merged [2]atomic.Int64
}

// senderIdle is how long a sender waits for work before it stops.
const senderIdle = 200 * time.Millisecond

func newBatcher(c *Coalescer, pipelines int) *batcher {
	b := &batcher{c: c, rdb: c.rdb, queue: make(chan *call, 4096)}
	b.max.Store(int32(pipelines))
	return b
}

// eval runs script through the batch queue and returns its reply and its
// replication doubt (replication.go). A call with no other under way goes
// straight out on the caller's goroutine: a lone caller pays nothing for
// batching.
func (b *batcher) eval(ctx context.Context, script evaler, keys []string, args ...any) (*redis.Cmd, error) {
	defer b.inflight.Add(-1)
	if b.inflight.Add(1) == 1 && b.gate.Load() == nil {
		if !b.c.repl.active(ctx) {
			return runScript(ctx, b.rdb, script, keys, args), nil
		}
		sc := &scriptCall{script: script, keys: keys, args: args}
		b.c.runScripts(ctx, []*scriptCall{sc}, nil)
		return sc.cmd, sc.doubt
	}
	c := callPool.Get().(*call)
	c.ctx, c.scriptCall = ctx, scriptCall{script: script, keys: keys, args: args}
	select {
	case b.queue <- c:
	case <-ctx.Done():
		c.put()
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(ctx.Err())
		return cmd, nil
	}
	b.wake()
	<-c.done // always answered: a sender answers every call it takes
	cmd, doubt := c.cmd, c.doubt
	c.put()
	return cmd, doubt
}

// callPool keeps the calls of the batch queue, each with its channel: two
// allocations less per batched decision. A call goes back once its caller
// has its answer: its sender's last touch is the send on done (run).
var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// put clears c (nothing of a decision stays referenced) and pools it.
func (c *call) put() {
	*c = call{done: c.done}
	callPool.Put(c)
}

// wake starts a sender when calls wait and fewer than max senders run.
func (b *batcher) wake() {
	for len(b.queue) > 0 {
		a := b.active.Load()
		if a >= b.max.Load() {
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
		if g := b.gate.Load(); g != nil {
			<-*g
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

// run sends one pipeline (evalPipelined) of the calls still waited for.
func (b *batcher) run(batch []*call) {
	ctx := context.Background()
	if len(batch) == 1 {
		ctx = batch[0].ctx // a lone call keeps its deadline
	}
	live := make([]*scriptCall, 0, len(batch))
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.cmd = redis.NewCmd(c.ctx)
			c.cmd.SetErr(err) // gave up while queued: not sent
			continue
		}
		live = append(live, &c.scriptCall)
	}
	if len(live) > 0 {
		send, split := b.merge(ctx, live)
		b.c.runScripts(ctx, send, nil)
		split()
	}
	// The last touch of each call: its caller may pool it once answered.
	for _, c := range batch {
		c.done <- struct{}{}
	}
}

func isNoScript(err error) bool {
	return err != nil && !errors.Is(err, redis.Nil) && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
