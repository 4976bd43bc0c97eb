package debounce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Round is a pending round as Inspect sees it.
type Round struct {
	Type      string    `json:"type"`
	Key       RoundKey  `json:"key"`
	Token     Token     `json:"round"`
	Events    int       `json:"events"`
	FirstSeen time.Time `json:"first_seen,omitzero"`
	LastSeen  time.Time `json:"last_seen,omitzero"`
	DueAt     time.Time `json:"due_at,omitzero"`
	ExpiresAt time.Time `json:"expires_at"`
	Published bool      `json:"published"`
	// Window is true when this is a throttle window rather than a round.
	Window  bool            `json:"window,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
	Items   int             `json:"items,omitempty"`
}

// Inspect reads the pending round of a key without changing anything: it
// sends no flush and submits nothing. For a throttle policy it returns the
// trailing round if one is pending, else the window. found is false when
// nothing is pending.
//
// Events counts the events in Redis plus those this Coalescer answered
// locally for the round and has not flushed yet. Not shown until their
// flush: a local join's later last-seen time and extension, and events of
// a flush whose reply was lost (they may or may not be in Redis), or all
// local joins when a flush has been under way for a second (Redis
// unreachable).
func (c *Coalescer) Inspect(ctx context.Context, jobType string, key RoundKey) (r Round, found bool, err error) {
	p, ok := c.policies[jobType]
	if !ok {
		return Round{}, false, fmt.Errorf("%w %q", ErrNoPolicy, jobType)
	}
	// Holding the flush lock, no flush goes out while the round is read:
	// the events answered locally and not flushed are exactly those Redis
	// does not have yet.
	local := c.local != nil && c.local.lockFlush(ctx, time.Second)
	if local {
		defer c.local.unlock()
	}
	keys := c.keys(p, key)
	for i, k := range keys {
		r, found, err = c.inspectKey(ctx, p, key, k, i == 1)
		if err != nil || found {
			if found && local {
				r.Events += c.localPending(p, key, r.Token)
			}
			return r, found, err
		}
	}
	return Round{}, false, nil
}

func (c *Coalescer) inspectKey(ctx context.Context, p *compiled, key RoundKey, k string, window bool) (Round, bool, error) {
	pipe := c.rdb.Pipeline()
	typ := pipe.Type(ctx, k)
	exp := pipe.PExpireTime(ctx, k)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Round{}, false, fmt.Errorf("%w: inspect %s %s: %w", ErrStoreUnavailable, p.Type, key, err)
	}
	var st storedRound
	st.typ, st.expMs = typ.Val(), int64(exp.Val()/time.Millisecond)
	var err error
	switch st.typ {
	case "string":
		st.value, err = c.rdb.Get(ctx, k).Uint64()
	case "hash":
		st.fields, err = c.rdb.HGetAll(ctx, k).Result()
	}
	if errors.Is(err, redis.Nil) {
		return Round{}, false, nil // expired just now
	}
	if err != nil {
		return Round{}, false, fmt.Errorf("%w: inspect %s %s: %w", ErrStoreUnavailable, p.Type, key, err)
	}
	r, found, derr := p.decodeRound(key, window, st)
	if derr != nil {
		return Round{}, false, fmt.Errorf("%w: inspect %s %s: %w", ErrStoreUnavailable, p.Type, key, derr)
	}
	if found && r.Payload != nil {
		// Joins that knew the round wrote its payload key only (lastkey.go).
		if a, err := c.rdb.Get(ctx, payloadKey(k, r.Token)).Bytes(); err == nil {
			r.Payload = json.RawMessage(a)
		}
	}
	return r, found, nil
}

// storedRound is what Redis holds at a round's key: its type, expiry, and
// its value (packed) or fields (hash).
type storedRound struct {
	typ    string
	expMs  int64
	value  uint64
	fields map[string]string
}

// decodeRound reads a round of the policy from what its key holds; found is
// false when the key holds nothing (or expired between the reads).
func (p *compiled) decodeRound(key RoundKey, window bool, st storedRound) (Round, bool, error) {
	r := Round{Type: p.Type, Key: key, Window: window}
	r.ExpiresAt = msTime(st.expMs)
	switch st.typ {
	case "none":
		return Round{}, false, nil
	case "string":
		v := packed(st.value)
		if v == 0 {
			return Round{}, false, nil // expired just now
		}
		r.Token = packedToken(st.expMs, v.rnd())
		r.Events, r.Published = v.count(), v.published()
		lifetime := p.lifetime()
		if window {
			lifetime = p.Window
		}
		r.LastSeen = v.lastSeen(st.expMs, lifetime)
		switch {
		case window:
			r.FirstSeen = r.ExpiresAt.Add(-p.Window)
		case p.Mode == ModeThrottle:
			r.DueAt = r.ExpiresAt.Add(-p.trailingLife)
		default:
			r.FirstSeen = r.ExpiresAt.Add(-lifetime)
			if p.Mode == ModeDebounce {
				r.DueAt = r.FirstSeen.Add(p.Window)
			}
		}
	case "hash":
		fields := st.fields
		if len(fields) == 0 {
			return Round{}, false, nil // expired just now
		}
		tok, _ := strconv.ParseUint(fields["t"], 10, 64)
		r.Token = Token(tok)
		r.Events, _ = strconv.Atoi(fields["n"])
		r.FirstSeen = msField(fields["f"])
		r.LastSeen = msField(fields["l"])
		r.DueAt = msField(fields["d"])
		r.Published = fields["p"] == "1"
		r.Items, _ = strconv.Atoi(fields["m"])
		if a, ok := fields["a"]; ok {
			r.Payload = json.RawMessage(a)
		}
	default:
		return Round{}, false, fmt.Errorf("key holds a %s, not a round", st.typ)
	}
	return r, true, nil
}

func msField(s string) time.Time {
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return msTime(ms)
}

// CancelResult is what CancelRound found.
type CancelResult string

// Cancel results.
const (
	// CancelCancelled: the round was pending and is gone; its job will not
	// run (a delivery of it is told the round is done).
	CancelCancelled CancelResult = "cancelled"
	// CancelAlreadyCancelled: the round had been cancelled before (a
	// repeated cancel); nothing was changed.
	CancelAlreadyCancelled CancelResult = "already_cancelled"
	// CancelOtherRound: another round of the key is pending; nothing was
	// changed (a cancel replayed after its round ended must not cancel the
	// next one).
	CancelOtherRound CancelResult = "other_round"
	// CancelStarted: the round's job has started (or finished); too late.
	CancelStarted CancelResult = "already_started"
	// CancelNotFound: no such round.
	CancelNotFound CancelResult = "not_found"
)

// doneCancelled is the done marker of a cancelled round (a finished one
// holds the version of the message that ran).
const doneCancelled = "cancelled"

// CancelRound cancels the round of key whose token is token, and only that
// one: fenced, so that a cancel replayed (a client's retry, an admin message
// redelivered) never cancels the round after it. The round is deleted and a
// done marker left for as long as the round would have lived, so that its
// job, if its schedule already fired or a reschedule lands late, starts
// nothing (ReleaseDone). The caller purges the round's messages
// (publisher.Cancel). It returns the round as it was (CancelCancelled) or
// the round pending instead (CancelOtherRound). This Coalescer's local
// joins are flushed first (within a second), so they are cancelled with
// the round. Events another process answered locally for the round and had
// not flushed yet are submitted again by that process when its flush finds
// the round gone (they open a new round), unless they were answered as
// dropped (throttled, duplicate).
func (c *Coalescer) CancelRound(ctx context.Context, jobType string, key RoundKey, token Token) (Round, CancelResult, error) {
	p, ok := c.policies[jobType]
	if !ok {
		return Round{}, "", fmt.Errorf("%w %q", ErrNoPolicy, jobType)
	}
	if token == 0 {
		return Round{}, "", fmt.Errorf("%w: cancel needs the round's token (16 hex digits, from its decision or Inspect)", ErrInvalidToken)
	}
	if c.local != nil && c.local.lockFlush(ctx, time.Second) {
		// This process's local joins go to Redis first, to be cancelled
		// with their round (unless a flush has held the lock for a
		// second: Redis may be gone).
		_, _ = c.flushLocked(ctx)
		c.local.unlock()
	}
	r, found, err := c.Inspect(ctx, jobType, key)
	if err != nil {
		return r, "", err
	}
	job := Job{Type: jobType, Key: key, Token: token, Mode: p.Mode, TTL: p.lifetime()}
	if found && r.Token == token {
		if p.Mode == ModeThrottle && !r.Window {
			job.DueAt = r.DueAt
		}
		op := "release"
		if token.isHashToken() {
			op = "cancel"
		}
		rel, _, err := c.releaseRound(ctx, job, op) // a cancel's doubt: the round stays cancelled on the primary
		if err != nil {
			return r, "", fmt.Errorf("%w: cancel %s %s: %w", ErrStoreUnavailable, jobType, key, err)
		}
		if rel.Result == ReleaseReleased {
			c.forget(jobType, key, token)
			keep := max(time.Until(r.ExpiresAt), doneRetention)
			if err := c.rdb.Set(ctx, c.doneKey(job), doneCancelled, keep).Err(); err != nil {
				return r, "", fmt.Errorf("%w: cancel %s %s: mark the round done: %w", ErrStoreUnavailable, jobType, key, err)
			}
			return r, CancelCancelled, nil
		}
		// Taken (or gone) meanwhile: look again below.
	}
	pipe := c.rdb.Pipeline()
	taken := pipe.Exists(ctx, c.takenKey(job))
	done := pipe.Get(ctx, c.doneKey(job))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return r, "", fmt.Errorf("%w: cancel %s %s: %w", ErrStoreUnavailable, jobType, key, err)
	}
	switch {
	case found && r.Token != token:
		return r, CancelOtherRound, nil
	case done.Val() == doneCancelled:
		return Round{Type: jobType, Key: key, Token: token}, CancelAlreadyCancelled, nil
	case taken.Val() > 0 || done.Val() != "":
		return Round{Type: jobType, Key: key, Token: token}, CancelStarted, nil
	}
	return Round{}, CancelNotFound, nil
}

// Cancel cancels whatever round (or throttle window) of key is pending now,
// as CancelRound does for its token, and returns it; found is false when
// nothing was pending. It is not fenced: repeated, it cancels the round
// pending then, which may be the next one. Prefer CancelRound with the token
// of the round meant.
func (c *Coalescer) Cancel(ctx context.Context, jobType string, key RoundKey) (Round, bool, error) {
	r, found, err := c.Inspect(ctx, jobType, key)
	if err != nil || !found {
		return r, found, err
	}
	r, res, err := c.CancelRound(ctx, jobType, key, r.Token)
	return r, res == CancelCancelled, err
}
