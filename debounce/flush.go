package debounce

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The flush (local.go): the events answered locally are added to their
// rounds in Redis within Config.FlushInterval, many rounds per script call
// (one call per Cluster slot), by flush_packed.lua and flush_round.lua,
// which apply them only to the round they joined. Events whose round is
// gone are submitted again as ordinary events.

// flushChunk bounds the keys of one flush script call.
const flushChunk = 256

// flushTimeout bounds one flush's round trip.
const flushTimeout = 5 * time.Second

// enqueue queues a round that has events to flush, waking the flusher.
func (ls *localState) enqueue(c *Coalescer, lr *localRound) {
	ls.qmu.Lock()
	ls.queue = append(ls.queue, lr)
	first := len(ls.queue) == 1
	start := !ls.running
	ls.running = true
	ls.qmu.Unlock()
	if start {
		go c.flushLoop()
	} else if first {
		select {
		case ls.wake <- struct{}{}:
		default:
		}
	}
}

// sweepEvery: how often the flusher forgets rounds past their local time.
const sweepEvery = time.Second

// flushLoop runs while there are rounds to flush or to remember: it flushes
// the queue an interval after it fills, and stops when nothing is left.
func (c *Coalescer) flushLoop() {
	ls := c.local
	backoff := time.Duration(0)
	sweep := time.NewTicker(sweepEvery)
	defer sweep.Stop()
	for {
		ls.qmu.Lock()
		empty := len(ls.queue) == 0 && len(ls.retry) == 0
		if empty && ls.rounds.Load() == 0 {
			ls.running = false
			ls.qmu.Unlock()
			return
		}
		ls.qmu.Unlock()
		if empty {
			select {
			case <-ls.wake:
			case <-sweep.C:
				c.sweepLocal(c.now().UnixMilli())
			}
			continue
		}
		time.Sleep(max(ls.every, backoff))
		if ls.held.Load() {
			continue
		}
		if err := c.flushLocal(context.Background()); err != nil {
			backoff = min(max(2*backoff, 50*time.Millisecond), time.Second)
		} else {
			backoff = 0
		}
		select {
		case <-sweep.C:
			c.sweepLocal(c.now().UnixMilli())
		default:
		}
	}
}

// Flush adds every locally answered event to its round in Redis now, and
// returns once that is done (or ctx ends). Call it before a producer stops:
// without it, the counts of the last flush interval's events are lost (the
// events themselves are covered by their rounds' jobs, local.go).
func (c *Coalescer) Flush(ctx context.Context) error {
	if c.local == nil {
		return nil
	}
	for {
		err := c.flushLocal(ctx)
		c.local.qmu.Lock()
		left := len(c.local.queue) + len(c.local.retry)
		c.local.qmu.Unlock()
		if err == nil && left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return fmt.Errorf("debounce: flush of local joins: %w", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// flushed is one round's share of a flush.
type flushed struct {
	lr   *localRound
	n    int
	last int64
}

// resubmission is events whose round was gone at their flush, to submit
// again.
type resubmission struct {
	lr *localRound
	n  int
}

// flushLocal flushes the queue once (and retries pending resubmissions).
func (c *Coalescer) flushLocal(ctx context.Context) error {
	ls := c.local
	ls.fmu.Lock()
	defer ls.fmu.Unlock()
	ls.qmu.Lock()
	queue := ls.queue
	ls.queue = nil
	retry := ls.retry
	ls.retry = nil
	ls.qmu.Unlock()

	var packedRounds, hashRounds []flushed
	for _, lr := range queue {
		sh := ls.shard(lr.lk.key)
		sh.mu.Lock()
		f := flushed{lr: lr, n: lr.pending, last: lr.last}
		lr.flushing += lr.pending
		lr.pending, lr.dirty = 0, false
		sh.mu.Unlock()
		if f.n == 0 {
			continue
		}
		if lr.hash {
			hashRounds = append(hashRounds, f)
		} else {
			packedRounds = append(packedRounds, f)
		}
	}
	var errs []error
	if len(packedRounds)+len(hashRounds) > 0 {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
		if err := c.flushRounds(fctx, packedRounds, false); err != nil {
			errs = append(errs, err)
		}
		if err := c.flushRounds(fctx, hashRounds, true); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	for _, rs := range retry {
		if err := c.resubmit(ctx, rs); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// flushRounds sends one layout's share, grouped by Cluster slot, and applies
// the replies. On a Redis error the events go back to their rounds for the
// next flush.
func (c *Coalescer) flushRounds(ctx context.Context, rounds []flushed, hash bool) error {
	if len(rounds) == 0 {
		return nil
	}
	script, per := flushPackedScript, 4
	if hash {
		script, per = flushRoundScript, 5
	}
	groups := c.slotGroups(rounds)
	pipe := c.rdb.Pipeline()
	type sent struct {
		rounds []flushed
		keys   []string
		args   []any
		cmd    *redis.Cmd
	}
	var calls []*sent
	for _, g := range groups {
		for len(g) > 0 {
			n := min(len(g), flushChunk)
			s := &sent{rounds: g[:n], keys: make([]string, 0, n), args: make([]any, 0, n*per)}
			for _, f := range s.rounds {
				s.keys = append(s.keys, f.lr.rkey)
				s.args = c.appendFlushArgs(s.args, f, hash)
			}
			s.cmd = script.EvalSha(ctx, pipe, s.keys, s.args...)
			calls = append(calls, s)
			g = g[n:]
		}
	}
	start := time.Now()
	_, _ = pipe.Exec(ctx)
	var retry []*sent
	for _, s := range calls {
		if isNoScript(s.cmd.Err()) {
			retry = append(retry, s)
		}
	}
	if len(retry) > 0 {
		pipe = c.rdb.Pipeline()
		for _, s := range retry {
			s.cmd = script.Eval(ctx, pipe, s.keys, s.args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	c.local.flushes.Add(1)
	c.local.flushNanos.Add(int64(time.Since(start)))
	var firstErr error
	for _, s := range calls {
		res, err := s.cmd.Int64Slice()
		if err == nil && len(res) != len(s.rounds)*(1+b2i(hash)) {
			err = fmt.Errorf("flush: %d replies for %d rounds", len(res), len(s.rounds))
		}
		if err != nil {
			c.local.flushErrors.Add(1)
			if firstErr == nil {
				firstErr = err
				c.log.Warn("flushing locally joined events failed; retried", "rounds", len(s.rounds), "err", err)
			}
			for _, f := range s.rounds {
				c.requeue(f)
			}
			continue
		}
		c.local.flushedKeys.Add(uint64(len(s.rounds)))
		for i, f := range s.rounds {
			if hash {
				c.applyFlush(f, res[2*i], res[2*i+1])
			} else {
				c.applyFlush(f, res[i], 0)
			}
		}
	}
	return firstErr
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// appendFlushArgs appends one round's script arguments.
func (c *Coalescer) appendFlushArgs(args []any, f flushed, hash bool) []any {
	p := f.lr.lk.p
	if hash {
		extend := int64(0)
		if p.Extend {
			extend = p.Window.Milliseconds()
		}
		return append(args, strconv.FormatUint(uint64(f.lr.token), 10), f.n, f.last, extend, p.MaxWait.Milliseconds())
	}
	exp, rnd := f.lr.token.packedParts()
	offset := max(f.last-(exp-p.lifetime().Milliseconds()), 0)
	return append(args, exp, rnd, f.n, offset)
}

// applyFlush records a flush's answer for one round: its count (and due
// time) in Redis, or, when the round is gone, the events to submit again.
func (c *Coalescer) applyFlush(f flushed, count, due int64) {
	ls := c.local
	lr := f.lr
	sh := ls.shard(lr.lk.key)
	sh.mu.Lock()
	lr.flushing -= f.n
	if count < 0 {
		lr.gone = true
		if sh.m[lr.lk] == lr {
			delete(sh.m, lr.lk)
			ls.rounds.Add(-1)
		}
		sh.mu.Unlock()
		ls.qmu.Lock()
		ls.retry = append(ls.retry, resubmission{lr: lr, n: f.n})
		ls.qmu.Unlock()
		return
	}
	lr.count = int(count)
	if lr.hash && due > 0 {
		if d := msTime(due); d.After(lr.due) {
			lr.due = d
			lr.until = due - ls.guard.Milliseconds()
		}
	}
	sh.mu.Unlock()
}

// requeue gives a failed flush's events back to their round.
func (c *Coalescer) requeue(f flushed) {
	ls := c.local
	sh := ls.shard(f.lr.lk.key)
	sh.mu.Lock()
	f.lr.flushing -= f.n
	f.lr.pending += f.n
	f.lr.last = max(f.lr.last, f.last)
	queue := !f.lr.dirty
	f.lr.dirty = true
	sh.mu.Unlock()
	if queue {
		ls.qmu.Lock()
		ls.queue = append(ls.queue, f.lr)
		ls.qmu.Unlock()
	}
}

// resubmit submits again, as ordinary events, the events of a round that
// was gone at their flush: they open or join the key's current round. What
// cannot be submitted now (Redis or NATS down) is kept for the next flush.
func (c *Coalescer) resubmit(ctx context.Context, rs resubmission) error {
	ls := c.local
	ev := Event{Type: rs.lr.lk.p.Type, Args: rs.lr.args, Key: rs.lr.explKey}
	for i := range rs.n {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
		_, err := c.submit(sctx, ev)
		cancel()
		if err != nil {
			ls.qmu.Lock()
			ls.retry = append(ls.retry, resubmission{lr: rs.lr, n: rs.n - i})
			ls.qmu.Unlock()
			c.log.Warn("submitting again the locally joined events of a round gone at their flush failed; retried",
				"job_type", ev.Type, "key", rs.lr.lk.key.String(), "events", rs.n-i, "err", err)
			return err
		}
		ls.resubmitted.Add(1)
	}
	return nil
}

// sweepLocal forgets rounds past their local time with nothing to flush.
func (c *Coalescer) sweepLocal(nowMs int64) {
	ls := c.local
	for i := range ls.shards {
		sh := &ls.shards[i]
		sh.mu.Lock()
		for k, lr := range sh.m {
			if lr.opening == nil && !lr.dirty && nowMs >= lr.until {
				delete(sh.m, k)
				ls.rounds.Add(-1)
			}
		}
		sh.mu.Unlock()
	}
}

// slotGroups splits rounds by Cluster hash slot (a script's keys must share
// one); on a single node they are one group.
func (c *Coalescer) slotGroups(rounds []flushed) [][]flushed {
	if _, cluster := c.rdb.(*redis.ClusterClient); !cluster {
		return [][]flushed{rounds}
	}
	bySlot := map[uint16][]flushed{}
	var order []uint16
	for _, f := range rounds {
		s := keySlot(f.lr.rkey)
		if _, ok := bySlot[s]; !ok {
			order = append(order, s)
		}
		bySlot[s] = append(bySlot[s], f)
	}
	out := make([][]flushed, 0, len(order))
	for _, s := range order {
		out = append(out, bySlot[s])
	}
	return out
}
