package debounce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/fingerprint"
)

// Submit decides what to do with one event, in one Redis round trip or
// none (a local join): open a round (and publish it), join the pending one,
// or drop it by design. The outcome is in the Decision; an error means the
// event was not accepted: ErrInvalidEvent, ErrNoPolicy, ErrJobTooLarge,
// ErrStoreUnavailable (fail closed), ErrPublish, or the context's error.
func (c *Coalescer) Submit(ctx context.Context, ev Event) (Decision, error) {
	return c.SubmitPrepared(ctx, Prepared{ev: ev}) // not prepared: prepared there
}

// policyFor is jobType's policy; for a type without one, an *EventError
// when the type itself is not valid (it could never have one), else
// ErrNoPolicy.
func (c *Coalescer) policyFor(jobType string) (*compiled, error) {
	if p, ok := c.policies[jobType]; ok {
		return p, nil
	}
	if err := fingerprint.ValidateType(jobType); err != nil {
		return nil, fingerprintError(err, "")
	}
	return nil, fmt.Errorf("%w %q", ErrNoPolicy, jobType)
}

// identify computes the fingerprint, the round key and (accumulate) the item.
func (c *Coalescer) identify(p *compiled, ev Event) (fingerprint.Fingerprint, RoundKey, []byte, error) {
	if len(bytes.TrimSpace(ev.Args)) == 0 {
		return fingerprint.Fingerprint{}, RoundKey{}, nil, eventError("args", "invalid_event", "args: required; send {} when the job has none")
	}
	if ev.TraceParent != "" && !ValidTraceParent(ev.TraceParent) {
		return fingerprint.Fingerprint{}, RoundKey{}, nil, eventError("traceparent", "invalid_traceparent", "traceparent: %q is not a W3C traceparent (lowercase hex and dashes, e.g. 00-<32 hex>-<16 hex>-01)", truncate(ev.TraceParent, 80))
	}
	fp, err := p.scheme.FromJSON(ev.Args)
	if err != nil {
		return fp, RoundKey{}, nil, fingerprintError(err, "")
	}
	key := RoundKey(fp)
	if ev.Key != "" {
		if len(ev.Key) > MaxExplicitKeyLen || !utf8.ValidString(ev.Key) {
			return fp, key, nil, eventError("key", "invalid_event", "key: must be 1-%d bytes of UTF-8", MaxExplicitKeyLen)
		}
		key = ExplicitKey(p.Type, ev.Key)
	}
	if p.Payload != PayloadAccumulate {
		return fp, key, nil, nil
	}
	if p.itemScheme == nil {
		item, err := fingerprint.Canonicalize(ev.Args)
		if err != nil {
			return fp, key, nil, fingerprintError(err, "")
		}
		return fp, key, item, nil
	}
	wrapped, err := p.itemScheme.AppendCanonical(nil, ev.Args)
	if err != nil {
		return fp, key, nil, fingerprintError(err, "item_field: ")
	}
	return fp, key, wrapped[p.itemPrefix : len(wrapped)-1], nil
}

// reply is a script's answer, in either layout.
type reply struct {
	status    int // statusOpened, ...
	token     Token
	count     int
	published bool
	openedAt  time.Time
	due       time.Time // zero: immediate
	fire      bool      // accumulate filled: publish again, due now, with version
	version   int
	rkey      string // the Redis key the token belongs to (round or throttle window)
	// doubt: the replicas did not confirm this write in time
	// (replication.go); the reply is the primary's all the same.
	doubt    error
	replayed bool   // an idempotency key's earlier decision (idempotency.go)
	idem     string // the idempotency record written with the decision, if any
}

// Script statuses, shared by both layouts.
// The statuses of the scripts that open or join a round (open_packed.lua,
// open_round.lua), declared there as JOINED, OPENED, LEADING, THROTTLED and
// EXTENDED (TestScriptStatuses checks the values).
const (
	statusJoined    = 0
	statusOpened    = 1
	statusLeading   = 2
	statusThrottled = 3
	statusExtended  = 4
	// statusAbsent: join_round.lua found no round (nothing written).
	statusAbsent = -1
)

// Prepared is an event checked and fingerprinted by Prepare, to submit with
// SubmitPrepared: a caller that needs the round key before it submits (to
// decide a batch's events of one key in order) fingerprints it once.
type Prepared struct {
	ev   Event
	p    *compiled
	fp   fingerprint.Fingerprint
	key  RoundKey
	item []byte
	idem *idempotency // the event's idempotency record, when it has a key
}

// Key is the event's round key.
func (pr Prepared) Key() RoundKey { return pr.key }

// Prepare checks an event and computes its fingerprint and round key, as
// Submit would, without deciding it. Its errors are Submit's
// ErrInvalidEvent and ErrNoPolicy.
func (c *Coalescer) Prepare(ev Event) (Prepared, error) {
	p, err := c.policyFor(ev.Type)
	if err != nil {
		return Prepared{ev: ev}, err
	}
	fp, key, item, err := c.identify(p, ev)
	if err == nil && ev.IdempotencyKey != "" {
		var id *idempotency
		if id, err = c.idempotencyOf(p, ev, key); err == nil {
			return Prepared{ev: ev, p: p, fp: fp, key: key, item: item, idem: id}, nil
		}
	}
	if err != nil {
		return Prepared{ev: ev, fp: fp, key: key}, err // p nil: SubmitPrepared prepares it again
	}
	return Prepared{ev: ev, p: p, fp: fp, key: key, item: item}, nil
}

// SubmitPrepared is Submit for an event Prepare accepted (an event prepared
// by another Coalescer, or not at all, is prepared again).
func (c *Coalescer) SubmitPrepared(ctx context.Context, pr Prepared) (Decision, error) {
	start := time.Now()
	var at time.Time
	if c.hooks.Event != nil {
		at = c.now()
	}
	var d Decision
	var err error
	if pr.p == nil || c.policies[pr.ev.Type] != pr.p {
		d, err = c.submit(ctx, pr.ev)
	} else {
		d, err = c.submitPrepared(ctx, pr)
	}
	if c.hooks.Decision != nil {
		c.hooks.Decision(pr.ev.Type, d, err, time.Since(start))
	}
	if c.hooks.Event != nil {
		c.hooks.Event(pr.ev, at, d, err)
	}
	return d, err
}

func (c *Coalescer) submit(ctx context.Context, ev Event) (Decision, error) {
	pr, err := c.Prepare(ev)
	if err != nil {
		return Decision{Type: ev.Type, Key: pr.key, Fingerprint: pr.fp}, err
	}
	return c.submitPrepared(ctx, pr)
}

func (c *Coalescer) submitPrepared(ctx context.Context, pr Prepared) (d Decision, err error) {
	ev, p, fp, key, item := pr.ev, pr.p, pr.fp, pr.key, pr.item
	d = Decision{Type: ev.Type, Key: key, Fingerprint: fp}
	now := c.now()
	job := Job{
		Type: p.Type, Key: key, Fingerprint: fp, Mode: p.Mode, Payload: p.Payload,
		Args: ev.Args, TTL: p.lifetime(), TraceParent: ev.TraceParent,
	}
	if c.sizer != nil && int64(len(ev.Args)+len(ev.TraceParent)+sizeCheckMargin) >= c.sizer.MaxPayload() {
		if err := c.sizer.JobFits(job); err != nil {
			return d, err
		}
	}
	var opener *localRound // this caller asks Redis for the others of this process
	// An event with an idempotency key goes to Redis, where its record is.
	if p.local && pr.idem == nil && (p.gate == nil || p.gate.admit()) {
		ld, ok, op := c.joinLocal(ctx, p, key, ev, now)
		if p.gate != nil && (ok || !c.local.suspended()) {
			// A try declined because local answers are stopped (Redis
			// out of reach for flushes) says nothing of the type's
			// events: not measured, or an outage would turn a storm
			// type cold.
			p.gate.record(ok)
		}
		if ok {
			ld.Type, ld.Key, ld.Fingerprint = d.Type, key, fp
			return ld, nil
		}
		if opener = op; opener != nil {
			defer func() {
				if opener != nil {
					c.settle(opener)
				}
			}()
		}
	}
	if p.Fail == FailClosed {
		if err := c.noReplica(ctx, c.keys(p, key)[0]); err != nil {
			c.onDoubt(ctx, p, key, err) // counted; refused below, nothing written
			return d, fmt.Errorf("debounce: submit %s %s: %w", p.Type, key, err)
		}
	}
	hold := p.deferred && c.holdInRedis(ctx)
	r, err := p.layout.open(ctx, c, p, job, now, item, pr.idem, hold)
	defer func() {
		// The decision stands on the primary; its replicas did not confirm
		// it in time: refused under fail: closed (the event may be in its
		// round all the same), counted under fail: open.
		if err == nil && r.doubt != nil {
			err = c.onDoubt(ctx, p, key, r.doubt)
		}
	}()
	if isWrongType(err) {
		// The key holds a round of the other layout: the policy's payload
		// changed (first <-> last/accumulate) while a round opened under
		// the earlier one is pending. Join it in its own layout: it runs
		// under the policy it was opened with, and the next round takes
		// the new one. Not a store outage.
		c.mismatch(ctx, p)
		r, err = p.layout.other().open(ctx, c, p, job, now, item, pr.idem, hold)
	}
	if errors.Is(err, ErrIdempotencyKeyReused) {
		return d, err
	}
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return d, fmt.Errorf("debounce: submit %s %s: %w", p.Type, key, ctxErr)
		}
		return c.storeDown(ctx, p, d, job, now, err)
	}
	d.Round, d.Events = r.token, r.count
	job.Token, job.OpenedAt, job.DueAt = r.token, r.openedAt, r.due

	d.Outcome, d.DueAt = outcomeOf(p, r)
	if r.replayed {
		if hold {
			c.ensureForwarding() // its round may be held in Redis
		}
		return c.replay(ctx, p, d, job, r)
	}
	if r.status == statusOpened || r.status == statusLeading {
		if r.published {
			// Held in Redis until due (deferred.go): the write that
			// answered holds the whole job, and a forwarder publishes it.
			c.ensureForwarding()
		} else {
			d, err = c.publishOpened(ctx, p, d, job, r)
		}
		if err == nil && opener != nil && r.doubt == nil {
			c.learn(opener, p, d, r)
			opener = nil
		}
		return d, err
	}
	if hold {
		// Its opener may be gone: forward from here too (a Coalescer that
		// holds no rounds now, auto on a Redis without persistence, leaves
		// a round held earlier to the workers' and daemon's forwarders).
		c.ensureForwarding()
	}
	if r.fire {
		// This event filled the round: publish the version it took, due now,
		// on the round's schedule subject (replacing the pending schedule).
		job.Version, job.DueAt = r.version, now
	}
	switch {
	case !r.published:
		// The opener has not confirmed its publish (it may be publishing now,
		// or may have died): publish the round ourselves before we call this
		// event accepted. The same token and version make it idempotent.
		// Filled, only the new version goes out: version 0 due now would go
		// straight to the job subject and run beside it.
		if err := c.publish(ctx, job); err != nil {
			return d, err
		}
		c.markPublished(ctx, p, key, r)
		if !p.hash && r.status == statusJoined && p.releasedByJob() {
			// A round left unpublished whose message is gone: its job may
			// have run (a failover brought the round back without its
			// take or its mark), and the stream drops the publish above as
			// the duplicate of that message. Past due, its identity lets
			// the reaper find out and publish a new version.
			c.noteIfOverdue(ctx, p, job, now)
		}
	case r.fire:
		if err := c.publish(ctx, job); err != nil {
			// The round stays published for its earlier due time; the event is
			// in it, so it is still accepted.
			c.log.WarnContext(ctx, "reschedule of a full round failed; it runs at its earlier due time",
				"job_type", p.Type, "key", key.String(), "token", r.token.String(), "err", err)
		}
	case !p.hash && r.status == statusJoined && p.releasedByJob():
		c.noteIfOverdue(ctx, p, job, now)
	}
	if opener != nil && r.doubt == nil {
		c.learn(opener, p, d, r)
		opener = nil
	}
	return d, nil
}

// outcomeOf is the outcome, and due time, of a script's reply.
func outcomeOf(p *compiled, r reply) (Outcome, time.Time) {
	switch r.status {
	case statusOpened, statusLeading:
		if r.due.IsZero() {
			return OutcomePublished, r.due
		}
		return OutcomeScheduled, r.due
	case statusThrottled:
		return OutcomeThrottled, time.Time{}
	case statusExtended:
		return OutcomeExtended, r.due
	}
	if p.Mode == ModeDedup {
		return OutcomeDuplicate, time.Time{}
	}
	return OutcomeCoalesced, r.due
}

// isWrongType reports a script that met a key of the other layout.
func isWrongType(err error) bool {
	return err != nil && strings.Contains(err.Error(), "WRONGTYPE")
}

// mismatch counts an event that met a round of the other layout, and logs
// it once per job type.
func (c *Coalescer) mismatch(ctx context.Context, p *compiled) {
	if c.hooks.LayoutMismatch != nil {
		c.hooks.LayoutMismatch(p.Type)
	}
	if _, seen := c.mismatched.LoadOrStore(p.Type, true); !seen {
		c.log.WarnContext(ctx, "a round opened under an earlier version of this policy (another payload, so another layout) is pending; events join it until its job starts, and the next round follows the policy as it is now",
			"job_type", p.Type)
	}
}

// publishOpened publishes a round this event opened. On failure it backs the
// reservation out (unless a joiner published the round meanwhile), so a retry
// can open it again.
func (c *Coalescer) publishOpened(ctx context.Context, p *compiled, d Decision, job Job, r reply) (Decision, error) {
	pubErr := c.publish(ctx, job)
	if pubErr == nil {
		c.markPublished(ctx, p, d.Key, r)
		return d, nil
	}
	if errors.Is(pubErr, ErrMaybePublished) {
		// Stored or not, nobody knows yet: backing the round out could
		// leave its job without it and let a retry open a second one. Keep
		// it unpublished for a retry (or the reaper) to settle.
		return d, pubErr
	}
	if !c.forgetIdempotency(ctx, r) {
		// The record stays, so the round must too: a retry replays it and
		// publishes it (or the reaper settles it).
		return d, pubErr
	}
	res, err := c.backout(ctx, r)
	switch {
	case err != nil:
		return d, errors.Join(pubErr, fmt.Errorf("%w: backing out the round: %w", ErrStoreUnavailable, err))
	case res == backoutKept:
		return d, nil // a joiner published it: this event is covered
	}
	// Backed out, or joined meanwhile and left to the joiner, who is
	// publishing it (or fails too and the reaper releases it): either way
	// this event is not known to be covered.
	return d, pubErr
}

func (c *Coalescer) publish(ctx context.Context, job Job) error {
	if c.pub == nil {
		return fmt.Errorf("%w: no Publisher configured", ErrPublish)
	}
	c.stamp(ctx, &job)
	if err := c.pub.Publish(ctx, job); err != nil {
		if c.hooks.PublishError != nil {
			c.hooks.PublishError(job.Type, err)
		}
		return fmt.Errorf("%w: %s round %s of %s: %w", ErrPublish, job.Type, job.Token, job.Key, err)
	}
	return nil
}

// storeDown handles a Redis failure: publish without a reservation (fail
// open) or refuse (fail closed).
func (c *Coalescer) storeDown(ctx context.Context, p *compiled, d Decision, job Job, now time.Time, cause error) (Decision, error) {
	if c.hooks.StoreError != nil {
		c.hooks.StoreError(p.Type, p.Fail, cause)
	}
	storeErr := fmt.Errorf("%w: %s %s: %w", ErrStoreUnavailable, p.Type, d.Key, cause)
	if p.Fail == FailClosed {
		return d, storeErr
	}
	job.Token, job.OpenedAt, job.Bypass = 0, now, NewBypass()
	if p.Mode == ModeDebounce {
		job.DueAt = now.Add(p.Window)
	}
	if err := c.publish(ctx, job); err != nil {
		return d, errors.Join(storeErr, err)
	}
	c.log.WarnContext(ctx, "redis unavailable, published without a reservation (fail open)",
		"job_type", p.Type, "key", d.Key.String(), "err", cause)
	d.Outcome, d.Events, d.DueAt = OutcomeBypassed, 1, job.DueAt
	return d, nil
}

// keys returns the round key and, for throttle, the window key.
func (c *Coalescer) keys(p *compiled, key RoundKey) []string {
	return c.keysIn(p, key, make([]string, 0, 2))
}

// keysIn is keys appended to dst (a callArgs' keys, with room for the due
// list and the identity hash).
func (c *Coalescer) keysIn(p *compiled, key RoundKey, dst []string) []string {
	if p.Mode == ModeThrottle {
		return append(dst, redisKey(c.prefix, p.mix, key, "t"), redisKey(c.prefix, p.mix, key, ""))
	}
	return append(dst, redisKey(c.prefix, p.mix, key, ""))
}

// eval runs a script, batched with concurrent calls when batching is on;
// a replication doubt (replication.go) is not reported: for writes that
// need none.
func (c *Coalescer) eval(ctx context.Context, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	cmd, _ := c.evalDoubt(ctx, s, keys, args...)
	return cmd
}

func newRnd() uint64 { return 1 + rand.Uint64N(1<<packRndBits-1) }

func (c *Coalescer) openPacked(ctx context.Context, p *compiled, job Job, now time.Time, id *idempotency, hold bool) (reply, error) {
	key := job.Key
	nowMs := now.UnixMilli()
	rnd := newRnd()
	expiry := now.Add(p.lifetime()).UnixMilli()
	a := newPackedCall() // the call's keys and arguments, one allocation
	args := a.argv
	keys := c.keysIn(p, key, a.keys[:0])
	open := uint64(packOpen(rnd)) // the value a round opened now starts with
	switch {
	case hold:
		// Opened published and held in Redis until due, with its identity
		// for the forwarder (deferred.go).
		job.Token, job.OpenedAt, job.DueAt = packedToken(expiry, rnd), msTime(nowMs), msTime(nowMs+p.Window.Milliseconds())
		if p.Exclusive {
			job.Lease = p.Lease // whoever forwards it: the job carries its key's lease
		}
		keys = append(keys, p.dueKey, p.idsKey)
		open |= uint64(packPub)
		args = append(args, a.uint(open), a.int(expiry), a.int(nowMs), p.lifeArg, a.int(job.DueAt.UnixMilli()),
			a.bytes(appendIdentity(make([]byte, 0, identitySize(job)), job)))
	case p.Mode == ModeThrottle:
		wrnd := newRnd()
		args = append(args, a.uint(open), a.int(expiry), a.int(nowMs), p.lifeArg, a.uint(uint64(packOpen(wrnd))), p.windowArg, boolArg(p.Trailing), p.trailingArg)
	default:
		args = append(args, a.uint(open), a.int(expiry), a.int(nowMs), p.lifeArg)
	}
	var res []int64
	var opened [3]int64 // an opening's reply, made here (no allocation)
	var err, doubt error
	var replayed bool
	if id == nil {
		var cmd *redis.Cmd
		cmd, doubt = c.evalDoubt(ctx, openPackedScript, keys, args...)
		if st, ok := cmd.Val().(int64); ok && cmd.Err() == nil {
			// An opening answers with its status alone (open_packed.lua):
			// its value and expiry are the ones sent.
			opened = [3]int64{st, int64(open), expiry}
			res = opened[:]
		} else {
			res, err = cmd.Int64Slice()
		}
	} else {
		res, replayed, doubt, err = c.evalIdempotent(ctx, openPackedIdemScript, id, keys, args...)
	}
	if err != nil {
		return reply{}, err
	}
	if len(res) != 3 {
		// A copy in the error: res itself stays on the stack.
		return reply{}, fmt.Errorf("open_packed: unexpected reply %v", append([]int64(nil), res...))
	}
	v, exp := packed(res[1]), res[2]
	r := reply{
		status:    int(res[0]),
		token:     packedToken(exp, v.rnd()),
		count:     v.count(),
		published: v.published(),
		rkey:      keys[0],
		doubt:     doubt,
		replayed:  replayed,
	}
	if id != nil {
		r.idem = id.key
	}
	if r.status == statusLeading || r.status == statusThrottled {
		r.rkey = keys[1]
	}
	switch {
	case r.status == statusLeading || r.status == statusThrottled:
		r.openedAt = msTime(exp).Add(-p.Window)
	case p.Mode == ModeDebounce:
		r.openedAt = msTime(exp).Add(-p.lifetime())
		r.due = r.openedAt.Add(p.Window)
	case p.Mode == ModeThrottle: // the trailing round, due at the window's end
		r.due = msTime(exp).Add(-p.trailingLife)
		r.openedAt = now
		if r.status == statusJoined {
			r.openedAt = r.due.Add(-p.Window)
		}
	default: // dedup: immediate
		r.openedAt = msTime(exp).Add(-p.lifetime())
	}
	return r, nil
}

func (c *Coalescer) openRound(ctx context.Context, p *compiled, job Job, now time.Time, item []byte, id *idempotency, hold bool) (reply, error) {
	nowMs := now.UnixMilli()
	key := job.Key
	token := Token(hashTokenBit | rand.Uint64N(hashTokenBit))
	var data []byte
	switch p.Payload {
	case PayloadLast:
		data = job.Args
	case PayloadAccumulate:
		data = item
	}
	var rkey string // the round's key, once made
	if id == nil && p.Mode == ModeDebounce && !p.guess.opening() {
		// Most events of the type join: the join alone, without the
		// opening's arguments; a key with no round is opened below.
		jc := newJoinCall() // the join's keys and arguments, one allocation
		a := &jc.callArgs
		jkeys := c.keysIn(p, key, a.keys[:0])
		rkey = jkeys[0]
		if p.deferred {
			jkeys = append(jkeys, p.dueKey)
		}
		jargs := append(a.argv, a.int(nowMs), p.extendArg, p.maxWaitArg, p.payloadArg, a.bytes(data), p.maxItemsArg)
		cmd, doubt := c.evalDoubt(ctx, joinRoundScript, jkeys, jargs...)
		if err := cmd.Err(); err != nil {
			return reply{}, err
		}
		ints, err := scriptInts(cmd.Val(), jc.ints[:0])
		switch {
		case err != nil:
			return reply{}, fmt.Errorf("join_round: %w", err)
		case len(ints) == 8:
			p.guess.seen(false)
			return hashReply(ints, rkey, doubt, false, ""), nil
		case len(ints) != 1 || ints[0] != statusAbsent:
			return reply{}, fmt.Errorf("join_round: unexpected reply %v", ints)
		}
	}
	rc := newRoundCall() // the opening's keys and arguments, one allocation
	a := &rc.callArgs
	var keys []string
	if rkey != "" {
		keys = append(a.keys[:0], rkey)
	} else {
		keys = c.keysIn(p, key, a.keys[:0])
	}
	now1 := a.int(nowMs)
	argv := append(a.argv, a.uint(uint64(token)), now1, a.int(now.Add(p.lifetime()).UnixMilli()), a.int(now.Add(p.Window).UnixMilli()),
		p.extendArg, p.maxWaitArg, p.payloadArg, a.bytes(data), p.maxItemsArg)
	argv = appendHashIdentity(a, argv, &job, hold)
	switch {
	case hold:
		// Opened published and held in Redis until due (deferred.go);
		// the due list also takes a filled round to now.
		// Whoever forwards it, the job carries its key's lease.
		argv = append(argv, "due", job.TraceParent, p.leaseArg)
		keys = append(keys, p.dueKey)
	case p.deferred:
		// Opened with a JetStream schedule (Redis keeps no data), but a
		// round held in Redis earlier that this event fills goes to now in
		// the due list.
		argv = append(argv, "list")
		keys = append(keys, p.dueKey)
	case p.Mode == ModeThrottle:
		argv = append(argv, uint64(packOpen(newRnd())), p.windowArg, p.trailingArg)
	}
	var ints []int64
	var replayed bool
	var doubt error
	if id == nil {
		var cmd *redis.Cmd
		cmd, doubt = c.evalDoubt(ctx, openRoundScript, keys, argv...)
		if err := cmd.Err(); err != nil {
			return reply{}, err
		}
		var err error
		if ints, err = scriptInts(cmd.Val(), rc.ints[:0]); err != nil {
			return reply{}, fmt.Errorf("open_round: %w", err)
		}
	} else {
		var err error
		if ints, replayed, doubt, err = c.evalIdempotent(ctx, openRoundIdemScript, id, keys, argv...); err != nil {
			return reply{}, err
		}
	}
	idem := ""
	if id != nil {
		idem = id.key
	}
	if ints[0] == statusLeading {
		v := packed(ints[1])
		return reply{
			status: statusLeading, token: packedToken(ints[2], v.rnd()), count: 1,
			openedAt: now, rkey: keys[1], doubt: doubt, replayed: replayed, idem: idem,
		}, nil
	}
	if len(ints) != 8 {
		return reply{}, fmt.Errorf("open_round: unexpected reply %v", ints)
	}
	if id == nil && p.Mode == ModeDebounce {
		p.guess.seen(ints[0] == statusOpened)
	}
	return hashReply(ints, keys[0], doubt, replayed, idem), nil
}

// hashReply reads open_round.lua's (or join_round.lua's) reply of eight.
func hashReply(ints []int64, rkey string, doubt error, replayed bool, idem string) reply {
	return reply{
		status:    int(ints[0]),
		token:     Token(ints[1]),
		count:     int(ints[2]),
		openedAt:  msTime(ints[3]),
		due:       msTime(ints[4]),
		published: ints[5] == 1,
		fire:      ints[6] == 1,
		version:   int(ints[7]),
		rkey:      rkey,
		doubt:     doubt,
		replayed:  replayed,
		idem:      idem,
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// scriptInts reads a decision script's reply: an array of integers and
// decimal strings, or a join's (join_tail.lua) numbers in one string
// (appended to out).
func scriptInts(v any, out []int64) ([]int64, error) {
	switch v := v.(type) {
	case []any:
		return int64s(v)
	case string:
		return spacedInts(v, out)
	}
	return nil, fmt.Errorf("reply has type %T", v)
}

// spacedInts appends to out the decimal numbers of s, separated by single
// spaces.
func spacedInts(s string, out []int64) ([]int64, error) {
	for i := 0; ; i++ {
		field, rest, more := strings.Cut(s, " ")
		n, err := strconv.ParseUint(field, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("reply element %d %q is not a number", i, field)
		}
		out = append(out, int64(n))
		if !more {
			return out, nil
		}
		s = rest
	}
}

// int64s converts a script reply of integers and decimal strings.
func int64s(res []any) ([]int64, error) {
	out := make([]int64, len(res))
	for i, x := range res {
		switch v := x.(type) {
		case int64:
			out[i] = v
		case string:
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("reply element %d %q is not a number", i, v)
			}
			out[i] = int64(n)
		default:
			return nil, fmt.Errorf("reply element %d has type %T", i, x)
		}
	}
	return out, nil
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// markPublished records that the round's job is published, so joiners stop
// covering it and the reaper leaves it. The publish has happened, so this
// must not depend on the caller still waiting (an HTTP client gone): it
// runs on a context of its own and is retried a few times. Should it still
// fail, joiners publish the round again (idempotently) and the reaper finds
// its message before it would release it.
func (c *Coalescer) markPublished(ctx context.Context, p *compiled, key RoundKey, r reply) {
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	var err error
	for attempt := range markAttempts {
		if attempt > 0 {
			t := time.NewTimer(time.Duration(attempt) * 50 * time.Millisecond)
			select {
			case <-mctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		err = layoutOfToken(r.token).mark(mctx, c, r)
		if err == nil || mctx.Err() != nil {
			break
		}
	}
	if err != nil {
		c.log.WarnContext(ctx, "could not mark the round published; joiners will publish it again (idempotently), and the reaper looks for its message before it would release it",
			"job_type", p.Type, "key", key.String(), "token", r.token.String(), "err", err)
	}
}

// Marking a round published: attempts, and the time they may take in all.
const (
	markAttempts = 3
	markTimeout  = 2 * time.Second
)

// What backing out a round did.
const (
	backoutRemoved = iota // the round is gone (or was not the caller's any more)
	backoutKept           // a joiner published it meanwhile: the caller's event is covered
	backoutShared         // a joiner joined it and may be publishing it: left in place
)

// backout undoes a round whose publish failed, unless an event joined it
// meanwhile: its submitter publishes the round itself, and deleting it
// under that publish would lose the joiner's accepted event (its job would
// find no round).
func (c *Coalescer) backout(ctx context.Context, r reply) (int, error) {
	return layoutOfToken(r.token).backout(ctx, c, r)
}

// backout undoes a hash round (take_round.lua's backout).
func (hashLayout) backout(ctx context.Context, c *Coalescer, r reply) (int, error) {
	res, err := takeRoundScript.Run(ctx, c.rdb, []string{r.rkey},
		strconv.FormatUint(uint64(r.token), 10), 0, 0, "backout", 0).Slice()
	if err != nil {
		return backoutRemoved, err
	}
	switch {
	case len(res) > 0 && res[0] == int64(closeKept):
		return backoutKept, nil
	case len(res) > 0 && res[0] == int64(closeShared):
		return backoutShared, nil
	}
	return backoutRemoved, nil
}

// backout undoes a packed round (release_packed.lua's backout).
func (packedLayout) backout(ctx context.Context, c *Coalescer, r reply) (int, error) {
	exp, rnd := r.token.packedParts()
	res, err := releasePackedScript.Run(ctx, c.rdb, []string{r.rkey}, exp, rnd, "backout", 0).Int64Slice()
	if err != nil {
		return backoutRemoved, err
	}
	switch {
	case len(res) > 0 && res[0] == closeKept:
		return backoutKept, nil
	case len(res) > 0 && res[0] == closeShared:
		return backoutShared, nil
	}
	return backoutRemoved, nil
}
