package debounce

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A store identity names the Redis a Coalescer reserves rounds in, so that
// a worker connected to another Redis never runs a job as if its round were
// missing (it would run with an empty summary, and the next event would
// join the round that already ran). The producer side writes it once under
// the prefix (EnsureStore: the daemon at start and on every reaper pass, a
// library Coalescer before its first publish) and stamps it on every job
// (Job.Store, the Coalesce-Store header); the worker side compares it with
// its own Redis's (CheckStore) before it closes the round.

// StoreKey is the key under the prefix that holds the store identity: JSON
// {"id", "created" (unix ms), "addr" (the Redis as its first writer saw it)}.
// It has no TTL.
const StoreKey = "store"

// Store is a Redis's identity.
type Store struct {
	ID      string `json:"id"`
	Created int64  `json:"created"` // unix ms
	Addr    string `json:"addr"`
}

// storeState caches this Coalescer's store identity.
type storeState struct {
	p          atomic.Pointer[Store]
	at         atomic.Int64 // unix ns of the last read
	failed     atomic.Int64 // unix ns of the last failed read: not retried for storeRetry
	refreshing atomic.Bool
}

const (
	// storeRetry spaces the reads of an identity Redis could not give:
	// during an outage a publish (fail open) must not wait for Redis each
	// time.
	storeRetry = 5 * time.Second
	// storeRefresh: the cached identity is read again in the background
	// this often, so a Redis that lost its data (and got a new identity)
	// stamps its new jobs with it soon.
	storeRefresh = 10 * time.Second
	// storeStaleness is how long before a job's round opened its Redis's
	// identity may have been written and the job still count as that
	// Redis's: its producer stamped the identity it had cached (read at
	// most storeRefresh before). A Redis that has had another identity for
	// longer is another Redis.
	storeStaleness = 3 * storeRefresh
)

// EnsureStore returns the store identity of the Coalescer's Redis, writing
// a new one if it has none (a new Redis, or one that lost its data).
func (c *Coalescer) EnsureStore(ctx context.Context) (Store, error) {
	fresh := Store{ID: newStoreID(), Created: c.now().UnixMilli(), Addr: redisAddr(c.rdb)}
	b, _ := json.Marshal(fresh)
	raw, err := storeIdentityScript.Run(ctx, c.rdb, []string{c.prefix + StoreKey}, string(b)).Text()
	if err != nil {
		return Store{}, fmt.Errorf("%w: store identity: %w", ErrStoreUnavailable, err)
	}
	var s Store
	if err := json.Unmarshal([]byte(raw), &s); err != nil || s.ID == "" {
		return Store{}, fmt.Errorf("%w: store identity at %s%s is not coalesce's: %q", ErrStoreUnavailable, c.prefix, StoreKey, raw)
	}
	c.store.p.Store(&s)
	c.store.at.Store(time.Now().UnixNano())
	return s, nil
}

// storeOf is the cached store identity, written now if there is none yet;
// nil if Redis cannot say (the job then goes without one: a worker runs it).
func (c *Coalescer) storeOf(ctx context.Context) *Store {
	if s := c.store.p.Load(); s != nil {
		if time.Since(time.Unix(0, c.store.at.Load())) <= storeRefresh {
			return s
		}
		// Read again before stamping, not in the background: a producer
		// idle since before a data loss would otherwise stamp the lost
		// identity on its next job, which no worker would then run. One
		// publish at a time pays for it (the others stamp the cached one,
		// at most storeRefresh old), and not while Redis is failing.
		if !c.store.refreshing.CompareAndSwap(false, true) ||
			time.Since(time.Unix(0, c.store.failed.Load())) < storeRetry {
			return s
		}
		defer c.store.refreshing.Store(false)
		if fresh, err := c.EnsureStore(ctx); err == nil {
			return &fresh
		}
		c.store.failed.Store(time.Now().UnixNano())
		return s
	}
	if time.Since(time.Unix(0, c.store.failed.Load())) < storeRetry {
		return nil
	}
	if _, err := c.EnsureStore(ctx); err != nil {
		c.store.failed.Store(time.Now().UnixNano())
		return nil
	}
	return c.store.p.Load()
}

// stamp puts the store identity, and an exclusive policy's lease, on a job
// about to be published.
func (c *Coalescer) stamp(ctx context.Context, job *Job) {
	if lease, ok := c.Lease(job.Type); ok && job.Lease == 0 {
		job.Lease = lease
	}
	if job.Store != "" {
		return // republished as it came (a reschedule, a repair)
	}
	if s := c.storeOf(ctx); s != nil {
		job.Store, job.StoreAddr = s.ID, s.Addr
	}
}

// StoreCheck is what CheckStore found.
type StoreCheck struct {
	// OK: run the job (same store, a job without one, or a store created
	// after the job opened: its Redis lost its data; Note says so).
	OK   bool
	Note string
	// Mine is this Coalescer's Redis's identity (zero if it has none).
	Mine Store
}

// ErrOtherStore is CheckStore's refusal: the job was reserved in another
// Redis than this Coalescer's, or this Redis has no identity.
var ErrOtherStore = errors.New("the job was reserved in another Redis")

// CheckStore compares the store a job was reserved in with this
// Coalescer's Redis: a worker runs the job only if they agree. A store
// created after the job's round opened (or up to storeStaleness before: its
// producer may have stamped the identity it had cached) is taken as the
// same Redis after a data loss (the job runs, its round missing, as
// at-least-once asks); a store that had another id for longer is another
// Redis; none at all is a Redis no producer has used, unless it is at the
// address the job's producer reached (that Redis after a data loss: its
// identity is written again and the job runs).
func (c *Coalescer) CheckStore(ctx context.Context, job Job) (StoreCheck, error) {
	if job.Store == "" || job.Token == 0 {
		// No store said, or a job published without a reservation (fail
		// open): it has no round to close, in any Redis, and runs whether
		// Redis answers or not.
		return StoreCheck{OK: true}, nil
	}
	// The common case costs no Redis call: the identity this Coalescer
	// read (or wrote) within storeRefresh is the job's.
	if s := c.store.p.Load(); s != nil && s.ID == job.Store && time.Since(time.Unix(0, c.store.at.Load())) <= storeRefresh {
		return StoreCheck{OK: true, Mine: *s}, nil
	}
	raw, err := c.rdb.Get(ctx, c.prefix+StoreKey).Result()
	if errors.Is(err, redis.Nil) {
		// No identity: a Redis no producer has used, or the job's own after
		// a data loss, before any producer wrote it again. The address
		// tells them apart: the same one as the job's producer reached is
		// that Redis, which gets its identity again here.
		if job.StoreAddr != "" && job.StoreAddr == redisAddr(c.rdb) {
			if fresh, err := c.EnsureStore(ctx); err == nil {
				return StoreCheck{OK: true, Mine: fresh, Note: fmt.Sprintf("Redis at %s had lost its data, store identity %s with it; it is store %s now, and the job runs without its round", job.StoreAddr, job.Store, fresh.ID)}, nil
			}
		}
		return StoreCheck{}, fmt.Errorf("%w: this worker's Redis (%s) has no store identity under %q, the job's store %s is at %s: "+
			"point the worker at the daemon's Redis (--redis, --config)", ErrOtherStore, redisAddr(c.rdb), c.prefix, job.Store, job.StoreAddr)
	}
	if err != nil {
		return StoreCheck{}, fmt.Errorf("%w: store identity: %w", ErrStoreUnavailable, err)
	}
	var mine Store
	if err := json.Unmarshal([]byte(raw), &mine); err != nil {
		return StoreCheck{}, fmt.Errorf("%w: store identity at %s%s is not coalesce's", ErrOtherStore, c.prefix, StoreKey)
	}
	c.store.p.Store(&mine)
	c.store.at.Store(time.Now().UnixNano())
	switch {
	case mine.ID == job.Store:
		return StoreCheck{OK: true, Mine: mine}, nil
	case mine.Created > job.OpenedAt.Add(-storeStaleness).UnixMilli():
		return StoreCheck{OK: true, Mine: mine, Note: fmt.Sprintf("the job's store %s was replaced by %s at %s after its round opened: Redis lost its data; the job runs without its round",
			job.Store, mine.ID, time.UnixMilli(mine.Created).UTC().Format(time.RFC3339))}, nil
	}
	return StoreCheck{Mine: mine}, fmt.Errorf("%w: the job's store is %s at %s; this worker's Redis (%s) is store %s since %s: "+
		"point the worker at the daemon's Redis (--redis, --config)", ErrOtherStore, job.Store, job.StoreAddr, redisAddr(c.rdb), mine.ID,
		time.UnixMilli(mine.Created).UTC().Format(time.RFC3339))
}

// redisAddr names a client's server(s) for messages.
func redisAddr(rdb redis.UniversalClient) string {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	case *redis.Ring:
		return "a ring"
	}
	return fmt.Sprintf("%T", rdb)
}

func newStoreID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
