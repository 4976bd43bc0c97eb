package outbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/pgtest"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/outbox"
	"github.com/coalesce-io/coalesce/publisher"
	"github.com/coalesce-io/coalesce/worker"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(relayChild())
	}
	pgtest.Main(m)
}

// orders is the policy of most tests: a tenant's orders accumulate into one
// job a second after the first (its order ids are the job's items, the
// oracle of what a worker gets).
var orders = debounce.Policy{Type: "sync_orders", Mode: debounce.ModeDebounce, Window: time.Second,
	KeyFields: []string{"tenant_id"}, Payload: debounce.PayloadAccumulate, ItemField: "order_id", MaxItems: 10000}

// wiring names what a relay in another process needs to reach the same
// servers, stream and prefix.
type wiring struct {
	PG, Redis, NATS, ID string
}

// side is a Coalescer and a publisher on the test's servers.
type side struct {
	rdb *redis.Client
	nc  *nats.Conn
	js  jetstream.JetStream
	pub *publisher.Publisher
	co  *debounce.Coalescer
}

func connect(ctx context.Context, w wiring, policies ...debounce.Policy) (*side, error) {
	opt, err := redis.ParseURL(w.Redis)
	if err != nil {
		return nil, err
	}
	opt.DisableIdentity, opt.MaxRetries = true, -1
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = 300*time.Millisecond, time.Second, time.Second
	s := &side{rdb: redis.NewClient(opt)}
	if s.nc, err = nats.Connect(w.NATS); err != nil {
		s.close()
		return nil, err
	}
	if s.js, err = jetstream.New(s.nc); err != nil {
		s.close()
		return nil, err
	}
	if s.pub, err = publisher.New(ctx, s.js, &publisher.Config{Stream: "OBX_" + w.ID, Prefix: "o" + w.ID}); err != nil {
		s.close()
		return nil, err
	}
	if s.co, err = debounce.New(debounce.Config{Redis: s.rdb, Publisher: s.pub, Policies: policies, Prefix: "o" + w.ID}); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *side) close() {
	if s.nc != nil {
		s.nc.Close()
	}
	_ = s.rdb.Close()
}

// env is one test's Postgres database (migrated), Redis, NATS, a worker
// collecting the jobs, and the wiring to start relays.
type env struct {
	t     testing.TB
	pool  *pgxpool.Pool
	redis *testenv.RedisServer
	nats  *testenv.NATSServer
	w     wiring
	side  *side
	jobs  chan *worker.Job
}

func newEnv(t *testing.T, policies ...debounce.Policy) *env {
	t.Helper()
	return withWorker(t, newEnvTB(t, policies...), policies...)
}

// newEnvWithPool is newEnv on a given database.
func newEnvWithPool(t *testing.T, pool *pgxpool.Pool, url string, policies ...debounce.Policy) *env {
	t.Helper()
	return withWorker(t, newEnvPool(t, pool, url, policies...), policies...)
}

func withWorker(t *testing.T, e *env, policies ...debounce.Policy) *env {
	t.Helper()
	types := make([]string, len(policies))
	for i, p := range policies {
		types[i] = p.Type
	}
	wk, err := worker.New(worker.Config{JetStream: e.side.js, Coalescer: e.side.co, Publisher: e.side.pub, Types: types,
		Backoff: []time.Duration{200 * time.Millisecond}, MaxDeliver: 1000})
	if err != nil {
		t.Fatal(err)
	}
	e.jobs = make(chan *worker.Job, 100000)
	wctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = wk.Run(wctx, func(_ context.Context, job *worker.Job) error {
			e.jobs <- job
			return nil
		})
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return e
}

// newEnvTB is newEnv without a worker.
func newEnvTB(t testing.TB, policies ...debounce.Policy) *env {
	t.Helper()
	pool, url := pgtest.Pool(t)
	return newEnvPool(t, pool, url, policies...)
}

func newEnvPool(t testing.TB, pool *pgxpool.Pool, url string, policies ...debounce.Policy) *env {
	t.Helper()
	ctx := context.Background()
	if err := outbox.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	rs := testenv.NewRedis(t)
	ns := testenv.NATS(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	e := &env{t: t, pool: pool, redis: rs, nats: ns, w: wiring{PG: url, Redis: rs.URL, NATS: ns.URL, ID: hex.EncodeToString(b[:])}}
	var err error
	if e.side, err = connect(ctx, e.w, outbox.FailClosed(policies)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.side.close)
	return e
}

// relay starts an in-process relay on the env's Coalescer until the test ends.
func (e *env) relay(edit func(*outbox.Config)) *outbox.Relay {
	e.t.Helper()
	cfg := outbox.Config{Pool: e.pool, Coalescer: e.side.co, PollEvery: 200 * time.Millisecond,
		RetryMin: 50 * time.Millisecond, RetryMax: 400 * time.Millisecond}
	if edit != nil {
		edit(&cfg)
	}
	r, err := outbox.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := r.Run(ctx); err != nil {
			e.t.Errorf("relay: %v", err)
		}
	})
	e.t.Cleanup(func() { cancel(); wg.Wait() })
	return r
}

// commit inserts one order event per transaction and commits it.
func (e *env) commit(tenant, order int) {
	e.t.Helper()
	e.insert(tenant, order, true)
}

func (e *env) insert(tenant, order int, commit bool) {
	e.t.Helper()
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	args := fmt.Sprintf(`{"tenant_id":%d,"order_id":%d}`, tenant, order)
	if _, err := outbox.Insert(ctx, tx, debounce.Event{Type: orders.Type, Args: json.RawMessage(args)}); err != nil {
		e.t.Fatal(err)
	}
	if commit {
		err = tx.Commit(ctx)
	} else {
		err = tx.Rollback(ctx)
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

// seen gathers the jobs' items per tenant: order id -> jobs it was in.
type seen struct {
	jobs  int
	items map[int]map[int]int // tenant -> order -> jobs
}

// collect reads jobs until every want[tenant] order id has arrived (failing
// the test at the deadline), then quiet more.
func (e *env) collect(want map[int][]int, deadline, quiet time.Duration) seen {
	e.t.Helper()
	s := seen{items: map[int]map[int]int{}}
	missing := func() int {
		n := 0
		for tenant, ids := range want {
			for _, id := range ids {
				if s.items[tenant][id] == 0 {
					n++
				}
			}
		}
		return n
	}
	take := func(job *worker.Job) {
		s.jobs++
		var args struct {
			Tenant int `json:"tenant_id"`
		}
		if err := json.Unmarshal(job.Args, &args); err != nil {
			e.t.Fatalf("job args %s: %v", job.Args, err)
		}
		if s.items[args.Tenant] == nil {
			s.items[args.Tenant] = map[int]int{}
		}
		for _, it := range job.Summary.Items {
			id, err := strconv.Atoi(string(it))
			if err != nil {
				e.t.Fatalf("item %s: %v", it, err)
			}
			s.items[args.Tenant][id]++
		}
	}
	end := time.After(deadline)
	for missing() > 0 {
		select {
		case job := <-e.jobs:
			take(job)
		case <-end:
			e.t.Fatalf("after %v, %d committed orders reached no job", deadline, missing())
		}
	}
	q := time.After(quiet)
	for {
		select {
		case job := <-e.jobs:
			take(job)
		case <-q:
			return s
		}
	}
}

func (e *env) backlog() int64 {
	e.t.Helper()
	n, _, err := outbox.Backlog(context.Background(), e.pool)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// waitBacklog waits (bounded) for the outbox to hold n rows.
func (e *env) waitBacklog(n int64, limit time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got := e.backlog()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("outbox holds %d rows after %v, want %d", got, limit, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func seq(from, to int) []int {
	out := make([]int, 0, to-from+1)
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func sortedKeys(m map[int]int) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}
