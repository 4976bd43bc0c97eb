package debounce

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// RoundFate is what Redis still remembers of a round that is no longer
// pending: its job's start (the copy the take kept, until Finish or
// takenRetention) and its finish or cancel (the done marker, doneRetention).
// Zero fields: not known (never, or forgotten).
type RoundFate struct {
	StartedAt  time.Time `json:"started_at,omitzero"`  // its job's first start
	Starts     int       `json:"starts,omitempty"`     // deliveries that reached Start
	FinishedAt time.Time `json:"finished_at,omitzero"` // its job finished (succeeded or dead-lettered)
	Cancelled  bool      `json:"cancelled,omitempty"`
}

// Fates reads the fates of rounds of one job type (key and token each) in
// one pipelined round trip: for a dashboard's timeline, not the decision
// path.
func (c *Coalescer) Fates(ctx context.Context, jobType string, keys []RoundKey, tokens []Token) ([]RoundFate, error) {
	p, ok := c.policies[jobType]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrNoPolicy, jobType)
	}
	type read struct {
		takenExp, doneExp *redis.DurationCmd
		starts, done      *redis.StringCmd
	}
	reads := make([]read, len(keys))
	pipe := c.rdb.Pipeline()
	for i, k := range keys {
		job := Job{Type: jobType, Key: k, Token: tokens[i], Mode: p.Mode}
		tk, dk := c.takenKey(job), c.doneKey(job)
		reads[i] = read{takenExp: pipe.PExpireTime(ctx, tk), starts: pipe.HGet(ctx, tk, "s"),
			doneExp: pipe.PExpireTime(ctx, dk), done: pipe.Get(ctx, dk)}
	}
	if len(keys) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !isWrongType(err) {
			return nil, fmt.Errorf("%w: fates of %d rounds of %s: %w", ErrStoreUnavailable, len(keys), jobType, err)
		}
	}
	out := make([]RoundFate, len(keys))
	for i, rd := range reads {
		if exp := rd.takenExp.Val(); exp > 0 {
			out[i].StartedAt = time.UnixMilli(exp.Milliseconds()).Add(-takenRetention)
			out[i].Starts, _ = rd.starts.Int()
		}
		switch done := rd.done.Val(); {
		case done == doneCancelled:
			out[i].Cancelled = true
		case done != "":
			if exp := rd.doneExp.Val(); exp > 0 {
				out[i].FinishedAt = time.UnixMilli(exp.Milliseconds()).Add(-doneRetention)
			}
		}
	}
	return out, nil
}
