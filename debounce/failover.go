package debounce

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// After a failover the new primary holds what its replica had: without
// replication acks it may lack the last writes (events accepted into
// rounds, rounds opened) and, worse, it may hold as pending rounds whose
// jobs already started on the old primary (their takes were lost). Events
// then join such a round, and wait for a job that already ran. A
// FailoverWatch notices a new primary within one Check; Reaper.Reconcile
// then looks up at once the rounds past due and publishes again the job of
// every one whose message the stream no longer holds.

// Primary is one Redis primary the Coalescer writes to (one per Cluster
// shard), as INFO describes it.
type Primary struct {
	Addr     string // as the client reaches it ("" for a Sentinel or single-node client)
	RunID    string // changes when the process restarts
	ReplID   string // changes when a replica is promoted (or a primary restarts)
	Replicas int    // connected replicas
}

// Primaries reads INFO server and replication of every primary.
func (c *Coalescer) Primaries(ctx context.Context) ([]Primary, error) {
	var mu sync.Mutex
	var out []Primary
	read := func(ctx context.Context, cl *redis.Client, addr string) error {
		raw, err := cl.Info(ctx, "server", "replication").Result()
		if err != nil {
			return err
		}
		p := Primary{Addr: addr}
		p.RunID, _ = infoField(raw, "run_id")
		p.ReplID, _ = infoField(raw, "master_replid")
		if v, ok := infoField(raw, "connected_slaves"); ok {
			p.Replicas, _ = strconv.Atoi(v)
		}
		mu.Lock()
		out = append(out, p)
		mu.Unlock()
		return nil
	}
	var err error
	switch cl := c.rdb.(type) {
	case *redis.ClusterClient:
		err = cl.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return read(ctx, m, m.Options().Addr) })
	case *redis.Client:
		err = read(ctx, cl, "")
	default:
		return nil, nil // a Ring, or another client: nothing to tell
	}
	if err != nil {
		return nil, fmt.Errorf("%w: read the primaries: %w", ErrStoreUnavailable, err)
	}
	slices.SortFunc(out, func(a, b Primary) int { return strings.Compare(a.Addr, b.Addr) })
	return out, nil
}

// FailoverWatch tells when the Coalescer's primaries change: a failover (a
// replica promoted), a primary restarted, a Cluster shard moved. Call Check
// every second or so (the daemon and `coalesce work` do). Not safe for
// concurrent use.
type FailoverWatch struct {
	c    *Coalescer
	last map[string]Primary // by address
}

// NewFailoverWatch returns a watch; its first Check records the primaries.
func (c *Coalescer) NewFailoverWatch() *FailoverWatch { return &FailoverWatch{c: c} }

// Check reads the primaries and reports whether they differ from the last
// Check's, with a description of the change. A failed read changes nothing
// (it is returned; the next Check compares with the last good one).
func (w *FailoverWatch) Check(ctx context.Context) (changed bool, what string, err error) {
	ps, err := w.c.Primaries(ctx)
	if err != nil || ps == nil {
		return false, "", err
	}
	now := make(map[string]Primary, len(ps))
	for _, p := range ps {
		now[p.Addr] = p
	}
	prev := w.last
	w.last = now
	if prev == nil {
		return false, "", nil
	}
	var changes []string
	for _, addr := range slices.Sorted(maps.Keys(now)) {
		p := now[addr]
		old, ok := prev[addr]
		name := cmp.Or(addr, "the primary")
		switch {
		case !ok:
			changes = append(changes, fmt.Sprintf("%s is a primary now (run id %.8s)", name, p.RunID))
		case old.RunID != p.RunID:
			changes = append(changes, fmt.Sprintf("%s is another process: run id %.8s, was %.8s (a failover or a restart)", name, p.RunID, old.RunID))
		case old.ReplID != p.ReplID:
			changes = append(changes, fmt.Sprintf("%s has a new replication id %.8s, was %.8s (promoted)", name, p.ReplID, old.ReplID))
		}
	}
	for addr := range prev {
		if _, ok := now[addr]; !ok {
			changes = append(changes, fmt.Sprintf("%s is no longer a primary", addr))
		}
	}
	if len(changes) == 0 {
		return false, "", nil
	}
	w.c.overdue.reset() // identities noted on the old primary may be missing
	if w.c.repl != nil {
		w.c.repl.check(ctx) // the new primary's replicas, now
	}
	return true, strings.Join(changes, "; "), nil
}

// reconcileAfter is how long past its due time a round counts as overdue
// in a Reconcile pass: longer than a schedule fires late under load (about
// 0.5 s) plus the due slack.
const reconcileAfter = 2 * time.Second

// Reconcile is the pass to run when a FailoverWatch saw a new primary: like
// Pass, but rounds reconcileAfter past their due time (not RepairAfter) are
// looked up in the stream now, whatever earlier passes found, and the job
// of each round whose message is gone is published again (the round
// survived on the new primary, its job did not: it was lost, or it ran and
// its take was lost with the old primary). Run it again a few seconds
// later: rounds that were just due at the failover become overdue then.
func (r *Reaper) Reconcile(ctx context.Context) (ReapReport, error) {
	saved := r.RepairAfter
	r.RepairAfter = min(saved, reconcileAfter)
	defer func() { r.RepairAfter = saved }()
	clear(r.present) // a message found before the failover may be gone since
	return r.Pass(ctx)
}
