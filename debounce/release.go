package debounce

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReleaseResult is what closing a round found.
type ReleaseResult string

// Release results.
const (
	// ReleaseReleased: the round was still the job's and is now closed;
	// events from now on open the next round.
	ReleaseReleased ReleaseResult = "released"
	// ReleaseStaleToken: another round holds the key (the job's reservation
	// expired and a new round opened); nothing was changed.
	ReleaseStaleToken ReleaseResult = "stale_token"
	// ReleaseMissing: no round holds the key (expired, or already released
	// by an earlier delivery of the same job).
	ReleaseMissing ReleaseResult = "missing"
	// ReleaseNotDue: the round is not due yet, and must not run now. With a
	// Version, it was extended past now: publish the job again for DueAt
	// with Version. Version 0 (a fixed due time, delivered early by this
	// clock): deliver the same job again at DueAt.
	ReleaseNotDue ReleaseResult = "not_due"
	// ReleaseRetry: an earlier delivery of this job already closed the
	// round; the summary is the one it took (kept until Finish).
	ReleaseRetry ReleaseResult = "retry"
	// ReleaseSkipped: nothing to release at this point: a throttle leading
	// job (the window ends by itself), dedup until success or expiry at
	// start, a bypassed job.
	ReleaseSkipped ReleaseResult = "skipped"
	// ReleaseSuperseded: another message of the round (another version: a
	// reschedule, a repair, a filled round) took it; this one must not run.
	// Ack it.
	ReleaseSuperseded ReleaseResult = "superseded"
	// ReleaseDone: the job finished a moment ago (doneRetention); this is a
	// later delivery (an ack lost, a stale version) and must not run. Ack it.
	ReleaseDone ReleaseResult = "done"
)

// Summary describes a round as its job starts.
type Summary struct {
	Events    int       `json:"events"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// Payload is the latest event's args (payload last).
	Payload json.RawMessage `json:"payload,omitempty"`
	// Items are the distinct accumulated items, canonical JSON, sorted by
	// their bytes (payload accumulate).
	Items []json.RawMessage `json:"items,omitempty"`
}

// Release is the answer to Start or Finish.
type Release struct {
	Result  ReleaseResult
	Summary Summary   // when released (and, from the job alone, when skipped)
	DueAt   time.Time // not due: the new due time
	Version int       // not due: publish the schedule again with this version
	// Starts counts the deliveries of this job that reached Start, this one
	// included: 1 for the first, more on retries; 0 when nothing counts
	// them (a bypassed job, a missing round, a stale token).
	// Deliveries that died before Start (in a killed worker's prefetch
	// buffer, or waiting out their ack wait) are not attempts.
	Starts int
}

// takenRetention is how long a round closed at job start keeps its summary
// for retries of the job, unless Finish deletes it first.
const takenRetention = 24 * time.Hour

// doneRetention is how long Finish remembers that a round's job is done, so
// that a delivery coming after it (its ack was lost, or another version of
// the round fired late) does not run the job again.
const doneRetention = 2 * time.Minute

// Start closes the job's round as its job starts, so that events from now on
// open the next round, and returns the round's summary. For an extended round
// not yet due it returns ReleaseNotDue: publish the job again and ack this
// delivery without running it. A redelivery of a job whose round an earlier
// delivery closed gets ReleaseRetry and the same summary. Call it before the
// handler runs, and Finish when the job will not run again.
func (c *Coalescer) Start(ctx context.Context, job Job) (Release, error) {
	if !c.takesAtStart(job) {
		rel := c.skipped(job)
		if job.Token == 0 {
			return rel, nil // bypassed: nothing in Redis to count with
		}
		// No round to close, but the attempts still count: one small
		// hash (the taken key) per job, deleted by Finish.
		return c.countStart(ctx, job, rel)
	}
	rel, err := c.release(ctx, job, "take")
	if err == nil && rel.Result == ReleaseReleased {
		c.forget(job.Type, job.Key, job.Token)
	}
	if err == nil && rel.Starts == 0 && (rel.Result == ReleaseMissing || rel.Result == ReleaseStaleToken) {
		// The round is gone (expired, lost with Redis's data, or another
		// holds the key): count this job's starts all the same, so its
		// attempts are not its deliveries, which an outage's retries
		// inflate.
		return c.countStart(ctx, job, rel)
	}
	return rel, err
}

// countStart counts a start of a job without a round to close, in its taken
// key; a done job is ReleaseDone.
func (c *Coalescer) countStart(ctx context.Context, job Job, rel Release) (Release, error) {
	n, err := countStartScript.Run(ctx, c.rdb, []string{c.takenKey(job), c.doneKey(job)}, takenRetention.Milliseconds()).Int()
	if err != nil {
		return Release{}, fmt.Errorf("%w: count the start of %s job %s of %s: %w", ErrStoreUnavailable, job.Type, job.Token, job.Key, err)
	}
	if n < 0 {
		return Release{Result: ReleaseDone}, nil
	}
	rel.Starts = n
	return rel, nil
}

func (c *Coalescer) takesAtStart(job Job) bool {
	p := c.policies[job.Type]
	switch {
	case job.Token == 0,
		job.Mode == ModeThrottle && job.Immediate(),
		job.Mode == ModeDedup && p != nil && p.Until != UntilStart:
		return false
	}
	return true
}

// Finish is called after the handler when the job will not run again: it
// succeeded, or failed for the last time (final). It drops the summary Start
// kept for retries and releases a dedup reservation held until success. A
// failure that will be retried changes nothing.
func (c *Coalescer) Finish(ctx context.Context, job Job, succeeded, final bool) (Release, error) {
	if job.Token == 0 || !succeeded && !final {
		return Release{Result: ReleaseSkipped}, nil
	}
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, c.takenKey(job))
		p.Set(ctx, c.doneKey(job), job.Version, doneRetention)
		return nil
	})
	if err != nil {
		return Release{}, fmt.Errorf("%w: finish %s round %s of %s: %w", ErrStoreUnavailable, job.Type, job.Token, job.Key, err)
	}
	if p := c.policies[job.Type]; job.Mode != ModeDedup || p == nil || p.Until != UntilSuccess {
		return Release{Result: ReleaseSkipped}, nil
	}
	return c.release(ctx, job, "release")
}

// takenKey keeps a round's summary between Start and Finish.
func (c *Coalescer) takenKey(job Job) string {
	suffix := "x" + job.Token.String()
	if job.Mode == ModeThrottle {
		suffix = "tx" + job.Token.String()
	}
	return redisKey(c.prefix, c.mixOf(job.Type), job.Key, suffix)
}

// doneKey is where Finish remembers for doneRetention that the job is done.
func (c *Coalescer) doneKey(job Job) string {
	suffix := "d" + job.Token.String()
	if job.Mode == ModeThrottle {
		suffix = "td" + job.Token.String()
	}
	return redisKey(c.prefix, c.mixOf(job.Type), job.Key, suffix)
}

// mixOf is the type's key mix, from its policy when there is one.
func (c *Coalescer) mixOf(jobType string) typeMix {
	if p, ok := c.policies[jobType]; ok {
		return p.mix
	}
	return mixFor(jobType)
}

func (c *Coalescer) skipped(job Job) Release {
	return Release{Result: ReleaseSkipped, Summary: Summary{Events: 1, FirstSeen: job.OpenedAt, LastSeen: job.OpenedAt}}
}

// jobRedisKey is the Redis key of the job's round.
func (c *Coalescer) jobRedisKey(job Job) string {
	suffix := ""
	if job.Mode == ModeThrottle && !job.Immediate() {
		suffix = "t" // the trailing round
	}
	return redisKey(c.prefix, c.mixOf(job.Type), job.Key, suffix)
}

func (c *Coalescer) release(ctx context.Context, job Job, op string) (Release, error) {
	if p, ok := c.policies[job.Type]; ok && op == "take" && p.Fail == FailClosed {
		if err := c.noReplica(ctx, c.jobRedisKey(job)); err != nil {
			// Its primary has no replica: the take would be a doubt. The
			// round stays pending (events go on joining it) and the job's
			// delivery comes again.
			if c.hooks.Replication != nil {
				c.hooks.Replication(job.Type, FailClosed, err)
			}
			return Release{}, fmt.Errorf("%w: take %s round %s of %s: %w", ErrStoreUnavailable, job.Type, job.Token, job.Key, err)
		}
	}
	rel, doubt, err := c.releaseRound(ctx, job, op)
	if err != nil {
		return rel, fmt.Errorf("%w: release %s round %s of %s: %w", ErrStoreUnavailable, job.Type, job.Token, job.Key, err)
	}
	if doubt != nil && op == "take" && (rel.Result == ReleaseReleased || rel.Result == ReleaseRetry) {
		// Taken on the primary, not confirmed by its replicas: a failover
		// now would bring the round back pending, and its job would run
		// again. Under fail: closed the job waits (its next delivery finds
		// the round taken and waits for the replicas again); under fail:
		// open it runs, counted.
		fail := FailOpen
		if p, ok := c.policies[job.Type]; ok {
			fail = p.Fail
		}
		if c.hooks.Replication != nil {
			c.hooks.Replication(job.Type, fail, doubt)
		}
		if fail == FailClosed {
			// Not an attempt: the next delivery counts again (else an
			// outage of the replicas would dead-letter the job).
			_ = uncountStartScript.Run(ctx, c.rdb, []string{c.takenKey(job)}).Err()
			return Release{}, fmt.Errorf("%w: take %s round %s of %s: %w", ErrStoreUnavailable, job.Type, job.Token, job.Key, doubt)
		}
	}
	if c.hooks.Release != nil {
		c.hooks.Release(job.Type, rel.Result, rel.Summary)
	}
	return rel, nil
}

// nextWindow is, for the take of a throttle trailing round, the window key
// and the arguments to reopen it with: the trailing job starts the next
// window, so jobs of a key stay a window apart. Zero window: none.
func (c *Coalescer) nextWindow(job Job, op string) (string, int64, uint64) {
	p, ok := c.policies[job.Type]
	if op != "take" || job.Mode != ModeThrottle || job.Immediate() || !ok || p.Mode != ModeThrottle {
		return "", 0, 0
	}
	// Published (its job is this one), one event: the trailing job.
	return redisKey(c.prefix, p.mix, job.Key, ""), p.Window.Milliseconds(), uint64(packOpen(newRnd())) | packPub
}

func (c *Coalescer) releaseRound(ctx context.Context, job Job, op string) (Release, error, error) {
	return layoutOfToken(job.Token).release(ctx, c, job, op)
}

// release closes a packed round (release_packed.lua); doubt as runDoubt's.
func (packedLayout) release(ctx context.Context, c *Coalescer, job Job, op string) (rel Release, doubt error, err error) {
	key := c.jobRedisKey(job)
	wkey, wms, wval := c.nextWindow(job, op)
	exp, rnd := job.Token.packedParts()
	keys := []string{key, c.takenKey(job), identityKey(key), c.doneKey(job)}
	if wkey != "" {
		keys = append(keys, wkey)
	}
	due := int64(0)
	if !job.DueAt.IsZero() {
		due = job.DueAt.UnixMilli()
	}
	cmd, doubt := c.runDoubt(ctx, releasePackedScript, keys,
		exp, rnd, op, takenRetention.Milliseconds(), job.Version, wms, wval,
		due, c.now().UnixMilli(), c.slack.Milliseconds())
	res, err := cmd.Int64Slice()
	if err == nil && len(res) < 2 {
		err = fmt.Errorf("release_packed: unexpected reply %v", res)
	}
	if err != nil {
		return Release{}, nil, err
	}
	switch res[0] {
	case closeNotDue:
		// Delivered before its due time by this worker's clock: a packed
		// round's due time never moves, so there is nothing to publish
		// again (Version 0); the delivery is retried at DueAt.
		return Release{Result: ReleaseNotDue, DueAt: msTime(res[1])}, doubt, nil
	case closeSuperseded:
		return Release{Result: ReleaseSuperseded}, doubt, nil
	case closeDone:
		return Release{Result: ReleaseDone}, doubt, nil
	case closeClosed, closeRetry:
		v := packed(res[1])
		last := v.lastSeen(exp, job.TTL)
		first := job.OpenedAt
		if last.Before(first) {
			last = first
		}
		result := ReleaseReleased
		if res[0] == closeRetry {
			result = ReleaseRetry
		}
		var starts int
		if len(res) > 2 {
			starts = int(res[2])
		}
		return Release{Result: result, Starts: starts, Summary: Summary{Events: v.count(), FirstSeen: first, LastSeen: last}}, doubt, nil
	case closeStale:
		return Release{Result: ReleaseStaleToken}, doubt, nil
	default:
		return Release{Result: ReleaseMissing}, doubt, nil
	}
}

// release closes a hash round (take_round.lua); doubt as runDoubt's.
func (hashLayout) release(ctx context.Context, c *Coalescer, job Job, op string) (rel Release, doubt error, err error) {
	key := c.jobRedisKey(job)
	wkey, wms, wval := c.nextWindow(job, op)
	keys := []string{key, c.takenKey(job), c.doneKey(job)}
	if wkey != "" {
		keys = append(keys, wkey)
	}
	cmd, doubt := c.runDoubt(ctx, takeRoundScript, keys,
		strconv.FormatUint(uint64(job.Token), 10), c.now().UnixMilli(), c.slack.Milliseconds(), op, takenRetention.Milliseconds(), job.Version, wms, wval)
	res, err := cmd.Slice()
	if err != nil {
		return Release{}, nil, err
	}
	status, _ := res[0].(int64)
	switch status {
	case closeSuperseded:
		return Release{Result: ReleaseSuperseded}, doubt, nil
	case closeDone:
		return Release{Result: ReleaseDone}, doubt, nil
	case closeClosed:
		rel := Release{Result: ReleaseReleased, Summary: summaryFromHash(res[1:])}
		if op == "take" {
			rel.Starts = 1
		}
		return rel, doubt, nil
	case closeRetry:
		return Release{Result: ReleaseRetry, Summary: summaryFromHash(res[1:]), Starts: startsFromHash(res[1:])}, doubt, nil
	case closeNotDue:
		due, _ := res[1].(int64)
		version, _ := res[2].(int64)
		return Release{Result: ReleaseNotDue, DueAt: msTime(due), Version: int(version)}, doubt, nil
	case closeStale:
		return Release{Result: ReleaseStaleToken}, doubt, nil
	default:
		return Release{Result: ReleaseMissing}, doubt, nil
	}
}

// startsFromHash reads the start count a taken copy keeps.
func startsFromHash(pairs []any) int {
	for i := 0; i+1 < len(pairs); i += 2 {
		if f, _ := pairs[i].(string); f == "s" {
			v, _ := pairs[i+1].(string)
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// summaryFromHash reads the field/value pairs of a hash-layout round.
func summaryFromHash(pairs []any) Summary {
	var s Summary
	for i := 0; i+1 < len(pairs); i += 2 {
		f, _ := pairs[i].(string)
		v, _ := pairs[i+1].(string)
		switch {
		case f == "n":
			s.Events, _ = strconv.Atoi(v)
		case f == "f":
			ms, _ := strconv.ParseInt(v, 10, 64)
			s.FirstSeen = msTime(ms)
		case f == "l":
			ms, _ := strconv.ParseInt(v, 10, 64)
			s.LastSeen = msTime(ms)
		case f == "a":
			s.Payload = json.RawMessage(v)
		case strings.HasPrefix(f, "i"):
			s.Items = append(s.Items, json.RawMessage(f[1:]))
		}
	}
	// Hash order is not insertion order once the hash grows: sort, so the
	// same items always come in the same order.
	slices.SortFunc(s.Items, func(a, b json.RawMessage) int { return bytes.Compare(a, b) })
	return s
}
