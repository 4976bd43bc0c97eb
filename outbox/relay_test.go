package outbox_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/pgtest"
	"github.com/coalesce-io/coalesce/outbox"
)

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, orders)
	ctx := context.Background()
	e.insert(1, 1, true)
	for range 2 {
		if err := outbox.Migrate(ctx, e.pool); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.backlog(); n != 1 {
		t.Fatalf("after migrating again the outbox holds %d rows, want the 1 inserted", n)
	}
	var comment string
	if err := e.pool.QueryRow(ctx, `SELECT obj_description('coalesce_outbox'::regclass)`).Scan(&comment); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("schema %d", outbox.SchemaVersion); !contains(comment, want) {
		t.Fatalf("table comment %q does not name %q", comment, want)
	}
	// Two migrations at once (two daemons starting) both succeed.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- outbox.Migrate(ctx, e.pool) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestInsertRefusesBadEventsNamingTheField(t *testing.T) {
	t.Parallel()
	pool, _ := migrated(t)
	cases := []struct {
		name  string
		ev    debounce.Event
		field string
		code  string
	}{
		{"integer beyond 2^53", debounce.Event{Type: "t", Args: []byte(`{"tenant_id":9007199254740993}`)}, "args.tenant_id", "unsafe_integer"},
		{"not JSON", debounce.Event{Type: "t", Args: []byte(`{"tenant_id":`)}, "args.tenant_id", "invalid_json"},
		{"no args", debounce.Event{Type: "t"}, "args", "invalid_event"},
		{"bad type", debounce.Event{Type: "no spaces", Args: []byte(`{}`)}, "type", "invalid_type"},
		{"bad traceparent", debounce.Event{Type: "t", Args: []byte(`{}`), TraceParent: "nope"}, "traceparent", "invalid_traceparent"},
		// Postgres text cannot hold NUL: on 47bb46e the INSERT failed with a
		// raw encoding error, aborting the producer's transaction.
		{"NUL in key", debounce.Event{Type: "t", Args: []byte(`{}`), Key: "tenant\x00-7"}, "key", "invalid_event"},
	}
	ctx := context.Background()
	for _, c := range cases {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = outbox.Insert(ctx, tx, c.ev)
		_ = tx.Rollback(ctx)
		var fe *outbox.FieldError
		if !errors.As(err, &fe) || !errors.Is(err, outbox.ErrInvalidEvent) {
			t.Fatalf("%s: err %v, want a *FieldError", c.name, err)
		}
		if fe.Field != c.field || (c.code != "" && fe.Code != c.code) {
			t.Errorf("%s: field %q code %q (%v), want %q %q", c.name, fe.Field, fe.Code, err, c.field, c.code)
		}
	}
}

func migrated(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	pool, url := pgtest.Pool(t)
	if err := outbox.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool, url
}

func TestNewRefusesAFailOpenCoalescer(t *testing.T) {
	t.Parallel()
	pool, _ := migrated(t)
	_, err := outbox.New(outbox.Config{Pool: pool, Coalescer: fakeSubmitter{policies: []debounce.Policy{orders.WithDefaults()}}})
	if !errors.Is(err, outbox.ErrInvalidConfig) || !contains(err.Error(), "sync_orders") || !contains(err.Error(), "fail: closed") {
		t.Fatalf("err %v: want ErrInvalidConfig naming the policy and fail: closed", err)
	}
	if _, err := outbox.New(outbox.Config{Pool: pool, Coalescer: fakeSubmitter{policies: outbox.FailClosed([]debounce.Policy{orders.WithDefaults()})}}); err != nil {
		t.Fatal(err)
	}
}

type fakeSubmitter struct{ policies []debounce.Policy }

func (f fakeSubmitter) Submit(context.Context, debounce.Event) (debounce.Decision, error) {
	return debounce.Decision{}, errors.New("fake")
}
func (fakeSubmitter) RoundKeyOf(debounce.Event) (debounce.RoundKey, error) {
	return debounce.RoundKey{}, nil
}
func (f fakeSubmitter) Policies() []debounce.Policy { return f.policies }

// Committed rows become jobs carrying their items; rolled-back rows never do.
func TestCommittedRowsBecomeRoundsRolledBackNever(t *testing.T) {
	t.Parallel()
	e := newEnv(t, orders)
	var notified atomic.Int64
	e.relay(func(c *outbox.Config) {
		c.PollEvery = time.Hour // only a notification wakes it
		c.Hooks.Relayed = func(outbox.Row, debounce.Decision, time.Duration) { notified.Add(1) }
	})
	want := map[int][]int{}
	for tenant := 1; tenant <= 3; tenant++ {
		for order := 1; order <= 10; order++ {
			e.commit(tenant, tenant*100+order)
			want[tenant] = append(want[tenant], tenant*100+order)
			if order%3 == 0 {
				e.insert(tenant, tenant*100+50+order, false) // rolled back
			}
		}
	}
	got := e.collect(want, 20*time.Second, 1500*time.Millisecond)
	for tenant, items := range got.items {
		for id, n := range items {
			if id%100 > 50 {
				t.Errorf("tenant %d: rolled-back order %d reached a job", tenant, id)
			}
			if n != 1 {
				t.Errorf("tenant %d: order %d in %d jobs, want 1", tenant, id, n)
			}
		}
	}
	if got.jobs > 6 {
		t.Errorf("%d jobs for 3 tenants' 30 orders: they did not coalesce", got.jobs)
	}
	if n := e.backlog(); n != 0 {
		t.Errorf("outbox holds %d rows after the relay", n)
	}
	if notified.Load() != 30 {
		t.Errorf("relayed %d rows with polling off, want 30 (woken by NOTIFY)", notified.Load())
	}
}

// A row that can never be decided goes to coalesce_outbox_dead with its
// error, and the rows behind it (of its key too) flow.
func TestPoisonRowMovedAside(t *testing.T) {
	t.Parallel()
	e := newEnv(t, orders)
	ctx := context.Background()
	var dead atomic.Int64
	// Rows written by a producer in another language, past Insert's checks.
	raw := []struct{ typ, args string }{
		{"sync_orders", `{"tenant_id":1,"order_id":1}`},
		{"sync_orders", `{"tenant_id":9007199254740993,"order_id":2}`},                              // beyond 2^53
		{"sync_orders", `{"tenant_id":1,"order_id":3`},                                              // not JSON
		{"unknown_type", `{"tenant_id":1,"order_id":4}`},                                            // no policy
		{"sync_orders", `{"order_id":5}`},                                                           // no key field
		{"sync_orders", `{"tenant_id":1,"order_id":7,"blob":"` + strings.Repeat("x", 2<<20) + `"}`}, // over NATS's max payload
		{"sync_orders", `{"tenant_id":1,"order_id":6}`},
	}
	for _, r := range raw {
		if _, err := e.pool.Exec(ctx, `INSERT INTO coalesce_outbox (type, args) VALUES ($1, $2)`, r.typ, r.args); err != nil {
			t.Fatal(err)
		}
	}
	e.relay(func(c *outbox.Config) {
		c.Hooks.Dead = func(outbox.Row, error) { dead.Add(1) }
	})
	got := e.collect(map[int][]int{1: {1, 6}}, 15*time.Second, 1500*time.Millisecond)
	if len(got.items[1]) != 2 {
		t.Errorf("tenant 1's jobs carried %v, want orders 1 and 6", sortedKeys(got.items[1]))
	}
	rows, err := e.pool.Query(ctx, `SELECT type, args, error_code, COALESCE(error_field, ''), error FROM coalesce_outbox_dead ORDER BY dead_id`)
	if err != nil {
		t.Fatal(err)
	}
	type deadRow = deadRowT
	var deads []deadRow
	for rows.Next() {
		var d deadRow
		if err := rows.Scan(&d.typ, &d.args, &d.code, &d.field, &d.msg); err != nil {
			t.Fatal(err)
		}
		deads = append(deads, d)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []struct{ code, field string }{
		{"unsafe_integer", "args.tenant_id"},
		{"", "args"},
		{"no_policy", "type"},
		{"missing_key_field", ""},
		{"job_too_large", "args"},
	}
	if len(deads) != len(want) {
		for _, d := range deads {
			t.Logf("dead row %+v", truncated(d))
		}
		t.Fatalf("%d dead rows, want %d", len(deads), len(want))
	}
	for i, w := range want {
		d := deads[i]
		if (w.code != "" && d.code != w.code) || (w.field != "" && d.field != w.field) || d.msg == "" || d.args != raw[i+1].args {
			t.Errorf("dead row %d: %+v, want code %q field %q, the args as written and a message", i, truncated(d), w.code, w.field)
		}
	}
	if dead.Load() != 5 {
		t.Errorf("Dead hook called %d times, want 5", dead.Load())
	}
	if n := e.backlog(); n != 0 {
		t.Errorf("outbox holds %d rows", n)
	}
}

// With Redis down, rows stay in the outbox (the policy is fail open: the
// relay's Coalescer fails closed all the same), then flow when it is back.
func TestRedisDownRowsWait(t *testing.T) {
	t.Parallel()
	open := orders
	open.Fail = debounce.FailOpen
	e := newEnv(t, open)
	var retries atomic.Int64
	e.relay(func(c *outbox.Config) {
		c.Hooks.Retry = func(outbox.Row, error) { retries.Add(1) }
	})
	e.commit(1, 1)
	e.collect(map[int][]int{1: {1}}, 15*time.Second, 0)

	e.redis.Stop()
	want := map[int][]int{1: seq(2, 11), 2: seq(1, 10)}
	for tenant, ids := range want {
		for _, id := range ids {
			e.commit(tenant, id)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for retries.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if retries.Load() < 3 {
		t.Fatalf("the relay retried %d rows in 10 s with Redis down", retries.Load())
	}
	if n := e.backlog(); n != 20 {
		t.Fatalf("with Redis down the outbox holds %d rows, want all 20", n)
	}
	select {
	case job := <-e.jobs:
		t.Fatalf("a job (%s) ran with Redis down: the relay bypassed", job.Summary.Items)
	default:
	}
	if err := e.redis.Start(); err != nil {
		t.Fatal(err)
	}
	got := e.collect(want, 20*time.Second, time.Second)
	for tenant, items := range got.items {
		for id, n := range items {
			if n != 1 {
				t.Errorf("tenant %d order %d in %d jobs", tenant, id, n)
			}
		}
	}
	e.waitBacklog(0, 5*time.Second)
}

// orderLog wraps a Submitter and records, per tenant, the order ids in the
// order Submit saw them, across relays.
type orderLog struct {
	outbox.Submitter
	mu    sync.Mutex
	seen  map[int][]int
	delay time.Duration
	out   *os.File // when set, each decided row is written to it: "tenant order"
	// hangAfter, when set, makes every Submit after that many wait for
	// ever: the process is killed in the middle of its batch.
	hangAfter int
	n         atomic.Int64
}

func (o *orderLog) Submit(ctx context.Context, ev debounce.Event) (debounce.Decision, error) {
	var a struct {
		Tenant int `json:"tenant_id"`
		Order  int `json:"order_id"`
	}
	_ = json.Unmarshal(ev.Args, &a)
	if o.delay > 0 {
		time.Sleep(time.Duration(rand.Int64N(int64(o.delay))))
	}
	if o.hangAfter > 0 && o.n.Add(1) > int64(o.hangAfter) {
		<-ctx.Done() // the pass's deadline, long after the kill
		return debounce.Decision{}, ctx.Err()
	}
	d, err := o.Submitter.Submit(ctx, ev)
	if err == nil {
		o.mu.Lock()
		o.seen[a.Tenant] = append(o.seen[a.Tenant], a.Order)
		if o.out != nil {
			fmt.Fprintf(o.out, "%d %d\n", a.Tenant, a.Order)
		}
		o.mu.Unlock()
	}
	return d, err
}

// Two relays at once: every row relayed once, the rows of a key in order.
func TestTwoRelays(t *testing.T) {
	t.Parallel()
	e := newEnv(t, orders)
	log := &orderLog{Submitter: e.side.co, seen: map[int][]int{}, delay: 200 * time.Microsecond}
	var relayed [2]atomic.Int64
	for i := range 2 {
		e.relay(func(c *outbox.Config) {
			c.Coalescer = log
			c.BatchSize = 40
			c.Concurrency = 4
			c.Hooks.Relayed = func(outbox.Row, debounce.Decision, time.Duration) { relayed[i].Add(1) }
		})
	}
	ctx := context.Background()
	const tenants, perTenant = 10, 100
	want := map[int][]int{}
	// Rows of all tenants interleaved, several per transaction.
	for order := 1; order <= perTenant; order += 5 {
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for o := order; o < order+5; o++ {
			for tenant := 1; tenant <= tenants; tenant++ {
				if _, err := outbox.InsertJSON(ctx, tx, orders.Type, map[string]int{"tenant_id": tenant, "order_id": o}); err != nil {
					t.Fatal(err)
				}
				if order == 1 && o == 1 {
					want[tenant] = nil
				}
				want[tenant] = append(want[tenant], o)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	e.collect(want, 30*time.Second, time.Second)
	e.waitBacklog(0, 5*time.Second)
	log.mu.Lock()
	defer log.mu.Unlock()
	for tenant, ids := range log.seen {
		if len(ids) != perTenant {
			t.Errorf("tenant %d: %d submits, want %d (each row once)", tenant, len(ids), perTenant)
		}
		for i := 1; i < len(ids); i++ {
			if ids[i] <= ids[i-1] {
				t.Errorf("tenant %d: order %d submitted after %d: out of order", tenant, ids[i], ids[i-1])
				break
			}
		}
	}
	if relayed[0].Load() == 0 || relayed[1].Load() == 0 {
		t.Logf("one relay did all the work (%d, %d): the test proved less", relayed[0].Load(), relayed[1].Load())
	}
	t.Logf("rows relayed by each relay: %d, %d", relayed[0].Load(), relayed[1].Load())
}

// childEnv carries a relay child's wiring (JSON): the test binary run
// again as a relay process, killed with SIGKILL by the test.
const childEnv = "COALESCE_OUTBOX_TEST_RELAY"

func relayChild() int {
	var w wiring
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &w); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	s, err := connect(ctx, w, outbox.FailClosed([]debounce.Policy{orders})...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pool, err := pgxpool.New(ctx, w.PG)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Slow decisions, so a kill lands in the middle of a batch.
	// 75 decisions, then none: the first batch of 50 commits, the second
	// has 25 decided when the test kills the process.
	slow := &orderLog{Submitter: s.co, seen: map[int][]int{}, delay: time.Millisecond, out: os.Stdout, hangAfter: 75}
	r, err := outbox.New(outbox.Config{Pool: pool, Coalescer: slow, BatchSize: 50, Concurrency: 4, PollEvery: 100 * time.Millisecond,
		SubmitTimeout: time.Minute, PassTimeout: time.Minute})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = r.Run(ctx)
	return 0
}

// A relay process SIGKILLed in the middle of a batch loses nothing; the
// rows it had decided but not yet deleted are relayed again and join their
// round (or, when that round's job started meanwhile, the next one): the
// only orders that may reach two jobs.
func TestRelayKilledMidBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, orders)
	const tenants, perTenant, batch = 5, 120, 50
	want := map[int][]int{}
	ctx := context.Background()
	for o := 1; o <= perTenant; o++ {
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for tenant := 1; tenant <= tenants; tenant++ {
			if _, err := outbox.InsertJSON(ctx, tx, orders.Type, map[string]int{"tenant_id": tenant, "order_id": o}); err != nil {
				t.Fatal(err)
			}
			want[tenant] = append(want[tenant], o)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wj, _ := json.Marshal(e.w)
	type order struct{ tenant, order int }
	again := map[order]bool{} // decided by a killed relay, still in the outbox
	const kills = 3
	for kill := 1; kill <= kills; kill++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+string(wj))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill it halfway through its second batch: 75 rows decided, 50 of
		// them committed.
		decided := map[order]bool{}
		sc := bufio.NewScanner(stdout)
		timer := time.AfterFunc(20*time.Second, func() { _ = cmd.Process.Kill() })
		for len(decided) < batch+batch/2 && sc.Scan() {
			var o order
			if _, err := fmt.Sscanf(sc.Text(), "%d %d", &o.tenant, &o.order); err == nil {
				decided[o] = true
			}
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		timer.Stop()
		_ = cmd.Wait()
		if len(decided) < batch+batch/2 {
			t.Fatalf("kill %d: the relay process decided only %d rows", kill, len(decided))
		}
		left := e.left()
		n := 0
		for o := range decided {
			if left[o.tenant][o.order] {
				again[o], n = true, n+1
			}
		}
		t.Logf("kill %d: %d rows decided, %d of them still in the outbox (%d rows left)", kill, len(decided), n, e.backlog())
		if n != batch/2 {
			t.Errorf("kill %d: %d decided rows left behind, want the %d of the interrupted batch", kill, n, batch/2)
		}
	}
	e.relay(nil)
	got := e.collect(want, 30*time.Second, 1500*time.Millisecond)
	e.waitBacklog(0, 5*time.Second)
	twice := 0
	for tenant, items := range got.items {
		for id, n := range items {
			if n > 1 {
				twice++
				if !again[order{tenant, id}] {
					t.Errorf("tenant %d order %d reached %d jobs but was never relayed twice", tenant, id, n)
				}
			}
		}
	}
	t.Logf("%d rows relayed again after the kills; %d of them reached a second job (their round had started)", len(again), twice)
}

// left returns the orders still in the outbox, per tenant.
func (e *env) left() map[int]map[int]bool {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT args FROM coalesce_outbox`)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	out := map[int]map[int]bool{}
	for rows.Next() {
		var args string
		if err := rows.Scan(&args); err != nil {
			e.t.Fatal(err)
		}
		var a struct {
			Tenant int `json:"tenant_id"`
			Order  int `json:"order_id"`
		}
		_ = json.Unmarshal([]byte(args), &a)
		if out[a.Tenant] == nil {
			out[a.Tenant] = map[int]bool{}
		}
		out[a.Tenant][a.Order] = true
	}
	return out
}

type deadRowT struct{ typ, args, code, field, msg string }

func truncated(d deadRowT) deadRowT {
	if len(d.args) > 80 {
		d.args = d.args[:80] + "…"
	}
	return d
}
