package outbox_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/pgtest"
	"github.com/coalesce-io/coalesce/outbox"
)

// TestDeadRowsSurviveAnIdentityRestart: the outbox's identity starts over
// (TRUNCATE ... RESTART IDENTITY; a table created again, a switchover
// without its sequences do the same) and a poison row gets an id a dead row
// already has: it is moved aside all the same. On 47bb46e the dead table
// was keyed by the outbox id with ON CONFLICT DO NOTHING: the row left the
// outbox and never reached the dead table.
func TestDeadRowsSurviveAnIdentityRestart(t *testing.T) {
	t.Parallel()
	e := newEnvTB(t, orders)
	ctx := context.Background()
	r, err := outbox.New(outbox.Config{Pool: e.pool, Coalescer: e.side.co})
	if err != nil {
		t.Fatal(err)
	}
	poison := func(order int) {
		t.Helper()
		if _, err := e.pool.Exec(ctx, `INSERT INTO coalesce_outbox (type, args) VALUES ('no_such_type', $1)`, `{"tenant_id":1,"order_id":`+string(rune('0'+order))+`}`); err != nil {
			t.Fatal(err)
		}
		p, err := r.Once(ctx)
		if err != nil || p.Dead != 1 {
			t.Fatalf("pass %+v %v, want the poison row moved aside", p, err)
		}
	}
	poison(1)
	if _, err := e.pool.Exec(ctx, `TRUNCATE coalesce_outbox RESTART IDENTITY`); err != nil {
		t.Fatal(err)
	}
	poison(2)
	var n, ids int
	if err := e.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT id) FROM coalesce_outbox_dead`).Scan(&n, &ids); err != nil {
		t.Fatal(err)
	}
	if n != 2 || ids != 1 {
		t.Errorf("%d dead rows (%d outbox ids), want both poison rows, which had the same outbox id", n, ids)
	}
	if b := e.backlog(); b != 0 {
		t.Errorf("outbox holds %d rows", b)
	}
}

// schema1Dead is coalesce_outbox_dead as schema 1 created it: keyed by the
// outbox row's id.
const schema1Dead = `CREATE TABLE coalesce_outbox_dead (
    id bigint PRIMARY KEY, type text NOT NULL, args text NOT NULL, key text, traceparent text,
    created_at timestamptz NOT NULL, dead_at timestamptz NOT NULL DEFAULT now(),
    error_code text NOT NULL, error_field text, error text NOT NULL)`

// TestMigrateUpgradesASchema1DeadTable: a database migrated by schema 1
// gets the dead table's own key in place, its rows kept, and then takes a
// dead row whose outbox id it already holds.
func TestMigrateUpgradesASchema1DeadTable(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.Pool(t)
	ctx := context.Background()
	for _, q := range []string{schema1Dead,
		`INSERT INTO coalesce_outbox_dead (id, type, args, created_at, error_code, error) VALUES (7, 't', '{}', now(), 'no_policy', 'old')`} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // the second run changes nothing
		if err := outbox.Migrate(ctx, pool); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO coalesce_outbox_dead (id, type, args, created_at, error_code, error) VALUES (7, 't', '{}', now(), 'no_policy', 'new')`); err != nil {
		t.Fatalf("a second dead row of outbox id 7 after the upgrade: %v", err)
	}
	var n int
	var msgs string
	if err := pool.QueryRow(ctx, `SELECT count(*), string_agg(error, ',' ORDER BY dead_id) FROM coalesce_outbox_dead WHERE id = 7`).Scan(&n, &msgs); err != nil {
		t.Fatal(err)
	}
	if n != 2 || msgs != "old,new" {
		t.Errorf("dead rows of id 7: %d (%s), want the old one kept and the new one", n, msgs)
	}
}

// TestRelayDeletesARowOnlyOnceItsDecisionIsInRedis: rows of one round key
// answered locally (debounce local joins, flushed every second here) are
// deleted only once their count is in Redis: a relay killed right after
// its commit loses nothing. On 47bb46e the pass committed with the local
// joins still in memory (the round counted 1 of 5 events).
func TestRelayDeletesARowOnlyOnceItsDecisionIsInRedis(t *testing.T) {
	t.Parallel()
	p := debounce.Policy{Type: "reindex", Mode: debounce.ModeDebounce, Window: time.Minute, KeyFields: []string{"tenant_id"}}
	e := newEnvTB(t, p)
	ctx := context.Background()
	co, err := debounce.New(debounce.Config{Redis: e.side.rdb, Publisher: e.side.pub, Policies: outbox.FailClosed([]debounce.Policy{p}),
		Prefix: "o" + e.w.ID, FlushInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r, err := outbox.New(outbox.Config{Pool: e.pool, Coalescer: co, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := e.pool.Exec(ctx, `INSERT INTO coalesce_outbox (type, args) VALUES ('reindex', $1)`, `{"tenant_id":1,"n":`+string(rune('0'+i))+`}`); err != nil {
			t.Fatal(err)
		}
	}
	pass, err := r.Once(ctx)
	if err != nil || pass.Relayed != 5 {
		t.Fatalf("pass %+v %v", pass, err)
	}
	if st := co.LocalStats(); st.Joined == 0 {
		t.Fatalf("no row was answered locally (%+v): the test needs local joins", st)
	}
	// Another process (the relay killed now) sees what Redis holds.
	other, err := debounce.New(debounce.Config{Redis: e.side.rdb, Policies: []debounce.Policy{p}, Prefix: "o" + e.w.ID, LocalJoins: debounce.LocalJoinsOff})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := other.RoundKeyOf(debounce.Event{Type: "reindex", Args: json.RawMessage(`{"tenant_id":1}`)})
	rd, found, err := other.Inspect(ctx, "reindex", key)
	if err != nil || !found || rd.Events != 5 {
		t.Errorf("the round in Redis after the pass: %+v %v %v, want the 5 deleted rows' events", rd, found, err)
	}
}

// slowSubmitter decides each event after a delay: Redis or NATS slow.
type slowSubmitter struct {
	*debounce.Coalescer
	delay time.Duration
}

func (s slowSubmitter) Submit(ctx context.Context, ev debounce.Event) (debounce.Decision, error) {
	time.Sleep(s.delay)
	return s.Coalescer.Submit(ctx, ev)
}

// TestRelayPassOutlivesAShortIdleTimeout: a database whose
// idle_in_transaction_session_timeout is shorter than a pass's decisions
// (which the pass's transaction idles through), and whose default
// isolation is SERIALIZABLE: the pass still commits. On 47bb46e the server
// ended the session before the commit: the pass failed and its rows were
// decided again at every pass, for ever.
func TestRelayPassOutlivesAShortIdleTimeout(t *testing.T) {
	t.Parallel()
	_, url := pgtest.Pool(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = "300"
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "serializable"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e := newEnvPool(t, pool, url, orders)
	ctx := context.Background()
	r, err := outbox.New(outbox.Config{Pool: pool, Coalescer: slowSubmitter{e.side.co, 500 * time.Millisecond}, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	e.commit(1, 1)
	e.commit(1, 2)
	pass, err := r.Once(ctx)
	if err != nil || pass.Relayed != 2 {
		t.Fatalf("pass %+v: %v; want both rows relayed", pass, err)
	}
	if n := e.backlog(); n != 0 {
		t.Errorf("outbox holds %d rows after the pass", n)
	}
	if err != nil && strings.Contains(err.Error(), "idle") {
		t.Errorf("the server ended the pass: %v", err)
	}
}
