package debounce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// InspectMany reads the pending rounds of many keys of one job type in one
// pipelined round trip, as Inspect reads one (changing nothing): rounds[i] is keys[i]'s round
// when found[i]. It is for listings (a dashboard's page of rounds), not for
// the decision path. The keys of one call may live on different Cluster
// nodes: the client splits the pipeline.
func (c *Coalescer) InspectMany(ctx context.Context, jobType string, keys []RoundKey) (rounds []Round, found []bool, err error) {
	p, ok := c.policies[jobType]
	if !ok {
		return nil, nil, fmt.Errorf("%w %q", ErrNoPolicy, jobType)
	}
	rounds, found = make([]Round, len(keys)), make([]bool, len(keys))
	if len(keys) == 0 {
		return rounds, found, nil
	}
	// As Inspect: nothing sent, this process's local joins not flushed yet
	// counted in (under the flush lock, so none is in flight).
	local := c.local != nil && c.local.lockFlush(ctx, time.Second)
	if local {
		defer c.local.unlock()
	}
	type read struct {
		typ    *redis.StatusCmd
		exp    *redis.DurationCmd
		value  *redis.StringCmd
		fields *redis.MapStringStringCmd
		window bool
	}
	reads := make([][]read, len(keys))
	pipe := c.rdb.Pipeline()
	for i, key := range keys {
		for j, k := range c.keys(p, key) {
			// GET of a hash (HGETALL of a string) fails WRONGTYPE in
			// the pipeline; TYPE says which of the two answers counts.
			reads[i] = append(reads[i], read{typ: pipe.Type(ctx, k), exp: pipe.PExpireTime(ctx, k),
				value: pipe.Get(ctx, k), fields: pipe.HGetAll(ctx, k), window: j == 1})
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !isWrongType(err) {
		return nil, nil, fmt.Errorf("%w: inspect %d rounds of %s: %w", ErrStoreUnavailable, len(keys), jobType, err)
	}
	latest := map[int]*redis.StringCmd{} // payload keys of last rounds found (lastkey.go)
	var lpipe redis.Pipeliner
	for i, key := range keys {
		for j, rd := range reads[i] {
			if err := rd.typ.Err(); err != nil {
				return nil, nil, fmt.Errorf("%w: inspect %s %s: %w", ErrStoreUnavailable, jobType, key, err)
			}
			st := storedRound{typ: rd.typ.Val(), expMs: int64(rd.exp.Val() / time.Millisecond)}
			switch st.typ {
			case "string":
				st.value, _ = rd.value.Uint64()
			case "hash":
				st.fields = rd.fields.Val()
			}
			r, ok, derr := p.decodeRound(key, rd.window, st)
			if derr != nil {
				return nil, nil, fmt.Errorf("%w: inspect %s %s: %w", ErrStoreUnavailable, jobType, key, derr)
			}
			if ok {
				if local {
					r.Events += c.localPending(p, key, r.Token)
				}
				rounds[i], found[i] = r, true
				if r.Payload != nil {
					if lpipe == nil {
						lpipe = c.rdb.Pipeline()
					}
					latest[i] = lpipe.Get(ctx, payloadKey(c.keys(p, key)[j], r.Token))
				}
				break
			}
		}
	}
	if lpipe != nil {
		_, _ = lpipe.Exec(ctx) // a payload key missing keeps the hash's args
		for i, cmd := range latest {
			if a, err := cmd.Bytes(); err == nil {
				rounds[i].Payload = json.RawMessage(a)
			}
		}
	}
	return rounds, found, nil
}
