package debounce

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Local joins: an event for a round this process knows to be pending and
// published is answered here, with no Redis call, when the answer cannot
// lose anything, and is added to the round in Redis by the next flush
// (flush.go).
//
// Which policies: those whose answer to a joining event changes nothing but
// the round's count and last-seen time (and, with Extend, its due time,
// which the flush carries):
//
//   - debounce with payload first, fixed or extended (the job carries the
//     first event's args, which the round's message already has);
//   - throttle without trailing (the event is dropped inside the window);
//   - dedup until expiry (the event is a duplicate inside the expiry);
//   - debounce with payload last, fixed window, once the event's args are
//     in the round's payload key (lastkey.go: one SET XX, no script).
//
// Accumulate, last with extend, dedup until start or success and throttle
// with trailing always go to Redis: a producer crash would lose their data,
// or the round's end is not a time known in advance.
//
// Until when: a round cannot be taken before its due time (every layout's
// take refuses a round that is not due, within Config.DueSlack), a throttle
// window and a dedup reservation last until their expiry. A local answer is
// given only until the guard before that time (localGuard: DueSlack +
// ClockSkew + the flush's own margin); after it, events go to Redis.
//
// What it guarantees. Without a crash, every locally answered event reaches
// Redis in a flush that applies it only if the round's token is still there
// (not taken, cancelled, expired or replaced); otherwise the events are
// submitted again as ordinary events. So I1 holds whatever the clocks do.
// If the producer crashes, the events it answered locally in its last flush
// interval are missing from their round's count, but their round's job
// still runs after them — provided every clock (producers, workers, Redis,
// NATS) is within Config.ClockSkew of every other.

// LocalJoins turns local joins on or off, for a Coalescer (Config.LocalJoins)
// or a policy (Policy.LocalJoins).
type LocalJoins string

// LocalJoins values.
const (
	// LocalJoinsAuto (the default, also "auto"): on for the policies where a
	// local answer cannot lose an event (see local.go), off elsewhere.
	LocalJoinsAuto LocalJoins = ""
	// LocalJoinsOff: every event goes to Redis.
	LocalJoinsOff LocalJoins = "off"
	// LocalJoinsOn (a policy's only): auto, and payload last with a fixed
	// window too: its events are answered once their args are in the
	// round's payload key (lastkey.go). Every producer and worker of the
	// type must run a version with payload keys and this setting, on a
	// single-node or Sentinel Redis.
	LocalJoinsOn LocalJoins = "on"
)

// Defaults of the local-join settings of Config.
const (
	// DefaultFlushInterval is how long a locally joined event waits, at
	// most, before the flush adds it to its round in Redis. A flush costs
	// Redis about what a join does per round it carries, however many
	// events each carries: where events spread over many keys (1,000 keys at
	// 50 in flight, ~100 events per key per second), a flush every 2 ms
	// carried about one event per round and cost what the events would
	// have cost joined in Redis; every 50 ms it carries ~5-25 (issue 25,
	// eighth pass). What waits longer is only the count and last-seen time
	// in Redis (the events are covered by their round's job from their
	// answer on); local answers stop that much earlier before a round's
	// due time (Config.FlushInterval).
	DefaultFlushInterval = 50 * time.Millisecond
	// DefaultClockSkew is the largest difference assumed between the clocks
	// of producers, workers, Redis and NATS servers: local answers stop this
	// long (plus DueSlack) before the time a round can be taken or expire.
	DefaultClockSkew = 250 * time.Millisecond
	// DefaultMaxLocalRounds bounds the rounds a Coalescer remembers for local
	// joins; beyond it, events of rounds it does not know go to Redis.
	DefaultMaxLocalRounds = 100_000
)

// openerWait bounds how long an event waits for this process's opener of its
// round before it asks Redis itself.
const openerWait = time.Second

// flushMargin covers a flush's own round trip in the guard, so that in the
// ordinary case the flush lands before the round can be taken.
const flushMargin = 50 * time.Millisecond

// localEligible says whether a policy's events may be answered locally.
func (p *compiled) localEligible() bool {
	if p.LocalJoins == LocalJoinsOff {
		return false
	}
	switch p.Mode {
	case ModeDebounce:
		// Payload last: answered once its args are in the round's
		// payload key (lastkey.go).
		return p.Payload == PayloadFirst || p.lastKeyed()
	case ModeThrottle:
		return !p.Trailing && p.Payload == PayloadFirst
	case ModeDedup:
		return p.Until == UntilExpiry && p.Payload == PayloadFirst
	}
	return false
}

// expiry is the round's expiry (unix ms): the time after which no flush can
// apply to it. A packed token holds it; a hash round lives its policy's
// lifetime from its first event.
func (lr *localRound) expiry() int64 {
	if lr.hash {
		return lr.opened.UnixMilli() + lr.lk.p.lifetime().Milliseconds()
	}
	exp, _ := lr.token.packedParts()
	return exp
}

// localKey names a round this process may answer for.
type localKey struct {
	p   *compiled
	key RoundKey
}

// localRound is what this process knows of a pending round, and the events
// it answered for it since the last flush.
type localRound struct {
	lk      localKey
	token   Token
	rkey    string // the Redis key the token belongs to
	pkey    string // its payload key (lastkey.go), with payload last keyed
	hash    bool   // hash layout (an extended round)
	outcome Outcome
	opened  time.Time // the round's first event (extend: the max-wait base)

	// Guarded by the shard's mutex.
	until    int64     // unix ms: local answers while now is before it
	due      time.Time // the due time the last Redis answer gave
	count    int       // events in Redis at the last answer
	pending  int       // answered here since the last flush
	first    Event     // the first of them, its args copied: submitted again if the round is gone
	flushing int       // answered here, in a flush under way
	// live: the entry holds a whole Redis answer (token, key, layout,
	// outcome, due time, count) and may answer events until until. An
	// entry learned too near its round's end is not live: it only sends
	// events to Redis until bypass.
	live bool
	// bypass: a round known but too close to its due time (or end) to be
	// answered here: until then (unix ms) events go to Redis straight,
	// without waiting for an opener.
	bypass  int64
	last    int64 // unix ms: latest event answered here
	dirty   bool  // queued for the next flush
	gone    bool  // the flush found the round gone: answer no more
	opening chan struct{}
}

const localShards = 64

type localShard struct {
	mu sync.Mutex
	m  map[localKey]*localRound
}

// LocalStats counts what local joins did; Coalescer.LocalStats reads them.
type LocalStats struct {
	Joined      uint64 // events answered locally
	Flushes     uint64 // flush round trips (one pipeline of script calls, one call per slot)
	FlushedKeys uint64 // rounds flushed (each carries the events of one round)
	Resubmitted uint64 // events submitted again: their round was gone at the flush
	// Uncertain counts, among Resubmitted, events whose flush got no reply
	// and was sent again only after its marker's life (markerMargin after
	// the round's expiry): an earlier send may have added them to their
	// round, so they may be counted twice or run in a second job.
	Uncertain uint64
	// Forgotten counts events answered locally as dropped (throttled,
	// duplicate) whose window or reservation was gone at their flush:
	// not submitted again (no job was promised to them), only their
	// count is lost.
	Forgotten uint64
	// Skipped counts events sent to Redis without a local try: their
	// type's events were seldom answered locally (localgate.go).
	Skipped     uint64
	FlushErrors uint64        // flushes that failed (retried)
	Assists     uint64        // flushes run by a submitting goroutine: the flusher was starved of CPU
	MaxWait     time.Duration // the longest a locally joined event waited for its flush to start
	FlushTime   time.Duration // total time of the flush round trips
	Rounds      int           // rounds remembered now
}

type localState struct {
	shards [localShards]localShard
	rounds atomic.Int64 // entries in the shards

	every time.Duration // flush interval
	guard time.Duration // answers stop this long before due/expiry
	max   int64         // entries at most

	fmu     sync.Mutex // one flush at a time: lock, tryLock, unlock
	qmu     sync.Mutex
	queue   []*localRound  // dirty rounds, in the order they became dirty
	retry   []resubmission // events to submit again, their round gone
	unsent  []*flushCall   // flush calls that got no reply, to send again
	acked   []string       // markers of answered calls, deleted by the next flush
	running bool           // a flusher goroutine is running
	wake    chan struct{}
	held    atomic.Bool // tests: the background flusher waits (HoldFlushes)
	starved atomic.Bool // tests: the background flusher skips its flushes, assists do not (StarveFlusher)
	failing atomic.Bool // the last flush got no reply: no local answers until one does

	base     time.Time    // queuedAt counts from it (monotonic)
	queuedAt atomic.Int64 // when the queue last became non-empty; 0: empty
	maxWait  atomic.Int64 // the longest an event waited for its flush to start, ns

	// lockedAt is when the flush lock was taken (since base, ns); 0: it is
	// free. Its holder (a flush, its resubmissions, Inspect's read) holds
	// every flush back while it waits on Redis.
	lockedAt atomic.Int64

	joined, flushes, flushedKeys, resubmitted, flushErrors, assists, uncertain, forgotten, skipped atomic.Uint64
	flushNanos                                                                                     atomic.Int64
}

func newLocalState(every, guard time.Duration, max int) *localState {
	ls := &localState{every: every, guard: guard, max: int64(max), wake: make(chan struct{}, 1), base: time.Now()}
	for i := range ls.shards {
		ls.shards[i].m = make(map[localKey]*localRound)
	}
	return ls
}

// suspended says local answers are stopped: flushes fail, or the one under
// way (or a read holding them back) waits.
func (ls *localState) suspended() bool { return ls.failing.Load() || ls.flushStalled() }

// flushStalled reports the flush lock held for longer than flushMargin,
// the round trip the guard allows a flush: a flush (or a read under the
// lock, Inspect's) waits on Redis, the events answered meanwhile may reach
// Redis only after their round can be taken, and a crash would lose more
// than one flush interval's counts.
func (ls *localState) flushStalled() bool {
	at := ls.lockedAt.Load()
	return at != 0 && time.Since(ls.base)-time.Duration(at) > flushMargin
}

// lock takes the flush lock; tryLock tries to; unlock gives it up. They
// keep lockedAt.
func (ls *localState) lock() {
	ls.fmu.Lock()
	ls.locked()
}

func (ls *localState) tryLock() bool {
	if !ls.fmu.TryLock() {
		return false
	}
	ls.locked()
	return true
}

func (ls *localState) locked() { ls.lockedAt.Store(max(int64(time.Since(ls.base)), 1)) }

func (ls *localState) unlock() {
	ls.lockedAt.Store(0)
	ls.fmu.Unlock()
}

func (ls *localState) shard(key RoundKey) *localShard {
	return &ls.shards[key[0]%localShards]
}

// LocalStats reports what local joins did since New.
func (c *Coalescer) LocalStats() LocalStats {
	ls := c.local
	if ls == nil {
		return LocalStats{}
	}
	return LocalStats{
		Joined: ls.joined.Load(), Flushes: ls.flushes.Load(), FlushedKeys: ls.flushedKeys.Load(),
		Resubmitted: ls.resubmitted.Load(), FlushErrors: ls.flushErrors.Load(), Assists: ls.assists.Load(),
		Uncertain: ls.uncertain.Load(), Forgotten: ls.forgotten.Load(), Skipped: ls.skipped.Load(),
		MaxWait:   time.Duration(ls.maxWait.Load()),
		FlushTime: time.Duration(ls.flushNanos.Load()), Rounds: int(ls.rounds.Load()),
	}
}

// joinLocal answers an event locally when this process knows its round. It
// returns ok false when the event must go to Redis; then, if opener is not
// nil, this caller is the one who asks Redis for the key (others of this
// process wait for its answer, then join locally) and must call
// learn or settle with it.
func (c *Coalescer) joinLocal(ctx context.Context, p *compiled, key RoundKey, ev Event, now time.Time) (d Decision, ok bool, opener *localRound) {
	ls := c.local
	if ls.suspended() {
		// Flushes fail, or the one under way (or a read holding them
		// back) waits: Redis unreachable, or a blackhole until the read
		// timeout. Answer nothing here that could not reach Redis;
		// events go there (and fail, or bypass, as the policy says).
		return d, false, nil
	}
	lk := localKey{p, key}
	sh := ls.shard(key)
	var nowMs int64
	for range 3 {
		sh.mu.Lock()
		// The clock is read here, under the lock, not before: an answer
		// is given against the time it is given at. A reading taken
		// before a preemption could fall before the round's local time
		// ended, and the answer after the round was taken.
		now = c.now()
		nowMs = now.UnixMilli()
		lr := sh.m[lk]
		switch {
		case lr == nil:
			if ls.rounds.Load() >= ls.max {
				sh.mu.Unlock()
				return d, false, nil
			}
			lr = &localRound{lk: lk, opening: make(chan struct{})}
			sh.m[lk] = lr
			ls.rounds.Add(1)
			sh.mu.Unlock()
			return d, false, lr
		case lr.opening != nil:
			wait := lr.opening
			sh.mu.Unlock()
			t := time.NewTimer(openerWait)
			select {
			case <-wait:
				t.Stop()
				continue
			case <-t.C:
				return d, false, nil // the opener is slow: ask Redis
			case <-ctx.Done():
				t.Stop()
				return d, false, nil
			}
		case lr.gone || !lr.live || nowMs >= lr.until:
			// Only a live entry answers: one learned near its round's end
			// holds a token but no outcome, due time or Redis key.
			if lr.dirty || !lr.gone && nowMs < lr.bypass {
				// Its events wait for their flush, which forgets it; or
				// the round is near its end: to Redis, no opener.
				sh.mu.Unlock()
				return d, false, nil
			}
			// Past its local time: this caller asks Redis again.
			c.dropLocked(sh, lr)
			sh.mu.Unlock()
			continue
		}
		if p.Payload == PayloadLast {
			// Answered once its args are in the round's payload key
			// (lastkey.go), written without the shard's lock held.
			tok, pkey := lr.token, lr.pkey
			sh.mu.Unlock()
			if c.repl.active(ctx) {
				return d, false, nil // acks: through the script, which handles a doubt
			}
			wrote, err := c.writeLast(ctx, pkey, ev.Args)
			if err != nil {
				// To Redis as an ordinary event, which fails or bypasses
				// as the policy says (a write that landed all the same
				// only wrote these args before they are written again).
				return d, false, nil
			}
			sh.mu.Lock()
			if !wrote {
				// The round closed, or has no payload key (an older
				// version opened it): its events go to Redis, straight,
				// until its local time would have ended.
				if sh.m[lk] == lr && lr.live {
					lr.live, lr.bypass = false, lr.until+ls.guard.Milliseconds()
				}
				sh.mu.Unlock()
				return d, false, nil
			}
			now = c.now()
			nowMs = now.UnixMilli()
			if sh.m[lk] != lr || lr.gone {
				// The entry went meanwhile (a flush found the round gone:
				// taken after this write). The args are in the round; only
				// the count is lost.
				d = Decision{Outcome: OutcomeCoalesced, Round: tok, Events: lr.count + lr.flushing + lr.pending + 1, DueAt: lr.due}
				sh.mu.Unlock()
				ls.joined.Add(1)
				return d, true, nil
			}
		}
		if lr.pending == 0 {
			lr.first = Event{Type: ev.Type, Args: append([]byte(nil), ev.Args...), Key: ev.Key, TraceParent: ev.TraceParent}
		}
		lr.pending++
		if nowMs > lr.last {
			lr.last = nowMs
		}
		queue := !lr.dirty
		lr.dirty = true
		d = Decision{Outcome: lr.outcome, Round: lr.token, Events: lr.count + lr.flushing + lr.pending, DueAt: lr.due}
		if p.Extend {
			due := now.Add(p.Window)
			if cap := lr.opened.Add(p.MaxWait); due.After(cap) {
				due = cap
			}
			if due.After(lr.due) {
				d.Outcome, d.DueAt = OutcomeExtended, due
			}
		}
		sh.mu.Unlock()
		ls.joined.Add(1)
		if queue {
			ls.enqueue(c, lr)
		}
		if !ls.held.Load() {
			c.assistFlush()
		}
		return d, true, nil
	}
	return d, false, nil
}

// learn records, in the opener's entry, the round a Redis answer showed
// pending and published, and lets the waiting events join it. Any other
// answer (an error, a round not published, another layout's round) settles
// the entry away.
func (c *Coalescer) learn(lr *localRound, p *compiled, d Decision, r reply) {
	ls := c.local
	sh := ls.shard(lr.lk.key)
	until, ok := c.localUntil(p, d, r)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !ok || sh.m[lr.lk] != lr {
		c.dropLocked(sh, lr)
		return
	}
	if c.now().UnixMilli() >= until {
		// Near its end: this round's events go to Redis, straight. The
		// entry is not live: it never answers an event, whatever clock
		// reading the event compares with it.
		lr.token, lr.until, lr.bypass = r.token, 0, until+c.local.guard.Milliseconds()
		close(lr.opening)
		lr.opening = nil
		c.local.ensureFlusher(c) // it sweeps the entry
		return
	}
	lr.token, lr.rkey, lr.hash = r.token, r.rkey, r.token.isHashToken()
	if p.lastKeyed() {
		lr.pkey = payloadKey(r.rkey, r.token)
	}
	lr.outcome = d.Outcome
	switch d.Outcome {
	case OutcomeScheduled, OutcomeExtended:
		lr.outcome = OutcomeCoalesced
	case OutcomePublished:
		lr.outcome = OutcomeDuplicate
		if p.Mode == ModeThrottle {
			lr.outcome = OutcomeThrottled
		}
	}
	lr.opened = r.openedAt
	lr.until, lr.due, lr.count = until, d.DueAt, d.Events
	lr.live = true
	close(lr.opening)
	lr.opening = nil
	c.local.ensureFlusher(c) // it sweeps the entry when its time is over
}

// settle gives up an opener's entry (the Redis answer cannot be joined
// locally), waking its waiters, who then ask Redis themselves.
func (c *Coalescer) settle(lr *localRound) {
	sh := c.local.shard(lr.lk.key)
	sh.mu.Lock()
	c.dropLocked(sh, lr)
	sh.mu.Unlock()
}

// dropLocked removes an entry from its shard and marks it gone (its
// waiters wake if it was still opening); events it still has pending are
// flushed all the same (and submitted again, the round gone).
func (c *Coalescer) dropLocked(sh *localShard, lr *localRound) {
	if lr.opening != nil {
		close(lr.opening)
		lr.opening = nil
	}
	lr.gone = true
	if sh.m[lr.lk] == lr {
		delete(sh.m, lr.lk)
		c.local.rounds.Add(-1)
	}
}

// localUntil is the time until which events of the round of this answer may
// be answered locally, and whether they may at all: the round must be one
// of the policy's own layout, pending and published.
func (c *Coalescer) localUntil(p *compiled, d Decision, r reply) (int64, bool) {
	if r.token == 0 || r.fire || r.token.isHashToken() != p.hash {
		return 0, false
	}
	guard := c.local.guard.Milliseconds()
	switch p.Mode {
	case ModeDebounce:
		if d.DueAt.IsZero() {
			return 0, false
		}
		return d.DueAt.UnixMilli() - guard, true
	case ModeThrottle:
		if d.Outcome != OutcomeThrottled && d.Outcome != OutcomePublished {
			return 0, false
		}
		exp, _ := r.token.packedParts() // the window's expiry
		return exp - guard, true
	case ModeDedup:
		exp, _ := r.token.packedParts()
		return exp - guard, true
	}
	return 0, false
}

// localPending is how many events this process answered locally for the
// round of token and has not put in a flush yet.
func (c *Coalescer) localPending(p *compiled, key RoundKey, token Token) int {
	sh := c.local.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if lr := sh.m[localKey{p, key}]; lr != nil && lr.token == token {
		return lr.pending
	}
	return 0
}

// forget drops what this process knows of a key's round (it was taken or
// cancelled here); events answered locally for it are still flushed, and
// submitted again if the round is gone.
func (c *Coalescer) forget(jobType string, key RoundKey, token Token) {
	if c.local == nil {
		return
	}
	p, ok := c.policies[jobType]
	if !ok {
		return
	}
	sh := c.local.shard(key)
	sh.mu.Lock()
	if lr := sh.m[localKey{p, key}]; lr != nil && lr.opening == nil && lr.token == token {
		lr.until = 0
		if !lr.dirty {
			c.dropLocked(sh, lr)
		}
	}
	sh.mu.Unlock()
}
