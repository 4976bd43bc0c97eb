package debounce

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Replication acks: Redis replicates asynchronously, so a write the primary
// answered can be missing on the replica that a failover promotes. With
// acks on, every script call that decides an event (open, join, flush) or
// takes a round at its job's start is followed, in the same pipeline and so
// on the same connection, by WAIT numreplicas timeout: the answer then
// means "on the primary and on Acks replicas", and a failover (which
// promotes the most up-to-date replica) keeps it. A take replicated before
// the handler runs can never come back as a pending round after a failover,
// so a round's job never runs twice because of one.

// Replication says whether decisions wait for replicas (Config.Replication).
type Replication struct {
	// Acks is how many replicas must confirm a decision's writes before
	// Submit answers, and a round's take before its job runs.
	// ReplicationAuto (0, the default): 1 when the primary (each Cluster
	// shard's primary) reports a connected replica in INFO replication,
	// none when it has none, checked at the first call and every
	// ReplicationCheckEvery; ReplicationOff: never wait; N > 0: always wait
	// for N.
	Acks int
	// Timeout bounds each wait (default DefaultReplicationTimeout). A wait
	// that ends with fewer confirmations is a doubt: see ErrNotReplicated.
	// It must stay below the client's ReadTimeout (go-redis: 3 s).
	Timeout time.Duration
}

// Replication settings.
const (
	ReplicationAuto           = 0
	ReplicationOff            = -1
	DefaultReplicationTimeout = 500 * time.Millisecond
	// ReplicationCheckEvery is how often the auto setting reads again how
	// many replicas each primary has.
	ReplicationCheckEvery = 5 * time.Second
	// maxReplicationTimeout keeps a wait below go-redis's default read
	// timeout (3 s), which bounds a pipeline's replies.
	maxReplicationTimeout = 2 * time.Second
)

// ErrNotReplicated: the primary applied the event's decision (or a round's
// take), but fewer replicas than Replication.Acks confirmed it within
// Replication.Timeout. The write is there unless the primary fails over
// before its replicas catch up. Under fail: closed Submit returns it (with
// the Decision): the event may be in its round, and sending it again may
// count it twice (an accumulated item or a payload last is not doubled);
// under fail: open the decision stands and the doubt is counted
// (Hooks.Replication). Start returns it (wrapping ErrStoreUnavailable too)
// under fail: closed, so the job does not run before its take is
// replicated; its delivery comes again.
var ErrNotReplicated = errors.New("debounce: not confirmed by the replicas")

// ReplicationError is a doubt: what the wait found.
type ReplicationError struct {
	Addr string // the primary
	Want int    // replicas asked for
	Got  int    // replicas that confirmed in time
	Err  error  // the wait's own error, if it failed
}

func (e *ReplicationError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: waiting for %d replica(s) of %s: %v", ErrNotReplicated, e.Want, e.Addr, e.Err)
	}
	return fmt.Sprintf("%s: %d of %d replica(s) of %s confirmed in time", ErrNotReplicated, e.Got, e.Want, e.Addr)
}

// Is makes a ReplicationError match ErrNotReplicated.
func (e *ReplicationError) Is(target error) bool { return target == ErrNotReplicated }

func (e *ReplicationError) Unwrap() error { return e.Err }

// replState is a Coalescer's replication setting and what it found.
type replState struct {
	fixed   int // Acks > 0: wait for this many; 0: auto
	timeout time.Duration
	rdb     redis.UniversalClient

	// acks per primary address, for auto ("" for a client with one
	// primary); read with ackFor.
	acks     atomic.Pointer[map[string]int]
	checked  atomic.Int64 // unix ns of the last check (auto)
	checking atomic.Bool
	mu       sync.Mutex // serialises the first check
	log      *slog.Logger
}

func newReplState(cfg Replication, rdb redis.UniversalClient, log *slog.Logger) (*replState, error) {
	switch {
	case cfg.Acks < ReplicationOff:
		return nil, fmt.Errorf("%w: Config.Replication.Acks %d: use -1 (off), 0 (auto) or a number of replicas", ErrInvalidConfig, cfg.Acks)
	case cfg.Timeout < 0 || cfg.Timeout > maxReplicationTimeout:
		return nil, fmt.Errorf("%w: Config.Replication.Timeout %v: must be 0 (the default, %v) up to %v", ErrInvalidConfig, cfg.Timeout, DefaultReplicationTimeout, maxReplicationTimeout)
	case cfg.Acks == ReplicationOff:
		return nil, nil
	}
	if _, ring := rdb.(*redis.Ring); ring {
		if cfg.Acks > 0 {
			return nil, fmt.Errorf("%w: Config.Replication.Acks %d: a Ring client has no primaries to wait on; use a single node, Sentinel or Cluster client, or Acks -1", ErrInvalidConfig, cfg.Acks)
		}
		return nil, nil
	}
	rs := &replState{fixed: max(cfg.Acks, 0), timeout: cfg.Timeout, rdb: rdb, log: log}
	if rs.timeout == 0 {
		rs.timeout = DefaultReplicationTimeout
	}
	if rs.fixed > 0 {
		m := map[string]int{"*": rs.fixed}
		rs.acks.Store(&m)
	}
	return rs, nil
}

// active reports whether any primary needs acks now. With auto it reads the
// primaries' replicas at the first call and every ReplicationCheckEvery (in
// the background after the first).
func (rs *replState) active(ctx context.Context) bool {
	if rs == nil {
		return false
	}
	if rs.fixed > 0 {
		return true
	}
	m := rs.acks.Load()
	if m == nil {
		rs.mu.Lock()
		if rs.acks.Load() == nil {
			rs.check(ctx)
		}
		rs.mu.Unlock()
		m = rs.acks.Load()
	} else if time.Since(time.Unix(0, rs.checked.Load())) > ReplicationCheckEvery && rs.checking.CompareAndSwap(false, true) {
		go func() {
			defer rs.checking.Store(false)
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			rs.check(cctx)
		}()
	}
	for _, n := range *m {
		if n > 0 {
			return true
		}
	}
	return false
}

// check reads how many replicas each primary has (auto). On failure the
// previous answer stays (none at first: an unreachable Redis fails the
// decision anyway).
func (rs *replState) check(ctx context.Context) {
	defer rs.checked.Store(time.Now().UnixNano())
	m := map[string]int{}
	var mu sync.Mutex
	read := func(ctx context.Context, c *redis.Client) error {
		raw, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		n := 0
		if v, ok := infoField(raw, "connected_slaves"); ok {
			n, _ = strconv.Atoi(v)
		}
		mu.Lock()
		m[c.Options().Addr] = min(n, 1)
		mu.Unlock()
		return nil
	}
	var err error
	switch c := rs.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, read)
	case *redis.Client:
		err = read(ctx, c)
		if err == nil {
			m = map[string]int{"*": m[c.Options().Addr]}
		}
	default:
		return
	}
	prev := rs.acks.Load()
	if err != nil && prev != nil {
		return
	}
	rs.acks.Store(&m)
	if prev == nil {
		return
	}
	for addr, n := range m {
		if was, ok := (*prev)[addr]; ok && was != n {
			name := cmp.Or(strings.Trim(addr, "*"), "the primary")
			if n == 0 {
				rs.log.Warn("redis: "+name+" has no replica any more: decisions are no longer confirmed by a replica (a failover now loses what it has not replicated)", "addr", addr)
			} else {
				rs.log.Info("redis: "+name+" has a replica again: decisions wait for it", "addr", addr)
			}
		}
	}
}

// recheck reads the replicas again at once (at most every recheckEvery),
// after a wait fell short in auto mode: a primary whose replica went away
// (or a replica just promoted, with none of its own yet) needs none, and its
// decisions are not doubts.
func (rs *replState) recheck(ctx context.Context) {
	if rs.fixed > 0 || time.Since(time.Unix(0, rs.checked.Load())) < recheckEvery {
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if time.Since(time.Unix(0, rs.checked.Load())) >= recheckEvery {
		rs.check(ctx)
	}
}

// recheckEvery spaces the checks a short wait triggers.
const recheckEvery = 250 * time.Millisecond

// ackFor is how many replicas the primary at addr must confirm.
func (rs *replState) ackFor(addr string) int {
	m := rs.acks.Load()
	if m == nil {
		return 0
	}
	if n, ok := (*m)["*"]; ok {
		return n
	}
	if n, ok := (*m)[addr]; ok {
		return n
	}
	return 1 // a primary the last check did not see (a failover since): wait
}

// infoField reads one field of an INFO reply.
func infoField(raw, name string) (string, bool) {
	for line := range strings.SplitSeq(raw, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v, true
		}
	}
	return "", false
}

// runScripts sends script calls in pipelines; with acks on, grouped by
// primary and each pipeline ending in WAIT, whose answer sets every
// executed call's doubt when it falls short. extra adds commands to the
// pipeline (without acks) or sends them after (with acks: they need none).
func (c *Coalescer) runScripts(ctx context.Context, calls []*scriptCall, extra func(redis.Pipeliner)) {
	if !c.repl.active(ctx) {
		evalPipelined(ctx, c.rdb, calls, extra, nil)
		return
	}
	if extra != nil {
		defer func() {
			pipe := c.rdb.Pipeline()
			extra(pipe)
			_, _ = pipe.Exec(ctx)
		}()
	}
	cc, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		cl, _ := c.rdb.(*redis.Client)
		c.waitPipelined(ctx, cl, calls)
		return
	}
	c.clusterPipelined(ctx, cc, calls, 0)
}

// clusterPipelined sends the calls to their shards' primaries, one pipeline
// each (at once), and retries on the new primary, a few times, the calls a
// shard answered MOVED (a failover or a resharding since the client last
// read the slots): they did not run.
func (c *Coalescer) clusterPipelined(ctx context.Context, cc *redis.ClusterClient, calls []*scriptCall, attempt int) {
	groups := map[*redis.Client][]*scriptCall{}
	for _, sc := range calls {
		node, err := cc.MasterForKey(ctx, sc.keys[0])
		if err != nil {
			sc.cmd = redis.NewCmd(ctx)
			sc.cmd.SetErr(err)
			continue
		}
		groups[node] = append(groups[node], sc)
	}
	var wg sync.WaitGroup
	for node, g := range groups {
		wg.Go(func() { c.waitPipelined(ctx, node, g) })
	}
	wg.Wait()
	var moved []*scriptCall
	for _, sc := range calls {
		if err := sc.cmd.Err(); err != nil && (strings.HasPrefix(err.Error(), "MOVED ") || strings.HasPrefix(err.Error(), "TRYAGAIN")) {
			moved = append(moved, sc)
		}
	}
	if len(moved) == 0 || attempt >= 3 {
		return
	}
	cc.ReloadState(ctx) // in the background: give it a moment
	t := time.NewTimer(time.Duration(attempt+1) * 100 * time.Millisecond)
	select {
	case <-ctx.Done():
		t.Stop()
		return
	case <-t.C:
	}
	c.clusterPipelined(ctx, cc, moved, attempt+1)
}

// waitPipelined sends calls to one primary with WAIT at the end of the
// pipeline (and of the NOSCRIPT retry's).
func (c *Coalescer) waitPipelined(ctx context.Context, node *redis.Client, calls []*scriptCall) {
	if node == nil {
		evalPipelined(ctx, c.rdb, calls, nil, nil)
		return
	}
	addr := node.Options().Addr
	want := c.repl.ackFor(addr)
	if want == 0 {
		evalPipelined(ctx, node, calls, nil, nil)
		return
	}
	evalPipelined(ctx, node, calls, nil, func(pipe redis.Pipeliner) func([]*scriptCall) {
		wait := redis.NewIntCmd(ctx, "wait", want, c.repl.timeout.Milliseconds())
		_ = pipe.Process(ctx, wait)
		return func(sent []*scriptCall) {
			got, err := wait.Result()
			if err == nil && int(got) >= want {
				return
			}
			if c.repl.fixed == 0 {
				c.repl.recheck(ctx)
				if now := c.repl.ackFor(addr); err == nil && int(got) >= now {
					return // the primary has fewer replicas now: auto asks for what there is
				}
			}
			doubt := &ReplicationError{Addr: addr, Want: want, Got: int(got), Err: err}
			for _, sc := range sent {
				if sc.cmd.Err() == nil {
					sc.doubt = doubt
				}
			}
		}
	})
}

// evalDoubt runs one script call (batched with others when batching is on)
// and returns its reply and, with acks on, its doubt (a
// *ReplicationError): the reply is the primary's all the same.
func (c *Coalescer) evalDoubt(ctx context.Context, s *redis.Script, keys []string, args ...any) (*redis.Cmd, error) {
	if c.batch != nil {
		return c.batch.eval(ctx, s, keys, args...)
	}
	return c.runDoubt(ctx, s, keys, args...)
}

// runDoubt runs one script call on its own (not batched); with acks on, it
// is followed by WAIT and its doubt returned.
func (c *Coalescer) runDoubt(ctx context.Context, s *redis.Script, keys []string, args ...any) (*redis.Cmd, error) {
	if !c.repl.active(ctx) {
		return s.Run(ctx, c.rdb, keys, args...), nil
	}
	sc := &scriptCall{script: s, keys: keys, args: args}
	c.runScripts(ctx, []*scriptCall{sc}, nil)
	return sc.cmd, sc.doubt
}

// onDoubt reports a replication doubt of an event's decision: counted and
// logged (at most once a second), and returned as an error under fail:
// closed.
func (c *Coalescer) onDoubt(ctx context.Context, p *compiled, key RoundKey, doubt error) error {
	if doubt == nil {
		return nil
	}
	if c.hooks.Replication != nil {
		c.hooks.Replication(p.Type, p.Fail, doubt)
	}
	if now := time.Now().UnixNano(); now-c.doubtLogged.Load() > int64(time.Second) {
		c.doubtLogged.Store(now)
		c.log.WarnContext(ctx, "a decision was not confirmed by the replicas in time: a failover now could lose it",
			"job_type", p.Type, "key", key.String(), "fail", string(p.Fail), "err", doubt)
	}
	if p.Fail == FailClosed {
		return fmt.Errorf("debounce: submit %s %s: %w", p.Type, key, doubt)
	}
	return nil
}
