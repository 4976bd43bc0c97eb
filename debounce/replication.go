package debounce

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// ReplicationAuto (0, the default): 1 once the deployment shows it has
	// replicas (a Sentinel client, or a primary reporting a connected
	// replica in INFO replication, checked at the first call and every
	// ReplicationCheckEvery), and from then on even while none is
	// connected; none for a primary without replicas. ReplicationOff:
	// never wait; N > 0: always wait for N.
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

// ReplicationError is a doubt: what the wait found, or that the primary had
// no replica to wait for.
type ReplicationError struct {
	Addr string // the primary ("*": the one of a single-node or Sentinel client)
	Want int    // replicas asked for
	Got  int    // replicas that confirmed in time
	Err  error  // the wait's own error, if it failed
	// Written: the primary applied the write (the wait fell short). False:
	// the primary had no replica connected, and a write refused under
	// fail: closed was not sent at all.
	Written bool
}

func (e *ReplicationError) Error() string {
	addr := strings.Trim(e.Addr, "*")
	if addr == "" {
		addr = "the primary"
	}
	switch {
	case !e.Written:
		return fmt.Sprintf("%s: %s has no replica connected (%d wanted): nothing was written", ErrNotReplicated, addr, e.Want)
	case e.Err != nil:
		return fmt.Sprintf("%s: waiting for %d replica(s) of %s: %v (the write stands on the primary)", ErrNotReplicated, e.Want, addr, e.Err)
	}
	return fmt.Sprintf("%s: %d of %d replica(s) of %s confirmed in time (the write stands on the primary)", ErrNotReplicated, e.Got, e.Want, addr)
}

// Is makes a ReplicationError match ErrNotReplicated.
func (e *ReplicationError) Is(target error) bool { return target == ErrNotReplicated }

func (e *ReplicationError) Unwrap() error { return e.Err }

// replState is a Coalescer's replication setting and what it found.
type replState struct {
	fixed   int // Acks > 0: wait for this many; 0: auto
	timeout time.Duration
	rdb     redis.UniversalClient
	log     *slog.Logger

	// replicated (auto): the deployment has replicas — a Sentinel client,
	// or a primary seen with one. From then on every decision waits for one
	// replica, on every primary, even while none is connected (a primary
	// just promoted, its old one not back yet): a write that only the
	// primary holds is what the next failover loses, so under fail: closed
	// it is refused until a replica is back (run two replicas, so that a
	// failover leaves one).
	replicated atomic.Bool
	// replicas: online replicas per primary address, as last read ("*"
	// for a client with one primary): fail-closed writes to a primary with
	// none are refused before they are sent (noReplica).
	replicas atomic.Pointer[map[string]int]
	checked  atomic.Int64 // unix ns of the last check (auto)
	checking atomic.Bool
	mu       sync.Mutex // serialises the first check
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
	if c, ok := rdb.(*redis.Client); ok && c.Options().Addr == "FailoverClient" {
		rs.replicated.Store(true) // Sentinel: a primary with replicas by design
	}
	return rs, nil
}

// active reports whether decisions wait for replicas now. With auto it
// reads the primaries' replicas at the first call and every
// ReplicationCheckEvery (in the background after the first).
func (rs *replState) active(ctx context.Context) bool {
	switch {
	case rs == nil:
		return false
	case rs.replicas.Load() == nil:
		rs.mu.Lock()
		if rs.replicas.Load() == nil {
			rs.check(ctx)
		}
		rs.mu.Unlock()
	case time.Since(time.Unix(0, rs.checked.Load())) > ReplicationCheckEvery && rs.checking.CompareAndSwap(false, true):
		go func() {
			defer rs.checking.Store(false)
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			rs.check(cctx)
		}()
	}
	return rs.fixed > 0 || rs.replicated.Load()
}

// check reads how many replicas each primary has (auto). On failure the
// previous answer stays.
func (rs *replState) check(ctx context.Context) {
	defer rs.checked.Store(time.Now().UnixNano())
	m := map[string]int{}
	var mu sync.Mutex
	read := func(ctx context.Context, c *redis.Client, addr string) error {
		raw, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		n := onlineReplicas(raw)
		mu.Lock()
		m[addr] = n
		mu.Unlock()
		return nil
	}
	var err error
	switch c := rs.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return read(ctx, m, m.Options().Addr) })
	case *redis.Client:
		err = read(ctx, c, "*")
	default:
		return
	}
	prev := rs.replicas.Load()
	if err != nil && prev != nil {
		return
	}
	rs.replicas.Store(&m)
	for addr, n := range m {
		if n > 0 && !rs.replicated.Load() {
			rs.replicated.Store(true)
			rs.log.Info("redis has replicas: every decision now waits until one confirms it (redis.replicas.acks auto)", "addr", addr)
		}
		if prev == nil || !rs.replicated.Load() {
			continue
		}
		name := cmp.Or(strings.Trim(addr, "*"), "the primary")
		if was, ok := (*prev)[addr]; ok && was > 0 && n == 0 {
			rs.log.Warn("redis: "+name+" has no replica connected: decisions wait for one (refused under fail: closed, counted under fail: open) until a replica is back", "addr", addr)
		} else if ok && was == 0 && n > 0 {
			rs.log.Info("redis: "+name+" has a replica again", "addr", addr)
		}
	}
}

// recheck reads the replicas again at once (at most every recheckEvery),
// after a wait fell short: a primary whose replica went away is then known
// to have none, and fail-closed writes are refused before they are sent.
func (rs *replState) recheck(ctx context.Context) {
	if time.Since(time.Unix(0, rs.checked.Load())) < recheckEvery {
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

// noReplica refuses, before anything is written, a fail-closed write to
// key whose primary is known to have no replica connected while acks are
// on: the write would be a doubt (a refused event that may run all the
// same), and sent again it would open round after round.
func (c *Coalescer) noReplica(ctx context.Context, key string) error {
	rs := c.repl
	if !rs.active(ctx) {
		return nil
	}
	m := rs.replicas.Load()
	if m == nil {
		return nil
	}
	addr := "*"
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return nil // the write finds out
		}
		addr = node.Options().Addr
	}
	if n, ok := (*m)[addr]; !ok || n > 0 {
		return nil
	}
	return &ReplicationError{Addr: addr, Want: rs.ackFor(addr)}
}

// ReplicaAcks is how many replicas confirm each decision and take now (0:
// none, with Replication off, or auto on a Redis without replicas).
func (c *Coalescer) ReplicaAcks(ctx context.Context) int {
	if !c.repl.active(ctx) {
		return 0
	}
	return c.repl.ackFor("")
}

// ackFor is how many replicas the primary at addr must confirm.
func (rs *replState) ackFor(string) int {
	if rs.fixed > 0 {
		return rs.fixed
	}
	if rs.replicated.Load() {
		return 1
	}
	return 0
}

// onlineReplicas counts the replicas of an INFO replication reply that are
// online: a replica still syncing (wait_bgsave, send_bulk) acknowledges
// nothing yet.
func onlineReplicas(raw string) int {
	n := 0
	for line := range strings.SplitSeq(raw, "\n") {
		if strings.HasPrefix(line, "slave") && strings.Contains(line, "state=online") {
			n++
		}
	}
	return n
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
			c.repl.recheck(ctx)
			doubt := &ReplicationError{Addr: cmp.Or(addr, "*"), Want: want, Got: int(got), Err: err, Written: true}
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
func (c *Coalescer) evalDoubt(ctx context.Context, s evaler, keys []string, args ...any) (*redis.Cmd, error) {
	if c.batch != nil {
		return c.batch.eval(ctx, s, keys, args...)
	}
	return c.runDoubt(ctx, s, keys, args...)
}

// runDoubt runs one script call on its own (not batched); with acks on, it
// is followed by WAIT and its doubt returned.
func (c *Coalescer) runDoubt(ctx context.Context, s evaler, keys []string, args ...any) (*redis.Cmd, error) {
	if !c.repl.active(ctx) {
		return runScript(ctx, c.rdb, s, keys, args), nil
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
