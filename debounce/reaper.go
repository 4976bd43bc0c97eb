package debounce

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/reap.lua
	reapLua    string
	reapScript = redis.NewScript(reapLua)
)

// Reaper releases rounds that were reserved and never published: their
// producer died between the two steps, and no event has joined them since
// (an event that joins an unpublished round publishes it itself, so every
// accepted event is in a published round). Left alone such a round would
// live until its TTL; the reaper releases it after it stayed unpublished and
// unchanged for one whole period between two passes. It knows nothing of
// policies: it compares what it saw.
type Reaper struct {
	c    *Coalescer
	seen map[string]string // key -> what the previous pass saw
}

// ReapReport counts one pass.
type ReapReport struct {
	Scanned    int // round keys looked at
	Candidates int // unpublished now, remembered for the next pass
	Released   int // unpublished and unchanged since the previous pass: released
}

// NewReaper returns a reaper for the coalescer's keys. Call Pass every period
// (the daemon uses a minute): a round is released on the second pass that
// finds it unpublished and unchanged. Not safe for concurrent Pass calls;
// running reapers in several replicas is safe (releases are compare-and-delete).
func (c *Coalescer) NewReaper() *Reaper { return &Reaper{c: c, seen: map[string]string{}} }

// Pass scans the rounds once.
func (r *Reaper) Pass(ctx context.Context) (ReapReport, error) {
	var (
		mu   sync.Mutex // ForEachMaster scans the masters concurrently
		rep  ReapReport
		next = map[string]string{}
	)
	scan := func(ctx context.Context, client redis.Cmdable) error {
		iter := client.Scan(ctx, 0, r.c.prefix+"{*", 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			if !isRoundKey(r.c.prefix, key) {
				continue
			}
			mu.Lock()
			rep.Scanned++
			mu.Unlock()
			state, unpublished, err := r.state(ctx, key)
			if err != nil {
				return err
			}
			if !unpublished {
				continue
			}
			if prev, ok := r.seen[key]; ok && prev == state {
				value, count, _ := strings.Cut(state, "|")
				n, err := reapScript.Run(ctx, r.c.rdb, []string{key}, value, count).Int()
				if err != nil {
					return err
				}
				mu.Lock()
				rep.Released += n
				mu.Unlock()
				continue
			}
			mu.Lock()
			next[key] = state
			rep.Candidates++
			mu.Unlock()
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
	return rep, nil
}

// isRoundKey: prefix "{" digest "}" with no suffix, or the throttle trailing
// round's "t"; not the taken copies ("x…", "tx…") Finish cleans up.
func isRoundKey(prefix, key string) bool {
	if len(key) != len(prefix)+digestLen+2 && len(key) != len(prefix)+digestLen+3 {
		return false
	}
	suffix := key[len(prefix)+digestLen+2:]
	return key[len(prefix)+digestLen+1] == '}' && (suffix == "" || suffix == "t")
}

// state reads a round: its identity as the reaper compares it, and whether
// it is unpublished.
func (r *Reaper) state(ctx context.Context, key string) (string, bool, error) {
	typ, err := r.c.rdb.Type(ctx, key).Result()
	if err != nil {
		return "", false, err
	}
	switch typ {
	case "string":
		v, err := r.c.rdb.Get(ctx, key).Uint64()
		if err != nil {
			return "", false, nil // gone meanwhile
		}
		return fmt.Sprint(v) + "|", !packed(v).published(), nil
	case "hash":
		f, err := r.c.rdb.HMGet(ctx, key, "t", "n", "p").Result()
		if err != nil || len(f) != 3 || f[0] == nil {
			return "", false, nil
		}
		return fmt.Sprint(f[0]) + "|" + fmt.Sprint(f[1]), fmt.Sprint(f[2]) == "0", nil
	default:
		return "", false, nil
	}
}
