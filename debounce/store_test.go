package debounce_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/fingerprint"
	"github.com/coalesce-io/coalesce/internal/testenv"
)

func miniClient(t *testing.T) (*miniredis.Miniredis, *redis.Client) { return testenv.Miniredis(t) }

func TestInvalidEvents(t *testing.T) {
	t.Parallel()
	_, rdb := miniClient(t)
	pub := &recorder{}
	c, err := debounce.New(debounce.Config{Schedules: debounce.SchedulesJetStream, Redis: rdb, Publisher: pub, Policies: []debounce.Policy{
		{Type: "t", Mode: debounce.ModeDedup, KeyFields: []string{"tenant_id"}},
		{Type: "acc", Mode: debounce.ModeDebounce, Window: time.Second, Payload: debounce.PayloadAccumulate, ItemField: "id"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		ev   debounce.Event
		is   error
		msg  string
		code string
	}{
		{debounce.Event{Type: "t"}, debounce.ErrInvalidEvent, "args: required", ""},
		{debounce.Event{Type: "nope", Args: json.RawMessage(`{}`)}, debounce.ErrNoPolicy, `no policy for job type "nope"`, ""},
		{debounce.Event{Type: "bad type", Args: json.RawMessage(`{}`)}, debounce.ErrInvalidEvent, "type:", "invalid_type"},
		{debounce.Event{Type: "t", Args: json.RawMessage(`{"tenant_id":9007199254740993}`)}, debounce.ErrInvalidEvent, "args.tenant_id: integer", "unsafe_integer"},
		{debounce.Event{Type: "t", Args: json.RawMessage(`{"user":1}`)}, debounce.ErrInvalidEvent, `key field "tenant_id" is missing`, "missing_key_field"},
		{debounce.Event{Type: "t", Args: json.RawMessage(`{"tenant_id":1}`), Key: strings.Repeat("k", 1025)}, debounce.ErrInvalidEvent, "key: must be 1-1024 bytes", ""},
		{debounce.Event{Type: "t", Args: json.RawMessage(`{"tenant_id":1}`), Key: "\xff"}, debounce.ErrInvalidEvent, "key: must be", ""},
		{debounce.Event{Type: "t", Args: json.RawMessage(`{"tenant_id":1}`), TraceParent: "00-a\r\nX: 1"}, debounce.ErrInvalidEvent, "traceparent:", ""},
		{debounce.Event{Type: "acc", Args: json.RawMessage(`{"x":1}`)}, debounce.ErrInvalidEvent, `item_field: args.id: key field "id" is missing`, "missing_key_field"},
	}
	for _, tt := range tests {
		_, err := c.Submit(context.Background(), tt.ev)
		if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("Submit(%+v) = %v, want %v containing %q", tt.ev, err, tt.is, tt.msg)
		}
		if tt.code != "" && fingerprint.Code(err) != tt.code {
			t.Errorf("Submit(%+v): code %q, want %q", tt.ev, fingerprint.Code(err), tt.code)
		}
	}
	if n := len(pub.all()); n != 0 {
		t.Errorf("invalid events published %d jobs", n)
	}
	if keys, _ := rdb.Keys(context.Background(), "*").Result(); len(keys) != 0 {
		t.Errorf("invalid events left keys %q", keys)
	}
}

func TestExplicitKey(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: 5 * time.Second})
		ctx := context.Background()
		a, err := f.c.Submit(ctx, debounce.Event{Type: "t", Args: json.RawMessage(`{"x":1}`), Key: "tenant-7"})
		if err != nil {
			t.Fatal(err)
		}
		b2, err := f.c.Submit(ctx, debounce.Event{Type: "t", Args: json.RawMessage(`{"x":2}`), Key: "tenant-7"})
		if err != nil {
			t.Fatal(err)
		}
		if b2.Outcome != debounce.OutcomeCoalesced || a.Key != debounce.ExplicitKey("t", "tenant-7") || a.Fingerprint == b2.Fingerprint {
			t.Errorf("explicit key: %+v %+v", a, b2)
		}
	})
}

func TestInspectAndCancel(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b,
			debounce.Policy{Type: "packed", Mode: debounce.ModeDebounce, Window: 10 * time.Second},
			debounce.Policy{Type: "hash", Mode: debounce.ModeDebounce, Window: 10 * time.Second, Payload: debounce.PayloadLast},
		)
		ctx := context.Background()
		for _, typ := range []string{"packed", "hash"} {
			t0 := f.clock.Now()
			d := f.submit(t, typ, `{"a":1}`)
			f.clock.Advance(2 * time.Second)
			f.submit(t, typ, `{"a":1}`)
			f.flush(t) // Inspect shows a local join's count, its last-seen time after its flush
			r, found, err := f.c.Inspect(ctx, typ, d.Key)
			if err != nil || !found {
				t.Fatalf("%s: Inspect: %v %v", typ, found, err)
			}
			if r.Token != d.Round || r.Events != 2 || !r.Published || !r.DueAt.Equal(t0.Add(10*time.Second)) ||
				!r.FirstSeen.Equal(t0) || r.LastSeen.Sub(t0.Add(2*time.Second)).Abs() > 10*time.Millisecond {
				t.Errorf("%s: Inspect = %+v (t0 %v)", typ, r, t0)
			}
			cancelled, found, err := f.c.Cancel(ctx, typ, d.Key)
			if err != nil || !found || cancelled.Token != d.Round {
				t.Fatalf("%s: Cancel = %+v %v %v", typ, cancelled, found, err)
			}
			if _, found, _ := f.c.Inspect(ctx, typ, d.Key); found {
				t.Errorf("%s: round still there after Cancel", typ)
			}
			if _, found, _ := f.c.Cancel(ctx, typ, d.Key); found {
				t.Errorf("%s: second Cancel found a round", typ)
			}
		}
		if _, _, err := f.c.Inspect(ctx, "nope", debounce.RoundKey{}); !errors.Is(err, debounce.ErrNoPolicy) {
			t.Errorf("Inspect of an unknown type: %v", err)
		}
	})
}

// TestStoreDown stops a private redis-server mid-test.
func TestStoreDown(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	pub := &recorder{}
	var storeErrors sync.Map
	c, err := debounce.New(debounce.Config{Schedules: debounce.SchedulesJetStream, Redis: rdb, Publisher: pub, Policies: []debounce.Policy{
		{Type: "open", Mode: debounce.ModeDebounce, Window: 5 * time.Second},
		{Type: "closed", Mode: debounce.ModeDebounce, Window: 5 * time.Second, Fail: debounce.FailClosed},
	}, Hooks: debounce.Hooks{StoreError: func(jobType string, fail debounce.FailMode, err error) {
		n, _ := storeErrors.LoadOrStore(string(fail), new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, typ := range []string{"open", "closed"} {
		if d, err := c.Submit(ctx, debounce.Event{Type: typ, Args: json.RawMessage(`{"a":1}`)}); err != nil || d.Outcome != debounce.OutcomeScheduled {
			t.Fatalf("%s with Redis up: %+v %v", typ, d, err)
		}
	}
	srv.Stop()
	before := len(pub.all())
	// An event of a round this process knows pending is answered locally,
	// Redis or not (local.go): its round's job is published.
	if d, err := c.Submit(ctx, debounce.Event{Type: "closed", Args: json.RawMessage(`{"a":1}`)}); err != nil || d.Outcome != debounce.OutcomeCoalesced {
		t.Fatalf("a known round's event with Redis down: %+v %v, want coalesced locally", d, err)
	}
	// Once a flush got no reply, nothing more is answered locally: the
	// next event of that round goes to Redis, and fail closed refuses it.
	fctx, fcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if err := c.Flush(fctx); err == nil {
		t.Fatal("Flush with Redis down succeeded")
	}
	fcancel()
	if _, err := c.Submit(ctx, debounce.Event{Type: "closed", Args: json.RawMessage(`{"a":1}`)}); !errors.Is(err, debounce.ErrStoreUnavailable) {
		t.Fatalf("after a failed flush, a known round's event: %v, want ErrStoreUnavailable (to Redis, fail closed)", err)
	}
	d, err := c.Submit(ctx, debounce.Event{Type: "open", Args: json.RawMessage(`{"a":2}`)})
	if err != nil || d.Outcome != debounce.OutcomeBypassed || d.Round != 0 {
		t.Fatalf("fail open with Redis down: %+v %v, want bypassed", d, err)
	}
	jobs := pub.all()[before:]
	if len(jobs) != 1 || jobs[0].Token != 0 || jobs[0].DueAt.IsZero() {
		t.Errorf("fail open published %+v, want one delayed job with no token", jobs)
	}
	_, err = c.Submit(ctx, debounce.Event{Type: "closed", Args: json.RawMessage(`{"a":2}`)})
	if !errors.Is(err, debounce.ErrStoreUnavailable) {
		t.Fatalf("fail closed with Redis down: %v, want ErrStoreUnavailable", err)
	}
	if n := len(pub.all()) - before; n != 1 {
		t.Errorf("fail closed published: %d jobs since Redis stopped, want 1 (the fail-open one)", n)
	}
	for mode, want := range map[string]int64{"open": 1, "closed": 2} {
		if n, ok := storeErrors.Load(mode); !ok || n.(*atomic.Int64).Load() != want {
			t.Errorf("store errors counted for fail %s: %v", mode, n)
		}
	}
	// Redis back (empty): events open rounds again.
	restarted := len(pub.all())
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if d, err := c.Submit(ctx, debounce.Event{Type: "closed", Args: json.RawMessage(`{"a":3}`)}); err != nil || d.Outcome != debounce.OutcomeScheduled {
		t.Errorf("after restart: %+v %v", d, err)
	}
	// The locally answered event's round was lost with Redis's data: its
	// flush finds it gone and submits the event again, which opens a round.
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	if st := c.LocalStats(); st.Resubmitted != 1 || st.Joined != 1 || st.FlushErrors == 0 {
		t.Errorf("local stats %+v, want 1 joined, 1 submitted again", st)
	}
	var again []debounce.Job
	for _, j := range pub.all()[restarted:] {
		if string(j.Args) == `{"a":1}` {
			again = append(again, j)
		}
	}
	if len(again) != 1 || again[0].Type != "closed" || again[0].Token == 0 {
		t.Errorf("after the flush: published %+v, want the new round of the event submitted again", again)
	}
}

func TestCheckServer(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedis(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	// The test server runs without persistence (--save "" --appendonly no).
	info, err := debounce.CheckServer(ctx, rdb)
	if !strings.HasPrefix(info.Version, "7.") || info.EvictionPolicy != "noeviction" || info.Persistence == nil || !info.Persistence.None() {
		t.Fatalf("CheckServer = %+v, %v", info, err)
	}
	if !errors.Is(err, debounce.ErrNoPersistence) || errors.Is(err, debounce.ErrEvictionPolicy) || !strings.Contains(err.Error(), "appendonly yes") {
		t.Fatalf("no persistence: %v", err)
	}
	if err := rdb.ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	info, err = debounce.CheckServer(ctx, rdb)
	if err != nil || !info.Persistence.AOF || info.Persistence.AppendFsync != "everysec" {
		t.Fatalf("with AOF: %+v, %v", info.Persistence, err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	_, err = debounce.CheckServer(ctx, rdb)
	if !errors.Is(err, debounce.ErrEvictionPolicy) || errors.Is(err, debounce.ErrNoPersistence) || !strings.Contains(err.Error(), "allkeys-lru") || !strings.Contains(err.Error(), "noeviction") {
		t.Errorf("allkeys-lru: %v", err)
	}
	if err := rdb.ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err = debounce.CheckServer(ctx, rdb); !errors.Is(err, debounce.ErrEvictionPolicy) || !errors.Is(err, debounce.ErrNoPersistence) {
		t.Errorf("both: %v", err)
	}
	_, mini := miniClient(t)
	if _, err := debounce.CheckServer(ctx, mini); err != nil {
		t.Errorf("miniredis: %v", err)
	}
}

// TestMemoryPerRound measures Redis memory per pending plain-debounce round
// over 100,000 rounds on a private server (INFO memory used_memory).
func TestMemoryPerRound(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("100k rounds")
	}
	srv := testenv.NewRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true, MaxRetries: -1, PoolSize: 32})
	t.Cleanup(func() { rdb.Close() })
	c, err := debounce.New(debounce.Config{Schedules: debounce.SchedulesJetStream, Redis: rdb, Publisher: &recorder{}, Policies: []debounce.Policy{
		{Type: "recompute", Mode: debounce.ModeDebounce, Window: 30 * time.Second, KeyFields: []string{"tenant_id"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	used := func() int64 {
		raw, err := rdb.Info(ctx, "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(raw, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		t.Fatal("no used_memory in INFO")
		return 0
	}
	const rounds = 100_000
	base := used()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 32 {
		wg.Go(func() {
			for i := w; i < rounds; i += 32 {
				d, err := c.Submit(ctx, debounce.Event{Type: "recompute", Args: json.RawMessage(fmt.Sprintf(`{"tenant_id":"tenant-%d"}`, i))})
				if err != nil || d.Outcome != debounce.OutcomeScheduled {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d submits failed", failed.Load())
	}
	if n := rdb.DBSize(ctx).Val(); n != rounds+1 { // and the store identity
		t.Fatalf("DBSIZE %d, want %d rounds and the store identity", n, rounds)
	}
	per := float64(used()-base) / rounds
	t.Logf("Redis memory per pending plain-debounce round: %.1f bytes (%d rounds)", per, rounds)
	if per > 130 {
		t.Errorf("%.1f bytes per round, want at most 130", per)
	}
}

func TestExplainChangesNothing(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: 5 * time.Second, KeyFields: []string{"tenant"}})
		ctx := context.Background()
		ev := debounce.Event{Type: "t", Args: json.RawMessage(`{"tenant":1, "b":[2.0]}`)}
		ex, err := f.c.Explain(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		if ex.Would != debounce.OutcomeScheduled || ex.Pending != nil || string(ex.Canonical) != `{"tenant":1}` || fmt.Sprint(ex.KeyFields) != "[tenant]" {
			t.Errorf("before: %+v", ex)
		}
		if _, found, _ := f.c.Inspect(ctx, "t", ex.Key); found || len(f.pub.all()) != 0 {
			t.Fatal("Explain opened a round")
		}
		d := f.submit(t, "t", `{"tenant":1}`)
		ex, err = f.c.Explain(ctx, ev)
		if err != nil || ex.Would != debounce.OutcomeCoalesced || ex.Pending == nil || ex.Pending.Events != 1 || ex.Key != d.Key {
			t.Errorf("after: %+v %v", ex, err)
		}
		if _, err := f.c.Explain(ctx, debounce.Event{Type: "t", Args: json.RawMessage(`{}`)}); !errors.Is(err, debounce.ErrInvalidEvent) {
			t.Errorf("missing key field: %v", err)
		}
	})
}

// TestScriptsReloadAfterFlush: a Redis that lost its script cache (restart,
// failover, SCRIPT FLUSH) gets the scripts again, batched or not.
func TestScriptsReloadAfterFlush(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedis(t)
	rdb := srv.Client(t)
	for _, pipelines := range []int{0, -1} {
		c, err := debounce.New(debounce.Config{Schedules: debounce.SchedulesJetStream, Redis: rdb, Publisher: &recorder{}, Pipelines: pipelines, Prefix: testenv.Prefix(t),
			Policies: []debounce.Policy{{Type: "t", Mode: debounce.ModeDebounce, Window: time.Second}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for i := range 3 {
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Submit(ctx, debounce.Event{Type: "t", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}); err != nil {
				t.Fatalf("pipelines %d, after SCRIPT FLUSH: %v", pipelines, err)
			}
		}
	}
}
