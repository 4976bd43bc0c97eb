package outbox_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/pgtest"
	"github.com/coalesce-io/coalesce/outbox"
)

// A row's explicit key and traceparent reach the job: rows of one key
// coalesce whatever their args, and the trace context is carried.
func TestKeyAndTraceparentCarried(t *testing.T) {
	t.Parallel()
	e := newEnv(t, orders)
	ctx := context.Background()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, tenant := range []int{1, 2, 3} { // three tenants, one explicit key
		ev := debounce.Event{Type: orders.Type, Key: "account-9", TraceParent: tp,
			Args: []byte(`{"tenant_id":` + string(rune('0'+tenant)) + `,"order_id":` + string(rune('1'+i)) + `}`)}
		if _, err := outbox.Insert(ctx, tx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	e.relay(nil)
	select {
	case job := <-e.jobs:
		if len(job.Summary.Items) != 3 || job.TraceParent != tp || job.Key != debounce.ExplicitKey(orders.Type, "account-9") {
			t.Fatalf("job items %s traceparent %q key %s: want the 3 rows of key account-9 in one job with their traceparent", job.Summary.Items, job.TraceParent, job.Key)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no job")
	}
}

// A row whose key has an earlier row held by another relay waits for it;
// rows of other keys do not.
func TestHeldBackBehindAnotherRelaysRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, orders)
	ctx := context.Background()
	e.commit(1, 1) // row 1, tenant 1
	e.commit(1, 2) // row 2, tenant 1
	e.commit(2, 1) // row 3, tenant 2
	// "Another relay" holds row 1.
	other, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(ctx) }()
	var id int64
	if err := other.QueryRow(ctx, `SELECT id FROM coalesce_outbox ORDER BY id LIMIT 1 FOR UPDATE`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	r, err := outbox.New(outbox.Config{Pool: e.pool, Coalescer: e.side.co})
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Claimed != 2 || p.Relayed != 1 || p.HeldBack != 1 {
		t.Fatalf("pass %+v: want rows 2 and 3 claimed, tenant 2's relayed, tenant 1's held back behind row 1", p)
	}
	// The other relay decides row 1 and commits; then row 2 flows.
	if _, err := other.Exec(ctx, `DELETE FROM coalesce_outbox WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if p, err = r.Once(ctx); err != nil || p.Relayed != 1 || p.HeldBack != 0 {
		t.Fatalf("pass after the other relay's commit: %+v %v", p, err)
	}
}

// A Submitter that answers "bypassed" (published without a reservation)
// does not get the row removed: it stays and is retried.
func TestBypassedDecisionKeepsTheRow(t *testing.T) {
	t.Parallel()
	pool, _ := migrated(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO coalesce_outbox (type, args) VALUES ('sync_orders', '{"tenant_id":1}')`); err != nil {
		t.Fatal(err)
	}
	var retried atomic.Int64
	r, err := outbox.New(outbox.Config{Pool: pool, Coalescer: bypasser{}, Hooks: outbox.Hooks{
		Retry: func(_ outbox.Row, err error) {
			if errors.Is(err, debounce.ErrStoreUnavailable) {
				retried.Add(1)
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Once(ctx)
	if err != nil || p.Retried != 1 || p.Relayed != 0 || retried.Load() != 1 {
		t.Fatalf("pass %+v %v (retried %d): want the row kept for a retry", p, err, retried.Load())
	}
	if n, _, _ := outbox.Backlog(ctx, pool); n != 1 {
		t.Fatalf("the outbox holds %d rows", n)
	}
}

type bypasser struct{}

func (bypasser) Submit(context.Context, debounce.Event) (debounce.Decision, error) {
	return debounce.Decision{Outcome: debounce.OutcomeBypassed}, nil
}
func (bypasser) RoundKeyOf(debounce.Event) (debounce.RoundKey, error) {
	return debounce.RoundKey{}, nil
}
func (bypasser) Policies() []debounce.Policy { return nil }

// Postgres down for a while: the relay's passes fail and back off, its
// LISTEN connection comes back, and rows committed after the restart flow
// with no polling at all.
func TestPostgresRestart(t *testing.T) {
	t.Parallel()
	pg, err := pgtest.Start()
	if err != nil {
		pgtest.Shared(t) // skips, or fails under COALESCE_REQUIRE_SERVERS=1
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	e := newEnvOn(t, pg.URL, orders)
	e.relay(func(c *outbox.Config) { c.PollEvery = time.Hour })
	e.commit(1, 1)
	e.collect(map[int][]int{1: {1}}, 15*time.Second, 0)
	if err := pg.Restart(500 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// The pool reconnects on its own; the relay's listener after its backoff.
	deadline := time.Now().Add(10 * time.Second)
	want := map[int][]int{1: {2}, 2: {1}}
	for {
		if err := e.tryCommit(1, 2); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("could not commit after the restart")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // the listener is back by now
	e.commit(2, 1)
	e.collect(want, 15*time.Second, 0)
}

// newEnvOn is newEnv on the database at url.
func newEnvOn(t *testing.T, url string, policies ...debounce.Policy) *env {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return newEnvWithPool(t, pool, url, policies...)
}

func (e *env) tryCommit(tenant, order int) error {
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := outbox.InsertJSON(ctx, tx, orders.Type, map[string]int{"tenant_id": tenant, "order_id": order}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// With NATS down, a row that opens a round with a JetStream schedule cannot
// be published: it stays (and the rows of its key behind it), then flows
// when NATS is back. A round held in Redis until due (the default on a
// single node) needs no NATS to open: its rows are decided at once, and its
// job published once NATS is back. Either way every row reaches exactly one
// job. (The worker starts after the restart: a worker's pull consumer
// resumes only when its pull request expires, which is not what this test
// is about.)
func TestNATSDownRowsWait(t *testing.T) {
	t.Parallel()
	e := newEnvTB(t, orders)
	var retries atomic.Int64
	e.relay(func(c *outbox.Config) {
		c.SubmitTimeout = time.Second
		c.Hooks.Retry = func(outbox.Row, error) { retries.Add(1) }
	})
	e.nats.Stop()
	want := map[int][]int{1: seq(1, 5), 2: seq(1, 5)}
	for tenant, ids := range want {
		for _, id := range ids {
			e.commit(tenant, id)
		}
	}
	if e.side.co.HoldsInRedis(context.Background(), orders.Type) {
		// Rounds held in Redis until due need no NATS to be decided: the
		// rows are decided and deleted, and their jobs published once NATS
		// is back (below).
		e.waitBacklog(0, 15*time.Second)
	} else {
		deadline := time.Now().Add(15 * time.Second)
		for retries.Load() < 2 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if retries.Load() < 2 {
			t.Fatalf("the relay retried %d rows in 15 s with NATS down", retries.Load())
		}
		if n := e.backlog(); n != 10 {
			t.Fatalf("with NATS down the outbox holds %d rows, want all 10", n)
		}
	}
	if err := e.nats.Start(); err != nil {
		t.Fatal(err)
	}
	withWorker(t, e, orders)
	got := e.collect(want, 30*time.Second, time.Second)
	for tenant, items := range got.items {
		for id, n := range items {
			if n != 1 {
				t.Errorf("tenant %d order %d in %d jobs", tenant, id, n)
			}
		}
	}
	e.waitBacklog(0, 5*time.Second)
}

// TestRelayWaitsForTheStoreBeforeDeleting: with Config.Durable set (the
// embedded store's journal fsync), rows are deleted only after it returned,
// and kept (to be relayed again) while it fails.
func TestRelayWaitsForTheStoreBeforeDeleting(t *testing.T) {
	t.Parallel()
	e := newEnv(t, orders)
	var failing atomic.Bool
	var calls atomic.Int64
	failing.Store(true)
	e.relay(func(c *outbox.Config) {
		c.Durable = func(context.Context) error {
			calls.Add(1)
			if failing.Load() {
				return errors.New("the journal could not be fsynced")
			}
			return nil
		}
	})
	for order := 1; order <= 3; order++ {
		e.commit(1, order)
	}
	for deadline := time.Now().Add(20 * time.Second); calls.Load() < 3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Durable called %d times", calls.Load())
		}
	}
	if n := e.backlog(); n != 3 {
		t.Fatalf("the relay deleted rows whose decisions the store did not hold durably: %d of 3 left", n)
	}
	failing.Store(false)
	e.waitBacklog(0, 20*time.Second)
}
