package debounce

import (
	"cmp"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/fingerprint"
)

// Config configures a Coalescer. Redis is required; Publisher is required
// for Submit (a worker that only releases rounds may leave it nil).
type Config struct {
	// Redis holds the reservations: a single node, Cluster or Sentinel
	// client. Redis 7.0 or later (PEXPIRETIME). Give it MaxRetries: -1 (New
	// refuses a client that resends, unless AllowResends): the scripts that
	// open rounds are not idempotent, and one resent by the client after its
	// lost reply could reopen, under the same token, a round that has since
	// run and closed; that round would never run. A lost reply is better
	// reported (the caller retries the event).
	Redis redis.UniversalClient
	// AllowResends accepts a Redis client that resends commands whose reply
	// was lost (go-redis MaxRetries > 0), with a warning. Leave it false.
	AllowResends bool
	Publisher    Publisher
	Policies     []Policy
	// Prefix of reservation keys; default DefaultPrefix. A longer prefix
	// costs 16 more bytes per round once the key passes 14 bytes.
	Prefix string
	// DueSlack: a round due within this much counts as due at release
	// (default DefaultDueSlack). Schedules fire on the NATS server's clock
	// and rounds are timed on the producers'; keep the clocks in sync.
	DueSlack time.Duration
	Now      func() time.Time // default time.Now
	Logger   *slog.Logger     // default: discard
	Hooks    Hooks
	// Pipelines bounds the Redis pipelines in flight: concurrent Submit
	// calls share them (default DefaultPipelines). A lone call is sent at
	// once; under load, calls that arrive while pipelines are busy ride the
	// next ones. Negative: no batching, one round trip per call.
	Pipelines int
	// MaxAge is how long a job may wait in the stream for a worker: a round
	// lives this long past its latest due time, so its data is there
	// whenever its job starts. It must equal the stream's MaxAge; by default
	// it is taken from the Publisher when it reports one (the JetStream
	// publisher does), else DefaultMaxAge.
	MaxAge time.Duration

	// LocalJoins: LocalJoinsOff sends every event to Redis. By default
	// (LocalJoinsAuto) an event of a round this Coalescer knows pending is
	// answered without a Redis call where that cannot lose an event, and
	// added to the round by a flush within FlushInterval (local.go; a
	// policy can turn it off for its type with Policy.LocalJoins).
	LocalJoins LocalJoins
	// FlushInterval: how long locally joined events wait, at most, to be
	// added to their rounds in Redis (default DefaultFlushInterval).
	FlushInterval time.Duration
	// ClockSkew bounds the difference between the clocks of producers,
	// workers, Redis and NATS servers (default DefaultClockSkew): local
	// answers stop DueSlack + ClockSkew + FlushInterval + 50 ms before a
	// round can be taken or expires.
	ClockSkew time.Duration
	// MaxLocalRounds bounds the rounds remembered for local joins (default
	// DefaultMaxLocalRounds).
	MaxLocalRounds int

	// Replication makes a decision wait until replicas confirm it (Redis
	// WAIT), so that a failover cannot lose it: by default whenever the
	// primary has a replica (replication.go).
	Replication Replication
	// IdempotencyWindow is how long the decision of an event with an
	// IdempotencyKey is kept for its retries (DefaultIdempotencyWindow;
	// 1s to 7 days).
	IdempotencyWindow time.Duration

	// Schedules says where debounce rounds wait for their due time
	// (deferred.go): SchedulesAuto (the default) holds them in Redis on a
	// single-node or Sentinel client whose Redis keeps its data (an
	// append-only file, or replication acks), where a forwarder publishes
	// each job when due and an opening costs one Redis round trip (4-6x
	// faster, measured); else (and always on Cluster or Ring) each round
	// gets a JetStream schedule at its opening, the due lists still read.
	// SchedulesRedis holds them in Redis whatever the persistence;
	// SchedulesJetStream never.
	Schedules Schedules
	// Forwarding: ForwardingAuto (the default) lets the Coalescer publish,
	// once due, the rounds held in Redis while any of its types' wait (a
	// forwarder of its own, deferred.go); ForwardingOff leaves them to
	// forwarders run elsewhere (Forwarder.Run: package worker and the
	// daemon run one).
	Forwarding Forwarding
}

// maxAger is a Publisher that knows how long its stream keeps a job.
type maxAger interface{ MaxAge() time.Duration }

// sizer is a Publisher with a largest message: an event whose job would
// exceed it is refused before anything is reserved.
type sizer interface {
	// MaxPayload is the largest message in bytes, headers included.
	MaxPayload() int64
	// JobFits returns nil, or an error wrapping ErrJobTooLarge.
	JobFits(job Job) error
}

// sizeCheckMargin: events whose args and trace context come within this of
// the Publisher's MaxPayload have their job measured (headers never take
// this much); smaller ones cost nothing.
const sizeCheckMargin = 8 << 10

// DefaultDueSlack is how early a round may be released at start.
const DefaultDueSlack = 100 * time.Millisecond

// Hooks are called on the events worth counting; nil funcs are skipped. They
// run on the caller's goroutine and must be fast (increment a counter).
type Hooks struct {
	// Decision is called for each event decided (err nil) or failed.
	Decision func(jobType string, d Decision, err error, took time.Duration)
	// StoreError is called when Redis fails during Submit; fail says
	// whether the event was then bypassed (open) or refused (closed).
	StoreError func(jobType string, fail FailMode, err error)
	// PublishError is called when a publish fails.
	PublishError func(jobType string, err error)
	// Release is called for each release attempt at job start or finish.
	Release func(jobType string, result ReleaseResult, summary Summary)
	// LayoutMismatch is called for each event that met a pending round of
	// the other layout (the policy's payload changed with rounds pending):
	// it joined that round.
	LayoutMismatch func(jobType string)
	// Replication is called for each decision (and take) the replicas did
	// not confirm in time (an error matching ErrNotReplicated); fail says
	// whether it then stood (open) or was refused (closed).
	Replication func(jobType string, fail FailMode, err error)
	// Event is called, after Decision, with each event submitted, the time
	// it arrived (by Now) and its decision or error: what an event log
	// records (coalesce serve --record, for coalesce simulate).
	Event func(ev Event, at time.Time, d Decision, err error)
}

// Coalescer decides, per event, whether it opens a round or joins the one
// pending, and publishes the rounds it opens. Safe for concurrent use.
type Coalescer struct {
	rdb      redis.UniversalClient
	pub      Publisher
	policies map[string]*compiled
	prefix   string
	slack    time.Duration
	now      func() time.Time
	log      *slog.Logger
	hooks    Hooks
	batch    *batcher // nil: unbatched
	maxAge   time.Duration
	// streamAge is the Publisher's stream MaxAge, 0 when it cannot tell.
	streamAge time.Duration
	sizer     sizer      // the Publisher, if it has a largest message
	overdue   overdueSet // packed rounds whose identity this process wrote
	// mismatched: job types whose events met a round of the other layout
	// (logged once each).
	mismatched sync.Map
	store      storeState  // the Redis's identity, once read (store.go)
	local      *localState // nil: local joins off (local.go)
	repl       *replState  // nil: replication acks off (replication.go)
	// doubtLogged: unix ns of the last replication doubt logged.
	doubtLogged atomic.Int64
	idemWindow  time.Duration
	// sched: where debounce rounds wait (deferred.go).
	sched *schedState
	fwd   forwardState
}

// compiled is a validated policy with what Submit needs precomputed.
type compiled struct {
	Policy
	scheme     *fingerprint.Scheme
	itemScheme *fingerprint.Scheme // accumulate with ItemField
	itemPrefix int                 // bytes of `{"field":` in the item's canonical form
	hash       bool                // hash layout (extend, last, accumulate)
	layout     layout              // the one of hash, chosen once
	mix        typeMix             // the type's part of every Redis key
	life       time.Duration       // see lifetime
	// Script arguments of every decision, boxed once (a boxed number is an
	// allocation): life, Window, the extend window, MaxWait, Payload,
	// MaxItems, an exclusive Lease (0: none) and trailingLife, in ms.
	lifeArg, windowArg, extendArg, maxWaitArg, payloadArg, maxItemsArg, leaseArg, trailingArg any
	// Throttle with trailing: the trailing round lives until the window end
	// plus this (the stream's MaxAge).
	trailingLife time.Duration
	local        bool // events may be answered locally (local.go)
	// gate: whether its events are worth trying locally (localgate.go);
	// nil when they always are (local_joins: on) or never (not local).
	gate *localGate
	// deferred: rounds may wait in Redis, listed in dueKey, until a
	// forwarder publishes their jobs (deferred.go; whether one opened now
	// does is Coalescer.holdInRedis).
	deferred bool
	dueKey   string
	idsKey   string // identities of held packed rounds until forwarded (deferred.go)
	// guess: whether its Redis-bound events mostly open rounds
	// (joinfirst.go).
	guess *openGuess
}

// lifetime is how long a round lives from its base (its first event; for a
// trailing round, its window's start): its Redis TTL, which its jobs carry
// (Job.TTL) to read the round's last-seen time back. A round released at
// start lives MaxAge past its latest due time; a dedup round released at
// expiry lives its TTL.
func (p *compiled) lifetime() time.Duration { return p.life }

// New validates the policies and returns a Coalescer.
func New(cfg Config) (*Coalescer, error) {
	if cfg.Redis == nil {
		return nil, fmt.Errorf("%w: Config.Redis is required", ErrInvalidConfig)
	}
	c := &Coalescer{
		rdb:      cfg.Redis,
		pub:      cfg.Publisher,
		policies: make(map[string]*compiled, len(cfg.Policies)),
		prefix:   cfg.Prefix,
		slack:    cfg.DueSlack,
		now:      cfg.Now,
		log:      cfg.Logger,
		hooks:    cfg.Hooks,
	}
	if c.prefix == "" {
		c.prefix = DefaultPrefix
	}
	if err := validatePrefix(c.prefix); err != nil {
		return nil, err
	}
	if c.slack == 0 {
		c.slack = DefaultDueSlack
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if err := c.setMaxAge(cfg.MaxAge); err != nil {
		return nil, err
	}
	c.sizer, _ = c.pub.(sizer)
	if err := c.setLocal(cfg); err != nil {
		return nil, err
	}
	var err error
	if c.repl, err = newReplState(cfg.Replication, c.rdb, c.log); err != nil {
		return nil, err
	}
	if err := c.setIdempotency(cfg); err != nil {
		return nil, err
	}
	if c.sched, err = newSchedState(cfg.Schedules, c.rdb); err != nil {
		return nil, err
	}
	switch cfg.Forwarding {
	case ForwardingAuto, "auto":
	case ForwardingOff:
		c.fwd.off = true
	default:
		return nil, fmt.Errorf("%w: Config.Forwarding %q: use \"auto\" or \"off\"", ErrInvalidConfig, cfg.Forwarding)
	}

	if clientRetries(c.rdb) {
		if !cfg.AllowResends {
			return nil, fmt.Errorf("%w: Config.Redis resends commands whose reply was lost (go-redis MaxRetries defaults to 3): set MaxRetries: -1 in its options, or a resent opening can reopen a round that already ran; Config.AllowResends accepts it anyway", ErrInvalidConfig)
		}
		c.log.Warn("the Redis client resends commands whose reply was lost (MaxRetries), allowed by Config.AllowResends: a resent opening can reopen a round that already ran")
	}
	switch {
	case cfg.Pipelines == 0:
		c.batch = newBatcher(c, DefaultPipelines)
	case cfg.Pipelines > 0:
		c.batch = newBatcher(c, cfg.Pipelines)
	}
	for _, p := range cfg.Policies {
		cp, err := compile(p, c.maxAge)
		if err != nil {
			return nil, err
		}
		if err := c.checkDelay(cp); err != nil {
			return nil, err
		}
		if _, dup := c.policies[cp.Type]; dup {
			return nil, &PolicyError{Type: cp.Type, Field: "type", Msg: "two policies for this job type; keep one"}
		}
		cp.local = c.local != nil && cp.localEligible()
		if cp.local && cp.LocalJoins != LocalJoinsOn {
			cp.gate = &localGate{skipped: &c.local.skipped}
		}
		if cp.lastKeyed() {
			if _, single := c.rdb.(*redis.Client); !single {
				return nil, &PolicyError{Type: cp.Type, Field: "local_joins", Msg: "on needs a single-node or Sentinel Redis (its payload keys are not declared to the scripts that touch them); use auto on a Cluster"}
			}
			if cp.local {
				cp.payloadArg = "last+" // its rounds get a payload key (lastkey.go)
			}
		}
		cp.deferred = deferredPolicy(cp, c.sched.may)
		cp.dueKey = dueKey(c.prefix, cp.Type)
		cp.idsKey = idsKey(c.prefix, cp.Type)
		cp.guess = &openGuess{}
		c.policies[cp.Type] = cp
	}
	return c, nil
}

// setLocal checks the local-join settings and prepares their state.
func (c *Coalescer) setLocal(cfg Config) error {
	switch cfg.LocalJoins {
	case LocalJoinsAuto, "auto":
	case LocalJoinsOff:
		return nil
	default:
		return fmt.Errorf("%w: Config.LocalJoins %q: use \"auto\" or \"off\"", ErrInvalidConfig, cfg.LocalJoins)
	}
	if cfg.FlushInterval < 0 || cfg.FlushInterval > time.Second {
		return fmt.Errorf("%w: Config.FlushInterval %v: must be 0 (the default, %v) up to 1s", ErrInvalidConfig, cfg.FlushInterval, DefaultFlushInterval)
	}
	if cfg.ClockSkew < 0 || cfg.ClockSkew > time.Minute {
		return fmt.Errorf("%w: Config.ClockSkew %v: must be 0 (the default, %v) up to 1m", ErrInvalidConfig, cfg.ClockSkew, DefaultClockSkew)
	}
	if cfg.MaxLocalRounds < 0 {
		return fmt.Errorf("%w: Config.MaxLocalRounds %d: must not be negative", ErrInvalidConfig, cfg.MaxLocalRounds)
	}
	every := cmp.Or(cfg.FlushInterval, DefaultFlushInterval)
	skew := cmp.Or(cfg.ClockSkew, DefaultClockSkew)
	c.local = newLocalState(every, c.slack+skew+every+flushMargin, cmp.Or(cfg.MaxLocalRounds, DefaultMaxLocalRounds))
	return nil
}

// setMaxAge takes MaxAge from the config or the Publisher, which must agree.
func (c *Coalescer) setMaxAge(want time.Duration) error {
	var stream time.Duration
	if ma, ok := c.pub.(maxAger); ok {
		stream = ma.MaxAge()
	}
	switch {
	case want < 0 || want > MaxMaxAge:
		return fmt.Errorf("%w: Config.MaxAge %v must be between 0 (the default) and %v", ErrInvalidConfig, want, MaxMaxAge)
	case want != 0 && stream != 0 && want != stream:
		return fmt.Errorf("%w: Config.MaxAge %v differs from the stream's MaxAge %v: rounds must live exactly as long as their jobs wait in the stream; leave MaxAge unset to take the stream's", ErrInvalidConfig, want, stream)
	case stream > MaxMaxAge:
		return fmt.Errorf("%w: the stream keeps jobs %v, longer than the %v a round may wait", ErrInvalidConfig, stream, MaxMaxAge)
	}
	c.maxAge = cmp.Or(want, stream, DefaultMaxAge)
	c.streamAge = stream
	return nil
}

// checkDelay refuses a policy whose schedules wait longer than the stream
// keeps a message: the schedule would expire before it fires, and its round
// would never run.
func (c *Coalescer) checkDelay(p *compiled) error {
	if c.streamAge == 0 {
		return nil // a Publisher with no stream limit it can tell
	}
	delay, field := p.latestDue(), "window"
	switch {
	case p.Mode == ModeDedup:
		return nil // published at once
	case p.Extend:
		field = "max_wait"
	case p.Mode == ModeThrottle && !p.Trailing:
		return nil
	}
	if delay < c.streamAge {
		return nil
	}
	return &PolicyError{Type: p.Type, Field: field, Msg: fmt.Sprintf(
		"its job is scheduled up to %v ahead, but the stream keeps a message %v: the schedule would expire before it fires; raise the stream's MaxAge (nats.max_age) or shorten %s", delay, c.streamAge, field)}
}

// MaxAge is how long a round lives past its latest due time (Config.MaxAge).
func (c *Coalescer) MaxAge() time.Duration { return c.maxAge }

// clientRetries reports whether a go-redis client resends failed commands.
func clientRetries(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().MaxRetries > 0
	case *redis.ClusterClient:
		return c.Options().MaxRetries > 0
	}
	return false
}

func compile(p Policy, maxAge time.Duration) (*compiled, error) {
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	cp := &compiled{Policy: p}
	var err error
	if cp.scheme, err = fingerprint.NewScheme(p.Type, p.KeyFields...); err != nil {
		return nil, &PolicyError{Type: p.Type, Field: "type", Msg: err.Error()}
	}
	if p.ItemField != "" {
		cp.itemScheme, _ = fingerprint.NewScheme(p.Type, p.ItemField)
		head, err := fingerprint.Canonicalize([]byte(`{` + strconv.Quote(p.ItemField) + `:0}`))
		if err != nil {
			return nil, &PolicyError{Type: p.Type, Field: "item_field", Msg: err.Error()}
		}
		cp.itemPrefix = len(head) - len("0}")
	}
	cp.hash = p.Extend || p.Payload != PayloadFirst
	cp.layout = layoutOf(cp.hash)
	cp.mix = mixFor(p.Type)
	switch {
	case p.Mode == ModeThrottle:
		if p.Trailing {
			cp.trailingLife = maxAge
		}
		cp.life = p.Window + cp.trailingLife
	case p.Mode == ModeDedup && p.Until == UntilExpiry:
		cp.life = p.TTL
	default:
		cp.life = p.latestDue() + maxAge
	}
	cp.lifeArg, cp.windowArg, cp.maxWaitArg = cp.life.Milliseconds(), p.Window.Milliseconds(), p.MaxWait.Milliseconds()
	cp.extendArg, cp.leaseArg = int64(0), int64(0)
	if p.Extend {
		cp.extendArg = p.Window.Milliseconds()
	}
	if p.Exclusive {
		cp.leaseArg = p.Lease.Milliseconds()
	}
	cp.payloadArg, cp.maxItemsArg, cp.trailingArg = string(p.Payload), p.MaxItems, cp.trailingLife.Milliseconds()

	return cp, nil
}

// Now is the Coalescer's clock (Config.Now): the one its scripts time
// rounds with.
func (c *Coalescer) Now() time.Time { return c.now() }

// Policy returns the policy (with defaults) for a job type.
func (c *Coalescer) Policy(jobType string) (Policy, bool) {
	p, ok := c.policies[jobType]
	if !ok {
		return Policy{}, false
	}
	return p.Policy, true
}

// Policies returns every policy, with defaults filled in.
func (c *Coalescer) Policies() []Policy {
	out := make([]Policy, 0, len(c.policies))
	for _, p := range c.policies {
		out = append(out, p.Policy)
	}
	return out
}
