package debounce

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Locator tells whether the stream still holds a round's message: its
// pending schedule, or its job waiting for (or held by) a worker. The
// JetStream publisher is one. With it the reaper tells a round whose job
// merely waits (left alone, however long) from one whose message the stream
// lost (published again).
type Locator interface {
	Pending(ctx context.Context, job Job) (bool, error)
}

// Reaper looks after rounds that nothing else will close:
//
//   - Rounds reserved and never published: their producer died between the
//     two steps, and no event has joined them since (an event that joins an
//     unpublished round publishes it itself, so every accepted event is in
//     a published round). Once it stayed unpublished and unchanged for
//     UnpublishedAfter, the reaper looks for its message (it may have been
//     published and not marked) and marks it published, or releases it.
//   - Rounds overdue, RepairAfter past their due time and not taken, whose
//     message the stream no longer holds (purged, removed by hand, a NATS
//     store lost). Left alone such a round would take in events until its
//     TTL for a job that will never run. When the stream holds neither its
//     schedule nor its job, the reaper publishes the job again from the
//     round's identity (identity.go), with a new version, if the round is
//     still the one it looked up (same token and version): the round's data
//     reaches a job. A round whose message is still there (a backlog,
//     workers away) is left alone. A packed round has an identity only once
//     an event found it overdue; one that nobody joined since its message
//     was lost cannot be published again (its opening args were in the
//     message only) and stays until its TTL.
//
// Repairs need a Locator: the Coalescer's Publisher when it is one (the
// JetStream publisher is); without one the reaper only releases unpublished
// rounds.
type Reaper struct {
	c       *Coalescer
	loc     Locator
	finder  roundFinder          // nil: packed unpublished rounds are not looked up
	seen    map[string]seenRound // unpublished: key -> what the previous passes saw, since when
	present map[string]time.Time // overdue, message there: key|token -> not looked up again before
	// UnpublishedAfter is how long a round must stay unpublished and
	// unchanged before the reaper looks at it (DefaultUnpublishedAfter):
	// longer than a publish may take (the publisher retries for up to about
	// 25 s), so that a slow publish is never taken for a dead producer.
	UnpublishedAfter time.Duration
	// RepairAfter is how long past its due time a round that no job has
	// taken counts as overdue (DefaultRepairAfter): the reaper then looks
	// for its message in the stream, and publishes its job again if the
	// stream lost it. A job that merely waits for a worker is found and left
	// alone, however long it waits.
	RepairAfter time.Duration
	// MaxLookups bounds the Locator calls of one pass (DefaultMaxLookups):
	// with workers away every round is overdue, and the rest wait for the
	// next passes.
	MaxLookups int
}

// Defaults of a Reaper.
const (
	DefaultRepairAfter      = time.Minute
	DefaultUnpublishedAfter = 30 * time.Second
	DefaultMaxLookups       = 10_000
)

// roundFinder finds a round's message by job type and token alone: the
// lookup of a packed round, whose Redis key holds only part of its round
// key. The JetStream publisher is one.
type roundFinder interface {
	FindRound(ctx context.Context, jobType string, token Token) (RoundKey, bool, error)
}

// seenRound is an unpublished round as the passes saw it.
type seenRound struct {
	state string
	since time.Time
}

// recheckAfter is how long a round whose message was found is not looked up
// again: its job waits for a worker.
const recheckAfter = 5 * time.Minute

// maxPresent bounds the rounds remembered as found.
const maxPresent = 100_000

// ReapReport counts one pass.
type ReapReport struct {
	Scanned    int // round keys looked at
	Candidates int // unpublished now, remembered for the next pass
	Released   int // unpublished and unchanged for UnpublishedAfter, no message found: released
	Marked     int // unpublished and unchanged, but its message was in the stream: marked published
	Overdue    int // overdue rounds with an identity (repairable)
	Lookups    int // overdue rounds looked up in the stream
	Missing    int // of those, message missing
	Repaired   int // of those, the job published again (the others changed meanwhile)
}

// NewReaper returns a reaper for the coalescer's keys. Call Pass every period
// (the daemon uses a minute). Not safe for concurrent Pass calls; running
// reapers in several replicas is safe (every change is compare-and-set on
// the round's token and version).
func (c *Coalescer) NewReaper() *Reaper {
	r := &Reaper{c: c, seen: map[string]seenRound{}, present: map[string]time.Time{},
		UnpublishedAfter: DefaultUnpublishedAfter, RepairAfter: DefaultRepairAfter, MaxLookups: DefaultMaxLookups}
	r.loc, _ = c.pub.(Locator)
	r.finder, _ = c.pub.(roundFinder)
	return r
}

// overdueRound is a round the pass may repair.
type overdueRound struct {
	rkey   string // round key
	idKey  string // identity key (packed), "" for a hash round
	state  string // token|version (hash) or token|repairs (packed): what a repair checks
	job    Job
	token  Token
	marker string // the version (hash) or repair count (packed) seen
	// idRaw: the identity read from idKey (packed): only that one is
	// deleted as stale, not a newer round's of the same key.
	idRaw string
}

// Pass scans the rounds once.
func (r *Reaper) Pass(ctx context.Context) (ReapReport, error) {
	var (
		mu      sync.Mutex // ForEachMaster scans the masters concurrently
		rep     ReapReport
		next    = map[string]seenRound{}
		overdue []overdueRound
	)
	now := r.c.now()
	scan := func(ctx context.Context, client redis.Cmdable) error {
		iter := client.Scan(ctx, 0, r.c.prefix+"{*", 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			kind := r.c.keyKind(key)
			if kind == keyOther {
				continue
			}
			mu.Lock()
			rep.Scanned++
			mu.Unlock()
			if kind == keyIdentity {
				o, ok, err := r.identityRound(ctx, key, now)
				if err != nil {
					return err
				}
				if ok {
					mu.Lock()
					overdue = append(overdue, o)
					mu.Unlock()
				}
				continue
			}
			st, err := r.state(ctx, key, now)
			if err != nil {
				return err
			}
			if st.overdue != nil {
				mu.Lock()
				overdue = append(overdue, *st.overdue)
				mu.Unlock()
			}
			if !st.unpublished {
				continue
			}
			prev, ok := r.seen[key]
			switch {
			case ok && prev.state == st.compare && now.Sub(prev.since) >= r.UnpublishedAfter:
				marked, released, err := r.settleUnpublished(ctx, key, st)
				if err != nil {
					return err
				}
				mu.Lock()
				rep.Marked += marked
				rep.Released += released
				mu.Unlock()
			case ok && prev.state == st.compare:
				mu.Lock()
				next[key] = prev // unchanged, not yet for long enough
				rep.Candidates++
				mu.Unlock()
			default:
				mu.Lock()
				next[key] = seenRound{state: st.compare, since: now}
				rep.Candidates++
				mu.Unlock()
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := r.c.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return scan(ctx, m) })
	} else {
		err = scan(ctx, r.c.rdb)
	}
	if err != nil {
		return rep, fmt.Errorf("%w: reaper: %w", ErrStoreUnavailable, err)
	}
	r.seen = next
	rep.Overdue = len(overdue)
	if r.loc != nil {
		if err := r.repair(ctx, overdue, now, &rep); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// repair looks the overdue rounds up in the stream and publishes again the
// jobs of those missing. A look-up that raced a change of the round (its
// schedule fired and its job was taken, a worker rescheduled it, another
// reaper repaired it) finds the round changed in the repair script, which
// checks its token and version: nothing is published twice.
func (r *Reaper) repair(ctx context.Context, overdue []overdueRound, now time.Time, rep *ReapReport) error {
	if len(r.present) > maxPresent {
		for k, t := range r.present {
			if now.After(t) {
				delete(r.present, k)
			}
		}
	}
	for _, o := range overdue {
		id := o.rkey + "|" + o.state
		if t, ok := r.present[id]; ok && now.Before(t) {
			continue
		}
		if rep.Lookups >= r.MaxLookups {
			continue // the next passes get to it
		}
		rep.Lookups++
		found, err := r.loc.Pending(ctx, o.job)
		if err != nil {
			return fmt.Errorf("debounce: reaper: look up %s round %s of %s: %w", o.job.Type, o.job.Token, o.job.Key, err)
		}
		if found {
			if len(r.present) < maxPresent {
				r.present[id] = now.Add(recheckAfter)
			}
			continue
		}
		rep.Missing++
		ok, err := r.republish(ctx, o)
		if err != nil {
			return err
		}
		if ok {
			rep.Repaired++
		}
	}
	return nil
}

// settleUnpublished deals with a round unpublished and unchanged for
// UnpublishedAfter: its producer died between reserving and publishing, and
// nothing was accepted into it (a joiner would have published it), so it is
// released; unless its message is in the stream after all (published, but
// the producer could not mark it), then it is marked published.
func (r *Reaper) settleUnpublished(ctx context.Context, key string, st roundState) (marked, released int, err error) {
	found, err := r.published(ctx, key, st)
	if err != nil {
		return 0, 0, err
	}
	if found {
		if st.token.isHashToken() {
			err = markRoundScript.Run(ctx, r.c.rdb, []string{key}, strconv.FormatUint(uint64(st.token), 10)).Err()
		} else {
			exp, rnd := st.token.packedParts()
			err = markPackedScript.Run(ctx, r.c.rdb, []string{key}, exp, rnd).Err()
		}
		if err != nil {
			return 0, 0, fmt.Errorf("%w: reaper: mark %s: %w", ErrStoreUnavailable, key, err)
		}
		r.c.log.WarnContext(ctx, "reaper: a round its producer had published but not marked; marked it published", "key", key, "token", st.token.String())
		return 1, 0, nil
	}
	value, count, _ := strings.Cut(st.compare, "|")
	n, err := reapScript.Run(ctx, r.c.rdb, []string{key}, value, count).Int()
	if err != nil {
		return 0, 0, err
	}
	return 0, n, nil
}

// published looks for an unpublished round's message in the stream: by its
// identity for a hash round, by job type and token for a packed one (each
// configured type with packed rounds is tried, and the key the message
// carries must give this Redis key).
func (r *Reaper) published(ctx context.Context, key string, st roundState) (bool, error) {
	if st.job != nil && r.loc != nil {
		found, err := r.loc.Pending(ctx, *st.job)
		if err != nil {
			return false, fmt.Errorf("debounce: reaper: look up %s: %w", key, err)
		}
		return found, nil
	}
	if st.job != nil || r.finder == nil || st.token == 0 {
		return false, nil
	}
	suffix := key[len(r.c.prefix)+digestLen+2:]
	for _, p := range r.c.policies {
		// A packed key without suffix is a round or a throttle window (its
		// leading job carries the window's token); "t" a trailing round.
		if p.hash || suffix == "t" && p.Mode != ModeThrottle {
			continue
		}
		rk, found, err := r.finder.FindRound(ctx, p.Type, st.token)
		if err != nil {
			return false, fmt.Errorf("debounce: reaper: look up %s: %w", key, err)
		}
		if found && redisKey(r.c.prefix, p.mix, rk, suffix) == key {
			return true, nil
		}
	}
	return false, nil
}

// republish takes a new version of the round and publishes its job again.
func (r *Reaper) republish(ctx context.Context, o overdueRound) (bool, error) {
	var res []int64
	var err error
	if o.idKey == "" {
		res, err = repairRoundScript.Run(ctx, r.c.rdb, []string{o.rkey}, strconv.FormatUint(uint64(o.token), 10), o.marker).Int64Slice()
	} else {
		exp, rnd := o.token.packedParts()
		res, err = repairPackedScript.Run(ctx, r.c.rdb, []string{o.rkey, o.idKey}, exp, rnd, o.marker, o.idRaw).Int64Slice()
	}
	if err != nil {
		return false, fmt.Errorf("%w: reaper: repair %s round %s: %w", ErrStoreUnavailable, o.job.Type, o.token, err)
	}
	if len(res) < 2 || res[0] != 1 {
		return false, nil // taken, cancelled or repaired meanwhile
	}
	job := o.job
	job.Version = int(res[1])
	if err := r.c.publish(ctx, job); err != nil {
		return false, fmt.Errorf("debounce: reaper: %w", err)
	}
	r.c.log.WarnContext(ctx, "reaper: the stream had lost this round's message; published its job again",
		"job_type", job.Type, "key", job.Key.String(), "token", job.Token.String(), "version", job.Version,
		"due_at", dueOf(job), "opened_at", job.OpenedAt)
	return true, nil
}

// Kinds of the keys under the prefix.
const (
	keyOther    = iota
	keyRound    // a round: prefix "{" digest "}", or a trailing round ("t")
	keyIdentity // a packed round's identity ("j", "tj")
)

// keyKind tells rounds and identity keys from the taken copies ("x…",
// "tx…") Finish cleans up.
func (c *Coalescer) keyKind(key string) int {
	n := len(c.prefix) + digestLen + 2
	if len(key) < n || len(key) > n+2 || key[n-1] != '}' {
		return keyOther
	}
	switch key[n:] {
	case "", "t":
		return keyRound
	case "j", "tj":
		return keyIdentity
	}
	return keyOther
}

// roundState is what one pass reads of a round.
type roundState struct {
	compare     string // the round's identity as the unpublished check compares it
	unpublished bool
	token       Token
	job         *Job          // a hash round's job, from its identity
	overdue     *overdueRound // a hash round with an identity, overdue
}

// state reads a round.
func (r *Reaper) state(ctx context.Context, key string, now time.Time) (roundState, error) {
	typ, err := r.c.rdb.Type(ctx, key).Result()
	if err != nil {
		return roundState{}, err
	}
	switch typ {
	case "string":
		v, err := r.c.rdb.Get(ctx, key).Uint64()
		if err != nil {
			return roundState{}, nil // gone meanwhile
		}
		st := roundState{compare: fmt.Sprint(v) + "|", unpublished: !packed(v).published()}
		if st.unpublished {
			exp, err := r.c.rdb.PExpireTime(ctx, key).Result()
			if err != nil {
				return roundState{}, err
			}
			st.token = packedToken(exp.Milliseconds(), packed(v).rnd())
		}
		return st, nil
	case "hash":
		f, err := r.c.rdb.HMGet(ctx, key, "t", "n", "p", "v", "d", "f", "k", "g", "o", "a", "q").Result()
		if err != nil || len(f) != 11 || f[0] == nil {
			return roundState{}, nil
		}
		str := func(i int) string { s, _ := f[i].(string); return s }
		st := roundState{compare: str(0) + "|" + str(1), unpublished: str(2) == "0"}
		tok, _ := strconv.ParseUint(str(0), 10, 64)
		st.token = Token(tok)
		due, _ := strconv.ParseInt(str(4), 10, 64)
		opened, _ := strconv.ParseInt(str(5), 10, 64)
		job, ok := r.c.hashIdentity(str(6), str(7), str(8), str(9))
		if ok {
			job.Token, job.DueAt, job.OpenedAt = st.token, msTime(due), msTime(opened)
			st.job = &job
		}
		if st.unpublished || !ok || !now.After(msTime(due).Add(r.RepairAfter)) {
			return st, nil // not overdue, or no identity (opened by an older version, or its policy is gone)
		}
		if str(10) == "1" {
			if listed, err := r.listed(ctx, job.Type, key); err != nil || listed {
				return st, err // held in Redis: its forwarder's to publish
			}
		}
		st.overdue = &overdueRound{rkey: key, state: str(0) + "|" + str(3), job: job, token: job.Token, marker: str(3)}
		return st, nil
	default:
		return roundState{}, nil
	}
}

// identityRound reads a packed round's identity key: the round, if overdue.
func (r *Reaper) identityRound(ctx context.Context, key string, now time.Time) (overdueRound, bool, error) {
	f, err := r.c.rdb.HMGet(ctx, key, "j", "r").Result()
	if err != nil {
		return overdueRound{}, false, err
	}
	raw, _ := f[0].(string)
	repairs, _ := f[1].(string)
	if raw == "" {
		return overdueRound{}, false, nil
	}
	_, job, err := parseIdentity(raw)
	if err != nil || job.Token == 0 {
		r.c.log.WarnContext(ctx, "reaper: unreadable round identity", "key", key, "err", err)
		return overdueRound{}, false, nil
	}
	if !now.After(dueOf(job).Add(r.RepairAfter)) {
		return overdueRound{}, false, nil
	}
	if listed, err := r.listed(ctx, job.Type, strings.TrimSuffix(key, "j")); err != nil || listed {
		return overdueRound{}, false, err // held in Redis: its forwarder's to publish
	}
	o := overdueRound{rkey: strings.TrimSuffix(key, "j"), idKey: key, job: job, token: job.Token, marker: repairs, idRaw: raw,
		state: job.Token.String() + "|" + repairs}
	return o, true, nil
}

// listed reports whether a round is in its type's due list (deferred.go):
// held in Redis until a forwarder publishes its job, so no message of it is
// missing from the stream.
func (r *Reaper) listed(ctx context.Context, jobType, rkey string) (bool, error) {
	if _, err := r.c.rdb.ZScore(ctx, dueKey(r.c.prefix, jobType), rkey).Result(); err != nil {
		if errors.Is(err, redis.Nil) {
			return false, nil
		}
		return false, fmt.Errorf("%w: reaper: due list of %s: %w", ErrStoreUnavailable, jobType, err)
	}
	return true, nil
}

// CountRounds counts the rounds (and throttle trailing rounds) held in Redis
// under the prefix, pending or not yet published: one SCAN, for start-up
// reports and gauges, not for the hot path.
func (c *Coalescer) CountRounds(ctx context.Context) (int, error) {
	var mu sync.Mutex
	n := 0
	count := func(ctx context.Context, client redis.Cmdable) error {
		iter := client.Scan(ctx, 0, c.prefix+"{*", 1000).Iterator()
		for iter.Next(ctx) {
			if c.keyKind(iter.Val()) == keyRound {
				mu.Lock()
				n++
				mu.Unlock()
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return count(ctx, m) })
	} else {
		err = count(ctx, c.rdb)
	}
	if err != nil {
		return n, fmt.Errorf("%w: count rounds: %w", ErrStoreUnavailable, err)
	}
	return n, nil
}
