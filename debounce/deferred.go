package debounce

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Rounds held in Redis until due (Schedules "redis"; auto's choice on a
// single-node or Sentinel Redis that keeps its data): a debounce round's opening writes, in the
// one script call that opens it, everything its job needs (the round, its
// identity, and its entry in its type's due list, a sorted set scored by
// due time), and answers. No JetStream message is sent at the opening: a
// forwarder (every Go worker, the daemon, and a Coalescer while rounds it
// opened wait) claims the rounds that came due and publishes their jobs as
// plain messages on their run subjects, in batches. So an opening costs one
// Redis round trip, like a join, and the stream stores one message per
// round, not a schedule and then its job.
//
// Why it loses nothing. The opening's answer comes after the write that
// holds the whole job (with replication acks, after WAIT), so a producer
// killed after it leaves nothing to finish: the round is listed, and any
// forwarder publishes it when due. A forwarder claims rounds by moving them
// to the claim's end in the list (Lease), so another one takes them over if
// it dies; every forward of a round takes a new version (forward_take.lua),
// so of two messages of one round the first to start runs and the other is
// superseded. A round taken, cancelled or replaced before it is forwarded is
// dropped from the list unpublished. A round filled (accumulate's
// max_items) is moved to now in the list; an extended one is listed again
// at its later due time when claimed early.
//
// What it needs: a forwarder running somewhere (a Go worker of the type,
// `coalesce work`, or `coalesce serve`: one of them runs wherever jobs
// run), and a Redis that keeps its data (AOF, or replicas with acks): a
// round held in Redis lives only there until due, where a per-round
// JetStream schedule would at least have fired with the first event's args.
// On Redis Cluster (and a Ring) a type's due list cannot share a slot with
// its rounds, so rounds get a JetStream schedule each (Schedules
// "jetstream").

// Schedules says where a debounce round waits for its due time
// (Config.Schedules).
type Schedules string

// Schedules values.
const (
	// SchedulesAuto (also "auto", the default): SchedulesRedis on a
	// single-node or Sentinel client whose Redis keeps its data (an
	// append-only file, or replica acks on); else SchedulesJetStream
	// (always on Cluster or Ring), the due lists still read and forwarded
	// on a single node, so rounds held earlier are published.
	SchedulesAuto Schedules = ""
	// SchedulesRedis: the round waits in Redis, in its type's due list; a
	// forwarder publishes its job when due. One Redis round trip per
	// opening.
	SchedulesRedis Schedules = "redis"
	// SchedulesJetStream: the opening publishes a JetStream message
	// schedule for the round before it answers (and marks the round
	// published): three round trips, one of them to NATS.
	SchedulesJetStream Schedules = "jetstream"
)

// Forwarding says whether a Coalescer forwards the rounds it held in Redis
// itself (Config.Forwarding).
type Forwarding string

// Forwarding values.
const (
	// ForwardingAuto (also "auto"): while rounds of its types wait in
	// Redis, after it opened or joined one, the Coalescer runs a forwarder
	// of its own.
	ForwardingAuto Forwarding = ""
	// ForwardingOff: only forwarders run with Forwarder.Run publish them.
	ForwardingOff Forwarding = "off"
)

// Forwarding defaults.
const (
	// DefaultForwardEvery is how often a forwarder looks for rounds that
	// came due: a job is published at most this long after its due time
	// (plus the publish), where a JetStream schedule fires up to ~300 ms
	// late under load.
	DefaultForwardEvery = 100 * time.Millisecond
	// DefaultForwardBatch bounds the rounds one claim takes.
	DefaultForwardBatch = 256
	// DefaultForwardLease is how long a claim hides its rounds from other
	// forwarders: a forwarder that dies is taken over after it.
	DefaultForwardLease = 10 * time.Second
	// forwardRetry is when a round whose publish failed is tried again.
	forwardRetry = time.Second
)

// The statuses of forward_take.lua (TestScriptStatuses checks them).
const (
	forwardGone   = 0
	forwardWait   = 1
	forwardPacked = 2
	forwardHash   = 3
)

// schedState is where the Coalescer's debounce rounds wait.
type schedState struct {
	// may: rounds may be held in Redis (single node or Sentinel; not
	// "jetstream"): due lists exist and are forwarded.
	may bool
	// always: "redis": rounds opened are held in Redis whatever the
	// store's durability.
	always bool
	// durable (auto): 0 not checked yet, 1 the Redis keeps its data (an
	// append-only file), 2 it does not; checked (unix ns) when.
	durable  atomic.Int32
	checked  atomic.Int64
	checking atomic.Bool
}

// durableCheckEvery: how often auto reads again whether Redis keeps its data.
const durableCheckEvery = 30 * time.Second

// newSchedState checks the Schedules setting against the client.
func newSchedState(s Schedules, rdb redis.UniversalClient) (*schedState, error) {
	_, single := rdb.(*redis.Client)
	switch s {
	case SchedulesAuto, "auto":
		return &schedState{may: single}, nil
	case SchedulesRedis:
		if !single {
			return nil, fmt.Errorf("%w: Config.Schedules %q needs a single-node or Sentinel client: on a Cluster (or Ring) a type's due list cannot share a slot with its rounds; use %q", ErrInvalidConfig, s, SchedulesJetStream)
		}
		return &schedState{may: true, always: true}, nil
	case SchedulesJetStream:
		return &schedState{}, nil
	}
	return nil, fmt.Errorf("%w: Config.Schedules %q: use %q, %q or %q", ErrInvalidConfig, s, "auto", SchedulesRedis, SchedulesJetStream)
}

// holdInRedis reports whether a round opened now waits in Redis: always
// with "redis"; with auto, on a single node or Sentinel whose Redis keeps
// its data (appendonly yes, or replication acks on): a round held in Redis
// lives only there until due, so a Redis that restarts empty would lose its
// job, where a JetStream schedule would still fire (with the first event's
// args). Measured (docs/performance.md, issue 25) an opening 4-6x faster
// than with a schedule; the chaos suite's short form and the long-form
// failover runs (16a, 16b) pass on it.
func (c *Coalescer) holdInRedis(ctx context.Context) bool {
	st := c.sched
	switch {
	case !st.may:
		return false
	case st.always:
		return true
	}
	if c.repl.active(ctx) {
		return true // every decision waits for a replica: a failover keeps it
	}
	switch st.durable.Load() {
	case 0:
		c.checkDurable(ctx)
	default:
		if time.Since(time.Unix(0, st.checked.Load())) > durableCheckEvery && st.checking.CompareAndSwap(false, true) {
			go func() {
				defer st.checking.Store(false)
				cctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				c.checkDurable(cctx)
			}()
		}
	}
	return st.durable.Load() == 1
}

// checkDurable reads whether Redis writes an append-only file (INFO
// persistence); a server that does not say (miniredis) counts as not.
func (c *Coalescer) checkDurable(ctx context.Context) {
	st := c.sched
	defer st.checked.Store(time.Now().UnixNano())
	raw, err := c.rdb.Info(ctx, "persistence").Result()
	if err != nil {
		if st.durable.Load() == 0 {
			st.durable.Store(2)
		}
		return
	}
	on, _ := infoField(raw, "aof_enabled")
	durable := int32(2)
	if on == "1" {
		durable = 1
	}
	if was := st.durable.Swap(durable); was != 0 && was != durable {
		c.log.Info("redis persistence changed: debounce rounds opened from now on wait in Redis only with an append-only file (schedules: auto)", "aof", on == "1")
	}
}

// deferredPolicy says whether a policy's rounds may wait in Redis:
// debounce rounds, when the Coalescer's Schedules allow it.
func deferredPolicy(p *compiled, may bool) bool {
	return may && p.Mode == ModeDebounce
}

// dueKey is the due list of a job type.
func dueKey(prefix, jobType string) string { return prefix + "due:" + jobType }

// idsKey is the hash of the identities of a job type's packed rounds held
// in Redis (open_packed.lua), by round key, until the forwarder's first
// take moves each to its round's identity key (forward_take.lua): a field
// costs Redis less than a key of its own with a TTL (measured, issue 25).
func idsKey(prefix, jobType string) string { return prefix + "dueids:" + jobType }

// Deferred reports whether rounds of jobType may wait in Redis until due
// (its due list is read and forwarded): a debounce type on a single-node
// or Sentinel Redis, unless Schedules is "jetstream". Whether a round
// opened now does is HoldsInRedis.
func (c *Coalescer) Deferred(jobType string) bool {
	p, ok := c.policies[jobType]
	return ok && p.deferred
}

// HoldsInRedis reports whether a round of jobType opened now waits in Redis
// until due (rather than as a JetStream schedule): with Schedules "redis".
func (c *Coalescer) HoldsInRedis(ctx context.Context, jobType string) bool {
	p, ok := c.policies[jobType]
	return ok && p.deferred && c.holdInRedis(ctx)
}

// Defers reports whether any of the Coalescer's types holds its rounds in
// Redis until due: then a forwarder must run somewhere (package worker and
// the daemon run one).
func (c *Coalescer) Defers() bool { return len(c.deferredTypes()) > 0 }

// DueCount is how many rounds of jobType wait in its due list: held in
// Redis, their job not yet published (0 for a type whose rounds are
// JetStream schedules).
func (c *Coalescer) DueCount(ctx context.Context, jobType string) (int64, error) {
	p, ok := c.policies[jobType]
	if !ok || !p.deferred {
		return 0, nil
	}
	n, err := c.rdb.ZCard(ctx, p.dueKey).Result()
	if err != nil {
		return 0, fmt.Errorf("%w: due list of %s: %w", ErrStoreUnavailable, jobType, err)
	}
	return n, nil
}

// batchPublisher is a Publisher that sends many jobs before it waits for
// their acks (the JetStream publisher is one).
type batchPublisher interface {
	PublishBatch(ctx context.Context, jobs []Job) []error
}

// Forwarder publishes the jobs of the rounds held in Redis (Schedules
// "redis") as they come due. Any number may run, in any processes: each
// claims its own rounds. Run it where jobs run (package worker and the
// daemon do); a Coalescer also runs one of its own while rounds it opened
// wait.
type Forwarder struct {
	c   *Coalescer
	pub Publisher
	// Every is the pause between passes that found nothing more to do
	// (DefaultForwardEvery).
	Every time.Duration
	// Batch bounds the rounds of one claim (DefaultForwardBatch).
	Batch int
	// Lease is how long a claim hides its rounds from other forwarders
	// (DefaultForwardLease).
	Lease time.Duration
}

// ForwardReport counts what forwarder passes did.
type ForwardReport struct {
	Claimed   int // rounds claimed (due by the list)
	Published int // jobs published
	Waiting   int // claimed early (extended since): listed again at their due time
	Gone      int // taken, cancelled or replaced before being forwarded: unlisted
	Failed    int // publish failed: listed again to be tried shortly
}

func (r *ForwardReport) add(o ForwardReport) {
	r.Claimed += o.Claimed
	r.Published += o.Published
	r.Waiting += o.Waiting
	r.Gone += o.Gone
	r.Failed += o.Failed
}

// NewForwarder returns a forwarder of the Coalescer's rounds held in Redis
// that publishes through pub (nil: the Coalescer's Publisher).
func (c *Coalescer) NewForwarder(pub Publisher) *Forwarder {
	if pub == nil {
		pub = c.pub
	}
	return &Forwarder{c: c, pub: pub, Every: DefaultForwardEvery, Batch: DefaultForwardBatch, Lease: DefaultForwardLease}
}

// deferredTypes are the policies whose rounds wait in Redis.
func (c *Coalescer) deferredTypes() []*compiled {
	var out []*compiled
	for _, p := range c.policies {
		if p.deferred {
			out = append(out, p)
		}
	}
	return out
}

// Run forwards until ctx ends: a pass every Every, at once again while
// passes find full batches. Errors (Redis or NATS down) are logged and
// retried.
func (f *Forwarder) Run(ctx context.Context) error {
	if f.pub == nil {
		return fmt.Errorf("%w: a forwarder needs a Publisher", ErrPublish)
	}
	f.c.fwd.persistent.Add(1)
	defer f.c.fwd.persistent.Add(-1)
	failures := 0
	for {
		rep, err := f.Pass(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := f.every()
		switch {
		case err != nil:
			failures++
			wait = min(f.every()<<min(failures, 6), 5*time.Second)
			if failures == 1 || failures%50 == 0 {
				f.c.log.WarnContext(ctx, "forwarder: pass failed; retried", "err", err, "failures", failures)
			}
		case rep.Claimed >= f.batch():
			failures, wait = 0, 0
		default:
			failures = 0
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
	}
}

func (f *Forwarder) every() time.Duration {
	if f.Every <= 0 {
		return DefaultForwardEvery
	}
	return f.Every
}

func (f *Forwarder) batch() int {
	if f.Batch <= 0 {
		return DefaultForwardBatch
	}
	return f.Batch
}

func (f *Forwarder) lease() time.Duration {
	if f.Lease <= 0 {
		return DefaultForwardLease
	}
	return f.Lease
}

// Pass forwards the rounds due now, of every type, one claim after another
// while claims come back full.
func (f *Forwarder) Pass(ctx context.Context) (ForwardReport, error) {
	var rep ForwardReport
	if f.pub == nil {
		return rep, fmt.Errorf("%w: a forwarder needs a Publisher", ErrPublish)
	}
	var errs []error
	for _, p := range f.c.deferredTypes() {
		for range 64 { // bounded: the next pass goes on
			r, err := f.claim(ctx, p)
			rep.add(r)
			if err != nil {
				errs = append(errs, err)
				break
			}
			if r.Claimed < f.batch() {
				break
			}
		}
	}
	return rep, errors.Join(errs...)
}

// claim forwards one claim's worth of p's due rounds.
func (f *Forwarder) claim(ctx context.Context, p *compiled) (ForwardReport, error) {
	var rep ForwardReport
	c := f.c
	now := c.now()
	nowMs := now.UnixMilli()
	// The claim's score: its end, with a fraction of its own, so that its
	// settling tells its rounds from another claim's.
	claimAt := strconv.FormatInt(now.Add(f.lease()).UnixMilli(), 10) + "." + strconv.FormatUint(1+rand.Uint64N(999_998), 10)
	// A claim or a settling lost in a failover only makes its rounds
	// listed again: they need no replica acks. The versions taken for a
	// forward do (below).
	members, err := forwardClaimScript.Run(ctx, c.rdb, []string{p.dueKey}, nowMs, f.batch(), claimAt).StringSlice()
	if err != nil {
		return rep, fmt.Errorf("%w: forwarder: claim %s: %w", ErrStoreUnavailable, p.Type, err)
	}
	if len(members) == 0 {
		return rep, nil
	}
	rep.Claimed = len(members)
	keys := make([]string, 0, 2*len(members)+1)
	for _, m := range members {
		keys = append(keys, m, identityKey(m))
	}
	keys = append(keys, p.idsKey)
	// With replication acks the versions taken must reach a replica before
	// they are published: a failover that lost them would forward the
	// round again under a version whose message already ran.
	cmd, doubt := c.runDoubt(ctx, forwardTakeScript, keys, nowMs, c.slack.Milliseconds())
	res, err := cmd.Slice()
	if err != nil {
		return rep, fmt.Errorf("%w: forwarder: read %s rounds: %w", ErrStoreUnavailable, p.Type, err)
	}
	if len(res) != len(members) {
		return rep, fmt.Errorf("forwarder: %d replies for %d rounds", len(res), len(members))
	}
	settle := make([]any, 0, 1+2*len(members))
	settle = append(settle, claimAt)
	forward := claimAt[strings.IndexByte(claimAt, '.')+1:] // this claim's own part
	retryAt := now.Add(forwardRetry).UnixMilli()
	jobs := make([]Job, 0, len(members))
	which := make([]string, 0, len(members)) // the member of each job
	for i, raw := range res {
		job, waitUntil, ok := f.decode(p, members[i], raw, now)
		switch {
		case ok && doubt != nil:
			// Not confirmed by the replicas: tried again shortly.
			rep.Failed++
			settle = append(settle, members[i], retryAt)
		case ok:
			job.Forward = forward
			jobs = append(jobs, job)
			which = append(which, members[i])
		case waitUntil > 0:
			rep.Waiting++
			settle = append(settle, members[i], waitUntil)
		default:
			rep.Gone++
			settle = append(settle, members[i], "")
		}
	}
	if len(jobs) > 0 {
		pctx, cancel := context.WithTimeout(ctx, f.lease()*4/5)
		errs := f.publish(pctx, jobs)
		cancel()
		var first error
		for i, err := range errs {
			if err == nil {
				rep.Published++
				settle = append(settle, which[i], "")
				continue
			}
			rep.Failed++
			if first == nil {
				first = err
			}
			settle = append(settle, which[i], retryAt)
		}
		if first != nil {
			c.log.WarnContext(ctx, "forwarder: publishing due jobs failed; tried again shortly (with a new version: a message that was stored after all is superseded)",
				"job_type", p.Type, "failed", rep.Failed, "err", first)
		}
	}
	if err := forwardDoneScript.Run(context.WithoutCancel(ctx), c.rdb, []string{p.dueKey}, settle...).Err(); err != nil {
		// The claim ends by itself: its rounds are claimed again after the
		// lease and published again with a new version (a duplicate is
		// superseded at its start).
		return rep, fmt.Errorf("%w: forwarder: settle %s: %w", ErrStoreUnavailable, p.Type, err)
	}
	return rep, nil
}

// publish sends the jobs, in one batch when the Publisher can.
func (f *Forwarder) publish(ctx context.Context, jobs []Job) []error {
	for i := range jobs {
		f.c.stamp(ctx, &jobs[i])
	}
	if bp, ok := f.pub.(batchPublisher); ok {
		return bp.PublishBatch(ctx, jobs)
	}
	errs := make([]error, len(jobs))
	for i, j := range jobs {
		errs[i] = f.pub.Publish(ctx, j)
	}
	return errs
}

// decode reads forward_take.lua's answer for one round: the job to publish
// (ok), or the time to list it again at (not due), or neither (gone).
func (f *Forwarder) decode(p *compiled, member string, raw any, now time.Time) (job Job, waitUntil int64, ok bool) {
	c := f.c
	r, _ := raw.([]any)
	if len(r) == 0 {
		return Job{}, 0, false
	}
	status, _ := r[0].(int64)
	switch {
	case status == forwardWait && len(r) == 2:
		s, _ := r[1].(string)
		due, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return Job{}, 0, false
		}
		return Job{}, due, false
	case status == forwardPacked && len(r) == 5:
		value, _ := r[1].(string)
		exp, _ := r[2].(int64)
		id, _ := r[3].(string)
		version, _ := r[4].(int64)
		v, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			return Job{}, 0, false
		}
		_, job, err := parseIdentity(id)
		if err != nil || job.Token != packedToken(exp, packed(v).rnd()) || job.Type != p.Type {
			return Job{}, 0, false // another round's identity: this one was published at its opening
		}
		if due := job.DueAt.UnixMilli(); due > now.Add(c.slack).UnixMilli() {
			// Claimed before its due time (never by its own listing, which
			// opened at it): listed again at it.
			return Job{}, due, false
		}
		job.Version = int(version)
		return job, 0, true
	case status == forwardHash && len(r) == 10:
		str := func(i int) string { s, _ := r[i].(string); return s }
		job, ok := c.hashIdentity(str(5), str(6), str(7), "")
		if !ok || job.Type != p.Type {
			return Job{}, 0, false
		}
		tok, err := strconv.ParseUint(str(1), 10, 64)
		if err != nil {
			return Job{}, 0, false
		}
		first, _ := strconv.ParseInt(str(2), 10, 64)
		due, _ := strconv.ParseInt(str(3), 10, 64)
		version, _ := r[4].(int64)
		job.Token, job.OpenedAt, job.DueAt, job.Version = Token(tok), msTime(first), msTime(due), int(version)
		job.TraceParent = str(8)
		if ms, err := strconv.ParseInt(str(9), 10, 64); err == nil && ms > 0 {
			job.Lease = time.Duration(ms) * time.Millisecond
		}
		return job, 0, true
	}
	return Job{}, 0, false
}

// forwardState is a Coalescer's own forwarding: a loop it runs while rounds
// it opened wait in Redis, unless a Run of its forwarders goes on anyway.
type forwardState struct {
	off        bool         // Config.Forwarding off: no loop of its own
	running    atomic.Bool  // the Coalescer's own loop runs
	persistent atomic.Int32 // Forwarder.Run calls under way
}

// forwardIdle: the Coalescer's own loop stops once every due list of its
// types was empty this long (or Redis failed this many passes in a row).
const (
	forwardIdle     = 2 * time.Second
	forwardGiveUpAt = 20
)

// ensureForwarding starts the Coalescer's own forwarding loop, after an
// opening held a round in Redis: a process whose producers open rounds
// publishes them when due even if no worker or daemon forwards. One atomic
// load when it runs.
func (c *Coalescer) ensureForwarding() {
	if c.pub == nil || c.fwd.off || c.fwd.running.Load() || c.fwd.persistent.Load() > 0 {
		return
	}
	if !c.fwd.running.CompareAndSwap(false, true) {
		return
	}
	go c.forwardLoop()
}

// forwardLoop is the Coalescer's own forwarder: it runs while its types'
// due lists hold rounds.
func (c *Coalescer) forwardLoop() {
	f := c.NewForwarder(nil)
	ctx := context.Background()
	idleSince := time.Time{}
	failures := 0
	for {
		rep, err := f.Pass(ctx)
		wait := f.every()
		switch {
		case err != nil:
			failures++
			wait = min(f.every()<<min(failures, 6), 5*time.Second)
		case rep.Claimed >= f.batch():
			failures, wait = 0, 0
		default:
			failures = 0
		}
		stop := failures >= forwardGiveUpAt
		if err == nil && rep.Claimed == 0 {
			if c.fwd.persistent.Load() > 0 {
				stop = true // a Run forwards these types
			} else if empty, cerr := c.dueListsEmpty(ctx); cerr == nil && empty {
				if idleSince.IsZero() {
					idleSince = time.Now()
				}
				stop = time.Since(idleSince) >= forwardIdle
			} else {
				idleSince = time.Time{}
			}
		}
		if stop {
			c.fwd.running.Store(false)
			if failures >= forwardGiveUpAt || c.fwd.persistent.Load() > 0 {
				return // the next opening starts it again
			}
			// An opening may have listed a round just before it stopped,
			// and found it still running: go on then.
			if empty, cerr := c.dueListsEmpty(ctx); cerr != nil || empty || !c.fwd.running.CompareAndSwap(false, true) {
				return
			}
			idleSince = time.Time{}
		}
		if wait > 0 {
			time.Sleep(wait)
		}
	}
}

// dueListsEmpty reports whether none of the Coalescer's due lists holds a
// round.
func (c *Coalescer) dueListsEmpty(ctx context.Context) (bool, error) {
	ps := c.deferredTypes()
	if len(ps) == 0 {
		return true, nil
	}
	pipe := c.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(ps))
	for i, p := range ps {
		cmds[i] = pipe.ZCard(ctx, p.dueKey)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return false, err
	}
	for _, cmd := range cmds {
		if cmd.Val() > 0 {
			return false, nil
		}
	}
	return true, nil
}

// DueRound is a round held in Redis until due, as its type's due list and
// its identity show it: what its job will carry (Version aside).
type DueRound struct {
	Job Job
	// ListedAt is its time in the due list: its due time, or, while a
	// forwarder has it claimed, the claim's end.
	ListedAt time.Time
}

// DueRounds lists up to limit of jobType's rounds held in Redis, in the
// order of its due list (due time), from the offset-th: a dashboard's page.
// A round forwarded (or taken) meanwhile is left out.
func (c *Coalescer) DueRounds(ctx context.Context, jobType string, offset, limit int) ([]DueRound, error) {
	p, ok := c.policies[jobType]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrNoPolicy, jobType)
	}
	if !p.deferred || limit <= 0 {
		return nil, nil
	}
	zs, err := c.rdb.ZRangeWithScores(ctx, p.dueKey, int64(offset), int64(offset+limit-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: due list of %s: %w", ErrStoreUnavailable, jobType, err)
	}
	type read struct {
		exp   *redis.DurationCmd
		id    *redis.StringCmd
		plain *redis.StringCmd // a packed round's identity until its first forward (idsKey)
		hash  *redis.SliceCmd
	}
	reads := make([]read, len(zs))
	pipe := c.rdb.Pipeline()
	for i, z := range zs {
		m, _ := z.Member.(string)
		reads[i] = read{exp: pipe.PExpireTime(ctx, m), id: pipe.HGet(ctx, identityKey(m), "j"),
			plain: pipe.HGet(ctx, p.idsKey, m), hash: pipe.HMGet(ctx, m, "t", "f", "d", "k", "g", "o", "tp", "x", "q")}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !isWrongType(err) {
		return nil, fmt.Errorf("%w: due rounds of %s: %w", ErrStoreUnavailable, jobType, err)
	}
	out := make([]DueRound, 0, len(zs))
	for i, z := range zs {
		r := reads[i]
		listed := msTime(int64(z.Score))
		if f, err := r.hash.Result(); err == nil && len(f) == 9 && f[8] == "1" {
			str := func(j int) string { s, _ := f[j].(string); return s }
			job, ok := c.hashIdentity(str(3), str(4), str(5), "")
			tok, err := strconv.ParseUint(str(0), 10, 64)
			if !ok || err != nil {
				continue
			}
			first, _ := strconv.ParseInt(str(1), 10, 64)
			due, _ := strconv.ParseInt(str(2), 10, 64)
			job.Token, job.OpenedAt, job.DueAt, job.TraceParent = Token(tok), msTime(first), msTime(due), str(6)
			if ms, err := strconv.ParseInt(str(7), 10, 64); err == nil && ms > 0 {
				job.Lease = time.Duration(ms) * time.Millisecond
			}
			out = append(out, DueRound{Job: job, ListedAt: listed})
			continue
		}
		raw, err := r.plain.Result()
		if err != nil {
			if raw, err = r.id.Result(); err != nil {
				continue
			}
		}
		_, job, err := parseIdentity(raw)
		if err != nil || job.Type != jobType || r.exp.Val() <= 0 {
			continue
		}
		if exp, _ := job.Token.packedParts(); exp != r.exp.Val().Milliseconds() {
			continue // the identity of another round of the key
		}
		out = append(out, DueRound{Job: job, ListedAt: listed})
	}
	return out, nil
}
