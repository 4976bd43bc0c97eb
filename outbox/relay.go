package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/coalesce-io/coalesce/debounce"
)

// Relay defaults.
const (
	DefaultBatchSize     = 500
	DefaultConcurrency   = 64
	DefaultPollEvery     = time.Second
	DefaultRetryMin      = 250 * time.Millisecond
	DefaultRetryMax      = 10 * time.Second
	DefaultBacklogEvery  = 5 * time.Second
	DefaultPassTimeout   = 30 * time.Second
	DefaultSubmitTimeout = 5 * time.Second
)

// heldBackDelay is how soon a pass that held rows back (another relay has
// an earlier row of their key) is followed by the next one.
const heldBackDelay = 20 * time.Millisecond

// Submitter decides events: a *debounce.Coalescer. One that also has
// Flush(ctx) error (a Coalescer does) is flushed before a pass deletes its
// decided rows, so that no row goes before its decision is in Redis.
type Submitter interface {
	Submit(ctx context.Context, ev debounce.Event) (debounce.Decision, error)
	// RoundKeyOf is the round key Submit would use: the relay keeps the
	// rows of one key in order and decides other keys at once.
	RoundKeyOf(ev debounce.Event) (debounce.RoundKey, error)
	// Policies are checked at New: each must fail closed.
	Policies() []debounce.Policy
}

// Config configures a Relay.
type Config struct {
	// Pool is the database holding the outbox (required). The relay also
	// opens one connection of its own, from the pool's settings, to LISTEN.
	Pool *pgxpool.Pool
	// Coalescer decides the rows (required). Its policies must fail closed
	// (build it with FailClosed(policies)): under fail open a Redis outage
	// would publish rows without a reservation instead of keeping them.
	Coalescer Submitter
	// BatchSize is how many rows one pass claims (DefaultBatchSize).
	BatchSize int
	// Concurrency bounds the round keys decided at once within a pass
	// (DefaultConcurrency); the rows of one key are decided one by one.
	Concurrency int
	// PollEvery: a pass runs at least this often without a notification
	// (DefaultPollEvery).
	PollEvery time.Duration
	// RetryMin and RetryMax bound the backoff after a pass that met an
	// outage (DefaultRetryMin, doubling up to DefaultRetryMax).
	RetryMin, RetryMax time.Duration
	// BacklogEvery is how often Hooks.Backlog is called (DefaultBacklogEvery).
	BacklogEvery time.Duration
	// PassTimeout bounds one pass's decisions; a stop lets the pass under
	// way finish within it (DefaultPassTimeout).
	PassTimeout time.Duration
	// SubmitTimeout bounds one Submit (DefaultSubmitTimeout): with NATS
	// unreachable a publish waits for its ack, and the row should wait in
	// the outbox instead. One that lands after all is found by the retry,
	// which joins the round it opened.
	SubmitTimeout time.Duration
	// Durable, when set, is called after a pass's decisions and before
	// their rows are deleted; it returns once the store holds every
	// decision made so far durably (the embedded store fsyncs its journal).
	// An error keeps the rows, to be relayed again.
	Durable func(ctx context.Context) error
	Logger  *slog.Logger // default: discard
	Hooks   Hooks
}

// Hooks are called as rows are relayed; nil funcs are skipped. They must be
// fast (increment a counter).
type Hooks struct {
	// Relayed: a row was decided and removed; lag is from its insert (the
	// database's clock) to its decision.
	Relayed func(row Row, d debounce.Decision, lag time.Duration)
	// Dead: a row that can never be decided was moved to coalesce_outbox_dead.
	Dead func(row Row, err error)
	// Retry: a row met an outage and stays for a later pass.
	Retry func(row Row, err error)
	// Backlog: rows in the outbox and the age of the oldest.
	Backlog func(rows int64, oldest time.Duration)
}

// Row is one outbox row.
type Row struct {
	ID        int64
	Event     debounce.Event
	CreatedAt time.Time
}

// Pass is what one pass did.
type Pass struct {
	Claimed  int // rows claimed
	Relayed  int // decided and removed
	Dead     int // moved to coalesce_outbox_dead
	Retried  int // left for a later pass: Submit met an outage
	HeldBack int // left for a later pass: another relay holds an earlier row of their key
}

// Relay moves committed outbox rows to Submit. Several relays (in one
// process or many) may run on one outbox at once. Safe for concurrent use.
type Relay struct {
	cfg  Config
	log  *slog.Logger
	wake chan struct{}
}

// FailClosed returns copies of policies with Fail set to closed: the
// policies of a relay's Coalescer.
func FailClosed(policies []debounce.Policy) []debounce.Policy {
	out := make([]debounce.Policy, len(policies))
	for i, p := range policies {
		p.Fail = debounce.FailClosed
		out[i] = p
	}
	return out
}

// New checks cfg and returns a Relay; Run starts it.
func New(cfg Config) (*Relay, error) {
	if cfg.Pool == nil {
		return nil, fmt.Errorf("%w: Config.Pool is required", ErrInvalidConfig)
	}
	if cfg.Coalescer == nil {
		return nil, fmt.Errorf("%w: Config.Coalescer is required", ErrInvalidConfig)
	}
	for _, p := range cfg.Coalescer.Policies() {
		if p.Fail != debounce.FailClosed {
			return nil, fmt.Errorf("%w: policy %s: fail is %q; the relay's Coalescer needs fail: closed (build it with outbox.FailClosed(policies)), or a Redis outage would publish rows without a reservation instead of keeping them", ErrInvalidConfig, p.Type, p.Fail)
		}
	}
	switch {
	case cfg.BatchSize < 0 || cfg.BatchSize > 100_000:
		return nil, fmt.Errorf("%w: BatchSize %d must be between 1 and 100000 (0: %d)", ErrInvalidConfig, cfg.BatchSize, DefaultBatchSize)
	case cfg.Concurrency < 0:
		return nil, fmt.Errorf("%w: Concurrency %d must not be negative (0: %d)", ErrInvalidConfig, cfg.Concurrency, DefaultConcurrency)
	case cfg.PollEvery < 0 || cfg.RetryMin < 0 || cfg.RetryMax < 0 || cfg.BacklogEvery < 0 || cfg.PassTimeout < 0 || cfg.SubmitTimeout < 0:
		return nil, fmt.Errorf("%w: durations must not be negative", ErrInvalidConfig)
	}
	cfg.BatchSize = cmp.Or(cfg.BatchSize, DefaultBatchSize)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, DefaultConcurrency)
	cfg.PollEvery = cmp.Or(cfg.PollEvery, DefaultPollEvery)
	cfg.RetryMin = cmp.Or(cfg.RetryMin, DefaultRetryMin)
	cfg.RetryMax = max(cmp.Or(cfg.RetryMax, DefaultRetryMax), cfg.RetryMin)
	cfg.BacklogEvery = cmp.Or(cfg.BacklogEvery, DefaultBacklogEvery)
	cfg.PassTimeout = cmp.Or(cfg.PassTimeout, DefaultPassTimeout)
	cfg.SubmitTimeout = cmp.Or(cfg.SubmitTimeout, DefaultSubmitTimeout)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Relay{cfg: cfg, log: log, wake: make(chan struct{}, 1)}, nil
}

// Run relays until ctx ends: a pass at each notification, at least every
// PollEvery, at once again while passes find full batches, and after a
// backoff when one met an outage. The pass under way when ctx ends is
// finished (within PassTimeout). It returns nil when ctx ends.
func (r *Relay) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	wg.Add(1)
	go func() { defer wg.Done(); r.listen(lctx) }()
	if r.cfg.Hooks.Backlog != nil {
		wg.Add(1)
		go func() { defer wg.Done(); r.watchBacklog(lctx) }()
	}
	backoff := time.Duration(0)
	poll := time.NewTimer(time.Hour)
	defer poll.Stop()
	for {
		p, err := r.Once(ctx)
		next, wakeable := r.cfg.PollEvery, true
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return nil
			}
			backoff = r.grow(backoff)
			r.log.Warn("outbox relay: pass failed; retrying", "err", err, "retry_in", backoff)
			next, wakeable = backoff, false
		case p.Retried > 0:
			// An outage: a notification does not cut the backoff short.
			backoff = r.grow(backoff)
			next, wakeable = backoff, false
		case p.Claimed == r.cfg.BatchSize && p.HeldBack < p.Claimed:
			backoff = 0
			continue // more rows wait
		case p.HeldBack > 0:
			backoff, next = 0, heldBackDelay
		default:
			backoff = 0
		}
		poll.Reset(next) // Go 1.23 timers: no stale tick survives Reset or Stop
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return nil
			case <-poll.C:
				waiting = false
			case <-r.wake:
				if wakeable {
					poll.Stop()
					waiting = false
				}
			}
		}
	}
}

func (r *Relay) grow(b time.Duration) time.Duration {
	if b == 0 {
		return r.cfg.RetryMin
	}
	return min(2*b, r.cfg.RetryMax)
}

// listen holds a LISTEN connection and turns notifications into wake-ups;
// polling covers the time it is reconnecting.
func (r *Relay) listen(ctx context.Context) {
	delay := r.cfg.RetryMin
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, r.cfg.Pool.Config().ConnConfig.Copy())
		if err == nil {
			if _, err = conn.Exec(ctx, "LISTEN "+Channel); err == nil {
				delay = r.cfg.RetryMin
				r.poke() // rows may have come while nobody listened
				for {
					if _, err = conn.WaitForNotification(ctx); err != nil {
						break
					}
					r.poke()
				}
			}
			closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(closeCtx)
			cancel()
		}
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("outbox relay: LISTEN connection lost; polling meanwhile", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, r.cfg.RetryMax)
	}
}

func (r *Relay) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Relay) watchBacklog(ctx context.Context) {
	t := time.NewTicker(r.cfg.BacklogEvery)
	defer t.Stop()
	for {
		n, age, err := Backlog(ctx, r.cfg.Pool)
		if err == nil {
			r.cfg.Hooks.Backlog(n, age)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Querier runs a query returning one row: a *pgx.Conn, *pgxpool.Pool or pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Backlog counts the rows waiting in the outbox and the age of the oldest
// (by the database's clock).
func Backlog(ctx context.Context, db Querier) (rows int64, oldest time.Duration, err error) {
	var secs float64
	err = db.QueryRow(ctx, `SELECT count(*), COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - min(created_at)), 0)::float8 FROM coalesce_outbox`).Scan(&rows, &secs)
	if err != nil {
		return 0, 0, fmt.Errorf("outbox: backlog: %w", err)
	}
	return rows, time.Duration(secs * float64(time.Second)), nil
}

const claimSQL = `SELECT id, type, args, COALESCE(key, ''), COALESCE(traceparent, ''), created_at, clock_timestamp()
FROM coalesce_outbox ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`

// foreignSQL reads the rows before the claimed ones that this pass does not
// hold: another relay's (or committed since the claim). Reading needs no lock.
const foreignSQL = `SELECT id, type, args, COALESCE(key, '') FROM coalesce_outbox
WHERE id < $1 AND NOT (id = ANY($2)) ORDER BY id LIMIT $3`

const deleteSQL = `DELETE FROM coalesce_outbox WHERE id = ANY($1)`

const deadSQL = `WITH e AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[]) AS e(id, code, field, msg)
), d AS (
    DELETE FROM coalesce_outbox o USING e WHERE o.id = e.id
    RETURNING o.id, o.type, o.args, o.key, o.traceparent, o.created_at, e.code, e.field, e.msg
)
INSERT INTO coalesce_outbox_dead (id, type, args, key, traceparent, created_at, error_code, error_field, error)
SELECT id, type, args, key, traceparent, created_at, code, NULLIF(field, ''), msg FROM d`

// item is a claimed row on its way through a pass.
type item struct {
	row     Row
	key     debounce.RoundKey
	err     error // the row can never be decided
	d       debounce.Decision
	lag     time.Duration
	outcome int // itemPending, itemDone, itemDead, itemRetry, itemHeld
	retry   error
}

const (
	itemPending = iota
	itemDone
	itemDead
	itemRetry
	itemHeld
)

type groupKey struct {
	typ string
	key debounce.RoundKey
}

// Once runs one pass: claim a batch, decide its rows, remove the decided
// and move the poison ones aside, commit.
func (r *Relay) Once(ctx context.Context) (Pass, error) {
	var p Pass
	tx, err := r.begin(ctx)
	if err != nil {
		return p, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	items, err := r.claim(ctx, tx)
	if err != nil || len(items) == 0 {
		return p, err
	}
	claimedAt := time.Now()
	p.Claimed = len(items)
	blocked, heldAfter, err := r.foreign(ctx, tx, items)
	if err != nil {
		return p, err
	}
	var groups [][]*item
	index := make(map[groupKey]int)
	for _, it := range items {
		if it.err != nil {
			it.outcome = itemDead
			continue
		}
		gk := groupKey{it.row.Event.Type, it.key}
		if blocked[gk] || it.row.ID > heldAfter {
			it.outcome = itemHeld
			continue
		}
		i, ok := index[gk]
		if !ok {
			i = len(groups)
			index[gk] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], it)
	}
	r.decide(ctx, groups, claimedAt)
	r.flushDecided(ctx, items)

	var done []int64
	var dead struct {
		ids               []int64
		codes, fields, ms []string
	}
	for _, it := range items {
		switch it.outcome {
		case itemDone:
			done = append(done, it.row.ID)
		case itemDead:
			code, field := errorCode(it.err)
			dead.ids, dead.codes, dead.fields, dead.ms = append(dead.ids, it.row.ID), append(dead.codes, code), append(dead.fields, field), append(dead.ms, it.err.Error())
		}
	}
	// The decisions are made: write them down even if ctx ended meanwhile,
	// or the rows would be relayed (and counted) twice.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.PassTimeout)
	defer cancel()
	if len(done) > 0 && r.cfg.Durable != nil {
		if err := r.cfg.Durable(fctx); err != nil {
			return p, fmt.Errorf("outbox: relay: the store could not make the decisions durable (the %d rows decided stay, to be relayed again): %w", len(done), err)
		}
	}
	if len(done) > 0 {
		if _, err := tx.Exec(fctx, deleteSQL, done); err != nil {
			return p, fmt.Errorf("outbox: relay: delete decided rows: %w", err)
		}
	}
	if len(dead.ids) > 0 {
		if _, err := tx.Exec(fctx, deadSQL, dead.ids, dead.codes, dead.fields, dead.ms); err != nil {
			return p, fmt.Errorf("outbox: relay: move dead rows: %w", err)
		}
	}
	if err := tx.Commit(fctx); err != nil {
		return p, fmt.Errorf("outbox: relay: commit (the %d rows decided will be relayed again): %w", len(done), err)
	}
	var firstRetry *item
	for _, it := range items {
		switch it.outcome {
		case itemDone:
			p.Relayed++
			if r.cfg.Hooks.Relayed != nil {
				r.cfg.Hooks.Relayed(it.row, it.d, it.lag)
			}
		case itemDead:
			p.Dead++
			code, field := errorCode(it.err)
			r.log.Warn("outbox relay: row can never be decided; moved to coalesce_outbox_dead",
				"id", it.row.ID, "job_type", it.row.Event.Type, "code", code, "field", field, "err", it.err)
			if r.cfg.Hooks.Dead != nil {
				r.cfg.Hooks.Dead(it.row, it.err)
			}
		case itemRetry:
			p.Retried++
			if firstRetry == nil && it.retry != nil {
				firstRetry = it
			}
			if r.cfg.Hooks.Retry != nil {
				r.cfg.Hooks.Retry(it.row, it.retry)
			}
		case itemHeld:
			p.HeldBack++
		}
	}
	if firstRetry != nil {
		r.log.Warn("outbox relay: rows wait for Redis or NATS; retrying with backoff",
			"rows", p.Retried, "job_type", firstRetry.row.Event.Type, "id", firstRetry.row.ID, "err", firstRetry.retry)
	}
	return p, nil
}

// begin starts a pass's transaction, whatever the database's defaults:
// READ COMMITTED (the claim's FOR UPDATE SKIP LOCKED and the read of other
// relays' rows expect each statement to see what is committed; under
// REPEATABLE READ or SERIALIZABLE a row another relay deleted meanwhile
// fails the pass with a serialization error), and an idle-in-transaction
// timeout of its own: the transaction idles while the rows are decided, and
// a server idle_in_transaction_session_timeout shorter than that would end
// every pass at its commit, the batch decided again and again, for ever.
// Its own bound is the pass's worst: deciding, then flushing, then writing
// down, each within PassTimeout.
func (r *Relay) begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := r.cfg.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return nil, fmt.Errorf("outbox: relay: begin: %w", err)
	}
	idle := strconv.FormatInt((3*r.cfg.PassTimeout + 10*time.Second).Milliseconds(), 10)
	if _, err := tx.Exec(ctx, `SELECT set_config('idle_in_transaction_session_timeout', $1, true)`, idle); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("outbox: relay: begin: %w", err)
	}
	return tx, nil
}

// flushDecided makes sure the decisions of the pass's decided rows are in
// Redis before the rows are deleted: a Coalescer answers some events
// locally (debounce local joins), in memory until its next flush, and a
// relay killed after its commit would lose those. When the flush fails,
// the decided rows stay, to be submitted again (at least once).
func (r *Relay) flushDecided(ctx context.Context, items []*item) {
	f, ok := r.cfg.Coalescer.(interface{ Flush(context.Context) error })
	if !ok || !slices.ContainsFunc(items, func(it *item) bool { return it.outcome == itemDone }) {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.PassTimeout)
	err := f.Flush(fctx)
	cancel()
	if err == nil {
		return
	}
	for _, it := range items {
		if it.outcome == itemDone {
			it.outcome, it.retry = itemRetry, fmt.Errorf("%w: flushing its decision to Redis: %w", debounce.ErrStoreUnavailable, err)
		}
	}
}

// claim locks up to a batch of rows no other relay holds, oldest first.
func (r *Relay) claim(ctx context.Context, tx pgx.Tx) ([]*item, error) {
	rows, err := tx.Query(ctx, claimSQL, r.cfg.BatchSize)
	if err != nil {
		return nil, fmt.Errorf("outbox: relay: claim: %w", err)
	}
	defer rows.Close()
	var items []*item
	for rows.Next() {
		var it item
		var args string
		var dbNow time.Time
		ev := &it.row.Event
		if err := rows.Scan(&it.row.ID, &ev.Type, &args, &ev.Key, &ev.TraceParent, &it.row.CreatedAt, &dbNow); err != nil {
			return nil, fmt.Errorf("outbox: relay: claim: %w", err)
		}
		ev.Args = []byte(args)
		it.lag = dbNow.Sub(it.row.CreatedAt) // plus the time from the claim to the decision
		it.key, it.err = r.cfg.Coalescer.RoundKeyOf(*ev)
		if it.err != nil && !permanent(it.err) {
			// RoundKeyOf touches no server: any error of it is the row's.
			it.err = fmt.Errorf("%w: %w", debounce.ErrInvalidEvent, it.err)
		}
		items = append(items, &it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: relay: claim: %w", err)
	}
	return items, nil
}

// foreign returns the round keys of earlier rows this pass does not hold:
// rows of those keys wait. heldAfter: rows with a larger id wait too (there
// were more earlier rows than were read).
func (r *Relay) foreign(ctx context.Context, tx pgx.Tx, items []*item) (map[groupKey]bool, int64, error) {
	ids := make([]int64, len(items))
	for i, it := range items {
		ids[i] = it.row.ID
	}
	limit := 4 * r.cfg.BatchSize
	rows, err := tx.Query(ctx, foreignSQL, ids[len(ids)-1], ids, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("outbox: relay: read earlier rows: %w", err)
	}
	defer rows.Close()
	blocked := make(map[groupKey]bool)
	n, last := 0, int64(0)
	for rows.Next() {
		var id int64
		var ev debounce.Event
		var args string
		if err := rows.Scan(&id, &ev.Type, &args, &ev.Key); err != nil {
			return nil, 0, fmt.Errorf("outbox: relay: read earlier rows: %w", err)
		}
		ev.Args = []byte(args)
		n, last = n+1, id
		if k, err := r.cfg.Coalescer.RoundKeyOf(ev); err == nil {
			blocked[groupKey{ev.Type, k}] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("outbox: relay: read earlier rows: %w", err)
	}
	heldAfter := ids[len(ids)-1]
	if n == limit {
		heldAfter = last
	}
	return blocked, heldAfter, nil
}

// decide submits the groups' rows: groups at once (up to Concurrency), the
// rows of a group in order. A group stops at its first row that meets an
// outage (the rest of its key waits behind it), and after an outage no
// group submits more.
func (r *Relay) decide(ctx context.Context, groups [][]*item, claimedAt time.Time) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.PassTimeout)
	defer cancel()
	var outage atomic.Bool
	sem := make(chan struct{}, r.cfg.Concurrency)
	var wg sync.WaitGroup
	for _, g := range groups {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			for i, it := range g {
				if outage.Load() {
					for _, rest := range g[i:] {
						rest.outcome = itemRetry
					}
					return
				}
				ctx, cancel := context.WithTimeout(sctx, r.cfg.SubmitTimeout)
				d, err := r.cfg.Coalescer.Submit(ctx, it.row.Event)
				cancel()
				if err == nil && d.Outcome == debounce.OutcomeBypassed {
					// Published without a reservation: not the decision a
					// relay keeps a row for (New refuses fail-open policies,
					// so only a Submitter of another kind gets here).
					err = fmt.Errorf("%w: the decision was bypassed (fail open); the relay needs fail: closed", debounce.ErrStoreUnavailable)
				}
				switch {
				case err == nil:
					it.outcome, it.d = itemDone, d
					it.lag += time.Since(claimedAt)
				case permanent(err):
					it.outcome, it.err = itemDead, err
				default:
					outage.Store(true)
					for _, rest := range g[i:] {
						rest.outcome = itemRetry
					}
					it.retry = err
					return
				}
			}
		}()
	}
	wg.Wait()
}

// permanent: Submit can never decide the event, however often it is retried.
func permanent(err error) bool {
	return errors.Is(err, debounce.ErrInvalidEvent) || errors.Is(err, debounce.ErrNoPolicy) || errors.Is(err, debounce.ErrJobTooLarge)
}

// errorCode names a dead row's reason and the field it concerns.
func errorCode(err error) (code, field string) {
	var ee *debounce.EventError
	switch {
	case errors.As(err, &ee):
		return ee.Code, ee.Field
	case errors.Is(err, debounce.ErrNoPolicy):
		return "no_policy", "type"
	case errors.Is(err, debounce.ErrJobTooLarge):
		return "job_too_large", "args"
	}
	return "invalid_event", ""
}
