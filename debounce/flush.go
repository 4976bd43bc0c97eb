package debounce

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
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
	if first {
		ls.queuedAt.Store(int64(time.Since(ls.base)))
	}
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

// ensureFlusher starts the flusher if it is not running: it also forgets
// rounds whose local time is over.
func (ls *localState) ensureFlusher(c *Coalescer) {
	ls.qmu.Lock()
	start := !ls.running
	ls.running = true
	ls.qmu.Unlock()
	if start {
		go c.flushLoop()
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
		empty := len(ls.queue) == 0 && len(ls.retry) == 0 && len(ls.unsent) == 0
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
		if ls.held.Load() || ls.starved.Load() {
			continue
		}
		if err := c.flushLocal(context.Background()); err != nil {
			// Short: once Redis answers again, the events should reach
			// their rounds before those can be taken.
			backoff = min(max(2*backoff, 20*time.Millisecond), 200*time.Millisecond)
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

// Flush adds every event answered locally before the call to its round in
// Redis (or, its round gone, submits it again), and returns once that is
// done, or when ctx ends: ctx bounds the whole call, its waits and round
// trips included (what is not done then stays queued for the background
// flusher, and the error says so). Events answered locally meanwhile by
// other goroutines go to the next flush. Call it before a producer stops:
// without it, the counts of the last flush interval's events are lost (the
// events themselves are covered by their rounds' jobs, local.go).
func (c *Coalescer) Flush(ctx context.Context) error {
	if c.local == nil {
		return nil
	}
	took := false // the queue as it was at the call went out
	for {
		var err error
		again := false
		if c.local.lockFlush(ctx, time.Duration(math.MaxInt64)) {
			var t bool
			before := c.local.resubmitted.Load()
			t, err = c.flushLocked(ctx)
			// Events submitted again may have been joined locally, to the
			// round the first of them opened: one more flush for them.
			again = c.local.resubmitted.Load() != before
			c.local.unlock()
			took = took || t
		} else {
			err = ctx.Err()
		}
		c.local.qmu.Lock()
		left := len(c.local.retry) + len(c.local.unsent)
		c.local.qmu.Unlock()
		if err == nil && took && !again && left == 0 {
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
	lr    *localRound
	n     int
	last  int64
	first Event // the first of the n events
}

// resubmission is events whose round was gone at their flush, to submit
// again.
type resubmission struct {
	lr    *localRound
	n     int
	first Event // the first of them, submitted with its own args
}

// flushCall is one flush script call: its rounds' share, their keys and
// the call's marker (last key), and its arguments. A call whose reply did
// not come is sent again as it is: the marker makes it apply once.
type flushCall struct {
	scriptCall
	hash   bool
	rounds []flushed
	// until (unix ms) is when the call's marker expires at the latest, if
	// the call reached Redis: markerMargin after the last of its rounds
	// expires (the scripts set it so). Sent again later, the call finds
	// every round gone and its events are submitted again, which may
	// repeat events an unanswered send applied (LocalStats.Uncertain).
	until int64
	sent  bool // sent at least once
}

// markerMargin is how long a flush's marker outlives the last round it
// applied to (MARKER_MARGIN in flush_packed.lua and flush_round.lua).
const markerMargin = time.Minute

// assistLate: a queue that has waited this long past its flush interval is
// late. A bound of its own, not a multiple of the interval: the guard keeps
// flushMargin (50 ms) past the interval for the flush, so a starved flusher
// must be helped well within it, whatever the interval (five intervals were
// 10 ms at 2 ms, and would be 250 ms at the 50 ms default).
const assistLate = 20 * time.Millisecond

// assistFlush flushes on the caller's goroutine when the queue has waited
// more than the flush interval plus assistLate and no flush is under way: a
// process whose goroutines keep every CPU busy answering events locally
// would otherwise starve the flusher, and the flush interval would not hold.
func (c *Coalescer) assistFlush() {
	ls := c.local
	at := ls.queuedAt.Load()
	if at == 0 || ls.failing.Load() || time.Since(ls.base)-time.Duration(at) < ls.every+assistLate {
		return
	}
	if !ls.tryLock() {
		// A flush is under way, but late: let it have the CPU (its
		// reply waits for a goroutine of the Redis client to run).
		runtime.Gosched()
		return
	}
	defer ls.unlock()
	ls.assists.Add(1)
	_, _ = c.flushLocked(context.Background())
}

// lockFlush takes the flush lock within d (or ctx), reporting whether it did.
func (ls *localState) lockFlush(ctx context.Context, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !ls.tryLock() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// flushLocal flushes the queue once, with the calls still unanswered from
// earlier flushes, and retries pending resubmissions.
func (c *Coalescer) flushLocal(ctx context.Context) error {
	c.local.lock()
	defer c.local.unlock()
	_, err := c.flushLocked(ctx)
	return err
}

// flushLocked is flushLocal, under the flush lock; took reports that it took the queue
// (it does not while calls from earlier flushes await a reply).
func (c *Coalescer) flushLocked(ctx context.Context) (took bool, err error) {
	ls := c.local
	ls.qmu.Lock()
	calls := ls.unsent
	ls.unsent = nil
	var queue []*localRound
	if took = len(calls) == 0; took {
		// Calls without a reply go again first, alone: during an outage
		// the new events wait in their rounds instead of piling up in
		// more calls.
		queue = ls.queue
		ls.queue = nil
		if at := ls.queuedAt.Swap(0); at != 0 {
			if age := int64(time.Since(ls.base)) - at; age > ls.maxWait.Load() {
				ls.maxWait.Store(age)
			}
		}
	}
	ls.qmu.Unlock()

	var packedRounds, hashRounds []flushed
	for _, lr := range queue {
		sh := ls.shard(lr.lk.key)
		sh.mu.Lock()
		f := flushed{lr: lr, n: lr.pending, last: lr.last, first: lr.first}
		lr.flushing += lr.pending
		lr.pending, lr.dirty, lr.first = 0, false, Event{}
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
	calls = c.flushCalls(calls, packedRounds, false)
	calls = c.flushCalls(calls, hashRounds, true)
	if len(calls) > 0 {
		fctx, cancel := context.WithTimeout(ctx, flushTimeout)
		err = c.sendFlush(fctx, calls)
		cancel()
	}
	// Events whose round was gone, found now or by an earlier flush: to
	// Redis at once, stopping at the first failure (the rest wait for the
	// next flush).
	ls.qmu.Lock()
	retry := ls.retry
	ls.retry = nil
	ls.qmu.Unlock()
	for i, rs := range retry {
		if rerr := c.resubmit(ctx, rs); rerr != nil {
			ls.qmu.Lock()
			ls.retry = append(ls.retry, retry[i+1:]...)
			ls.qmu.Unlock()
			if err == nil {
				err = rerr
			}
			break
		}
	}
	return took, err
}

// flushCalls groups one layout's rounds by Cluster slot into script calls.
func (c *Coalescer) flushCalls(calls []*flushCall, rounds []flushed, hash bool) []*flushCall {
	script, per := flushPackedScript, 4
	if hash {
		script, per = flushRoundScript, 5
	}
	for _, g := range c.slotGroups(rounds) {
		for len(g) > 0 {
			n := min(len(g), flushChunk)
			fc := &flushCall{hash: hash, rounds: g[:n]}
			fc.script, fc.keys, fc.args = script, make([]string, 0, n+1), make([]any, 0, n*per)
			for _, f := range fc.rounds {
				fc.keys = append(fc.keys, f.lr.rkey)
				fc.args = c.appendFlushArgs(fc.args, f, hash)
				fc.until = max(fc.until, f.lr.expiry()+markerMargin.Milliseconds())
			}
			fc.keys = append(fc.keys, fc.keys[0]+"~f"+strconv.FormatUint(rand.Uint64(), 16))
			calls = append(calls, fc)
			g = g[n:]
		}
	}
	return calls
}

// sendFlush sends the calls in one pipeline and applies their replies.
// Calls that got no reply (Redis down, the reply lost) are kept to be sent
// again, unchanged, by the next flush.
func (c *Coalescer) sendFlush(ctx context.Context, calls []*flushCall) error {
	start := time.Now()
	// The markers of calls answered before go with these: no longer needed.
	c.local.qmu.Lock()
	acked := c.local.acked
	c.local.acked = nil
	c.local.qmu.Unlock()
	sc := make([]*scriptCall, len(calls))
	resent := make([]bool, len(calls))
	for i, fc := range calls {
		sc[i] = &fc.scriptCall
		resent[i] = fc.sent
	}
	unlinks := make([]*redis.IntCmd, 0, len(acked))
	c.runScripts(ctx, sc, func(pipe redis.Pipeliner) {
		for _, m := range acked {
			unlinks = append(unlinks, pipe.Unlink(ctx, m))
		}
	})
	c.local.flushes.Add(1)
	c.local.flushNanos.Add(int64(time.Since(start)))
	var firstErr error
	var unsent []*flushCall
	var answered []string
	for i, cmd := range unlinks {
		if cmd.Err() != nil {
			answered = append(answered, acked[i]) // deleted by a later flush
		}
	}
	// A call sent again past its marker's life: a round it finds gone
	// may have taken the events in an earlier, unanswered send.
	late := c.now().UnixMilli() + c.local.guard.Milliseconds()
	for i, fc := range calls {
		fc.sent = true
		if fc.doubt != nil {
			// Applied on the primary, not confirmed by its replicas: a
			// failover now would lose these counts, never the events'
			// coverage (their rounds' jobs still run after them).
			if c.hooks.Replication != nil {
				c.hooks.Replication(fc.rounds[0].lr.lk.p.Type, FailOpen, fc.doubt)
			}
			fc.doubt = nil
		}
		res, err := fc.cmd.Int64Slice()
		if err == nil && len(res) != len(fc.rounds)*(1+b2i(fc.hash)) {
			err = fmt.Errorf("flush: %d replies for %d rounds", len(res), len(fc.rounds))
		}
		fc.cmd = nil
		if err != nil {
			c.local.flushErrors.Add(1)
			if firstErr == nil {
				firstErr = err
				c.log.Warn("flushing locally joined events failed; sent again", "rounds", len(fc.rounds), "err", err)
			}
			unsent = append(unsent, fc)
			continue
		}
		answered = append(answered, fc.keys[len(fc.keys)-1])
		c.local.flushedKeys.Add(uint64(len(fc.rounds)))
		uncertain := resent[i] && late >= fc.until
		for j, f := range fc.rounds {
			if fc.hash {
				c.applyFlush(f, res[2*j], res[2*j+1], uncertain)
			} else {
				c.applyFlush(f, res[j], 0, uncertain)
			}
		}
	}
	c.local.qmu.Lock()
	c.local.unsent = append(c.local.unsent, unsent...)
	c.local.acked = append(c.local.acked, answered...)
	c.local.qmu.Unlock()
	c.local.failing.Store(len(unsent) > 0)
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
// time) in Redis, or, when the round is gone, the events to submit again
// (uncertain: the call was sent again past its marker's life, so an
// earlier send may have added them to the round before it went).
func (c *Coalescer) applyFlush(f flushed, count, due int64, uncertain bool) {
	ls := c.local
	lr := f.lr
	sh := ls.shard(lr.lk.key)
	sh.mu.Lock()
	lr.flushing -= f.n
	if count < 0 {
		c.dropLocked(sh, lr)
		sh.mu.Unlock()
		if lr.lk.p.Payload == PayloadLast {
			// Joined by writing their args into the round's payload key
			// (lastkey.go), which closes with it: the args were in the
			// round before it went. Only their count is lost.
			ls.forgotten.Add(uint64(f.n))
			return
		}
		if lr.outcome == OutcomeThrottled || lr.outcome == OutcomeDuplicate {
			// Dropped by design (inside a throttle window or a dedup
			// reservation whose job was published): no job was promised
			// to them, and submitted again they would run one. Only their
			// count is lost with the window.
			ls.forgotten.Add(uint64(f.n))
			return
		}
		if uncertain {
			ls.uncertain.Add(uint64(f.n))
		}
		ls.qmu.Lock()
		ls.retry = append(ls.retry, resubmission{lr: lr, n: f.n, first: f.first})
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

// resubmit submits again, as ordinary events, the events of a round that
// was gone at their flush: they open or join the key's current round. What
// cannot be submitted now (Redis or NATS down) is kept for the next flush.
func (c *Coalescer) resubmit(ctx context.Context, rs resubmission) error {
	ls := c.local
	ev := rs.first
	for i := range rs.n {
		sctx, cancel := context.WithTimeout(ctx, flushTimeout)
		d, err := c.submit(sctx, ev)
		cancel()
		if err == nil && d.Outcome == OutcomeBypassed {
			// Published without a reservation (Redis down, fail open):
			// its job runs after the rest too.
			ls.resubmitted.Add(uint64(rs.n - i))
			break
		}
		if err != nil {
			ls.qmu.Lock()
			ls.retry = append(ls.retry, resubmission{lr: rs.lr, n: rs.n - i, first: ev})
			ls.qmu.Unlock()
			c.log.Warn("submitting again the locally joined events of a round gone at their flush failed; retried",
				"job_type", ev.Type, "key", rs.lr.lk.key.String(), "events", rs.n-i, "err", err)
			return err
		}
		ls.resubmitted.Add(1)
		// The first event went with its own args: it may be another
		// round's first. The others join it, as they joined the one gone.
	}
	c.log.Warn(ResubmittedMessage, "job_type", rs.lr.lk.p.Type, "key", rs.lr.lk.key.String(), "token", rs.lr.token.String(), "events", rs.n)
	return nil
}

// ResubmittedMessage is logged (at warn) when locally joined events found
// their round gone at the flush (taken, cancelled, expired, lost with
// Redis's data) and were submitted again as ordinary events, with
// job_type, key, token (the round they had joined) and events.
const ResubmittedMessage = "local joins: the round was gone at the flush; its events were submitted again"

// sweepLocal forgets rounds past their local time with nothing to flush.
func (c *Coalescer) sweepLocal(nowMs int64) {
	ls := c.local
	for i := range ls.shards {
		sh := &ls.shards[i]
		sh.mu.Lock()
		for _, lr := range sh.m {
			if lr.opening == nil && !lr.dirty && nowMs >= max(lr.until, lr.bypass) {
				c.dropLocked(sh, lr) // deleting the current entry is safe in a range
			}
		}
		sh.mu.Unlock()
	}
}

// slotGroups splits rounds by Cluster hash slot (a script's keys must share
// one); on a single node they are one group; on any other client (a Ring),
// one group per round (its hash tag).
func (c *Coalescer) slotGroups(rounds []flushed) [][]flushed {
	group := func(key string) string { return strconv.Itoa(int(keySlot(key))) }
	switch c.rdb.(type) {
	case *redis.Client:
		return [][]flushed{rounds}
	case *redis.ClusterClient:
	default: // a Ring, or a client of its own: the hash tag is all that is sure
		group = func(key string) string {
			if i := strings.IndexByte(key, '{'); i >= 0 {
				return key[i:]
			}
			return key // every round key has a tag (keys.go); never slice at -1
		}
	}
	bySlot := map[string][]flushed{}
	var order []string
	for _, f := range rounds {
		s := group(f.lr.rkey)
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
