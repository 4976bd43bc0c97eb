package debounce

import (
	"context"
	"fmt"
	"time"

	"github.com/coalesce-io/coalesce/internal/fence"
)

// Exclusive keys (Policy.Exclusive): at most one job of a key runs at a
// time, across every worker and process. A worker takes the key's lease
// (TakeKey) before it closes the job's round, refreshes it while the job
// runs (RefreshKey, well within Policy.Lease) and gives it up when the job
// ends (ReleaseKey). A delivery that finds the key busy does not close the
// round: its worker sends it back for a little later, and its waits are
// counted so they are not attempts. Events during a run open the next round
// as always (the running job's round was closed at its start); it is that
// round's job that waits, taking in events until it starts.
//
// The lease is a Redis key beside the round's ("e" after the round key's
// tag), holding the owner: a random id per delivery. A crashed worker's
// lease lapses after Policy.Lease, so a key is never blocked longer.

// KeyLease is what TakeKey found.
type KeyLease struct {
	Taken bool
	// Waits: taken, how many deliveries of this job found the key busy
	// before; Waited, since the first of them (0 without).
	Waits  int
	Waited time.Duration
	// Left: busy, how long the holder's lease runs without a refresh.
	Left time.Duration
}

// Lease returns the lease of jobType's exclusive keys, and whether its keys
// are exclusive.
func (c *Coalescer) Lease(jobType string) (time.Duration, bool) {
	p, ok := c.policies[jobType]
	if !ok || !p.Exclusive {
		return 0, false
	}
	return p.Lease, true
}

// LeaseOf is the lease of job's key, and whether its key is exclusive: by
// the job's own word (Job.Lease, stamped by its producer), else by this
// Coalescer's policy. A worker without the policy still honours it.
func (c *Coalescer) LeaseOf(job Job) (time.Duration, bool) {
	if job.Lease > 0 {
		return job.Lease, true
	}
	return c.Lease(job.Type)
}

func (c *Coalescer) leaseKey(job Job) string {
	return redisKey(c.prefix, c.mixOf(job.Type), job.Key, "e")
}

// TakeKey takes the lease of job's key for owner (one delivery's id), or
// counts this delivery's wait when another owner holds it. The waits are
// counted per job identity (Job.ID: a round's token, a bypassed job's
// Bypass), so KeyLease.Waits are this job's own deliveries that only
// waited; a bypassed job without a Bypass shares one count with the
// key's other such jobs.
func (c *Coalescer) TakeKey(ctx context.Context, job Job, owner string) (KeyLease, error) {
	return c.TakeKeyFor(ctx, job, "", owner)
}

// TakeKeyFor is TakeKey for one run of a job among several with the same
// identity (a replay of its dead letter: run is the dead letter's
// sequence): run, when not empty, counts that run's waits apart from the
// job's other deliveries. Replays of one dead letter share a count.
func (c *Coalescer) TakeKeyFor(ctx context.Context, job Job, run, owner string) (KeyLease, error) {
	lease, ok := c.LeaseOf(job)
	if !ok {
		return KeyLease{}, fmt.Errorf("%w: job type %q is not exclusive", ErrInvalidPolicy, job.Type)
	}
	waits := redisKey(c.prefix, c.mixOf(job.Type), job.Key, waitsSuffix(job, run))
	keep := max(job.TTL, time.Hour)
	now := c.now()
	// A lease a failover could lose would let the key's next job start
	// beside this one: under fail: closed it is taken only where a replica
	// confirms it (replication.go), as the round's take is.
	p, known := c.policies[job.Type]
	strict := known && p.Fail == FailClosed
	if strict {
		if err := c.noReplica(ctx, c.leaseKey(job)); err != nil {
			return KeyLease{}, fmt.Errorf("%w: take the key of %s %s: %w", ErrStoreUnavailable, job.Type, job.Key, err)
		}
	}
	cmd, doubt := c.evalDoubt(ctx, leaseTakeScript, []string{c.leaseKey(job), waits}, owner, lease.Milliseconds(), keep.Milliseconds(), now.UnixMilli())
	r, err := cmd.Int64Slice()
	if err != nil || len(r) < 2 {
		return KeyLease{}, fmt.Errorf("%w: take the key of %s %s: %v", ErrStoreUnavailable, job.Type, job.Key, err)
	}
	if doubt != nil && strict && r[0] != 0 {
		_, _ = fence.Release(ctx, c.rdb, c.leaseKey(job), owner) // best effort: else it lapses within the lease
		return KeyLease{}, fmt.Errorf("%w: take the key of %s %s: %w", ErrStoreUnavailable, job.Type, job.Key, doubt)
	}
	if r[0] == 0 {
		return KeyLease{Left: time.Duration(max(r[1], 0)) * time.Millisecond}, nil
	}
	kl := KeyLease{Taken: true, Waits: int(r[1])}
	if len(r) > 2 && r[2] > 0 {
		kl.Waited = max(now.Sub(time.UnixMilli(r[2])), 0)
	}
	return kl, nil
}

// waitsSuffix names a job's count of waits beside its key: "ew" and its
// token, or its Bypass (whose "_" no token has), and "~" and run.
func waitsSuffix(job Job, run string) string {
	id := job.Token.String()
	if job.Token == 0 {
		id = job.Bypass
	}
	if run != "" {
		id += "~" + run
	}
	return "ew" + id
}

// RefreshKey extends owner's lease of job's key by the policy's lease. It
// reports false when owner no longer holds it (it lapsed: another job of
// the key may be running).
func (c *Coalescer) RefreshKey(ctx context.Context, job Job, owner string) (bool, error) {
	lease, ok := c.LeaseOf(job)
	if !ok {
		return false, fmt.Errorf("%w: job type %q is not exclusive", ErrInvalidPolicy, job.Type)
	}
	held, err := fence.Refresh(ctx, c.rdb, c.leaseKey(job), owner, lease)
	if err != nil {
		return false, fmt.Errorf("%w: refresh the key of %s %s: %w", ErrStoreUnavailable, job.Type, job.Key, err)
	}
	return held, nil
}

// ReleaseKey gives up owner's lease of job's key, so the next job of the
// key may start; false when owner did not hold it.
func (c *Coalescer) ReleaseKey(ctx context.Context, job Job, owner string) (bool, error) {
	if _, ok := c.LeaseOf(job); !ok {
		return false, fmt.Errorf("%w: job type %q is not exclusive", ErrInvalidPolicy, job.Type)
	}
	held, err := fence.Release(ctx, c.rdb, c.leaseKey(job), owner)
	if err != nil {
		return false, fmt.Errorf("%w: release the key of %s %s: %w", ErrStoreUnavailable, job.Type, job.Key, err)
	}
	return held, nil
}

// NotRun says that the delivery of job that called Start (after TakeKeyFor
// with run) does not run it after all, for no fault of the job — its key's
// lease lapsed while Start waited on a slow Redis — so that the delivery
// is no attempt: a round's job has its start taken back, a bypassed job's
// delivery is counted as a wait for its key (KeyLease.Waits). Without it,
// a job delivered while Redis stalls again and again would use up its
// attempts and be dead-lettered without ever failing.
func (c *Coalescer) NotRun(ctx context.Context, job Job, run string) error {
	if job.Token != 0 {
		if err := uncountStartScript.Run(ctx, c.rdb, []string{c.takenKey(job)}).Err(); err != nil {
			return fmt.Errorf("%w: take back the start of %s %s: %w", ErrStoreUnavailable, job.Type, job.Key, err)
		}
		return nil
	}
	// The count lease_take.lua keeps for a busy delivery: n, the first
	// wait's time, kept as long.
	waits := redisKey(c.prefix, c.mixOf(job.Type), job.Key, waitsSuffix(job, run))
	pipe := c.rdb.TxPipeline()
	pipe.HIncrBy(ctx, waits, "n", 1)
	pipe.HSetNX(ctx, waits, "since", c.now().UnixMilli())
	pipe.PExpire(ctx, waits, max(job.TTL, time.Hour))
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("%w: count a wait of %s %s: %w", ErrStoreUnavailable, job.Type, job.Key, err)
	}
	return nil
}
