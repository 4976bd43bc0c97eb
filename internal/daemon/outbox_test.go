package daemon_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/config"
	"github.com/coalesce-io/coalesce/internal/daemon"
	"github.com/coalesce-io/coalesce/internal/pgtest"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/outbox"
	"github.com/coalesce-io/coalesce/publisher"
)

// StartOutbox refuses a database without the tables (saying how to make
// them), makes them with outbox.migrate, relays, and names outbox.postgres
// without the password when the database is unreachable.
func TestStartOutbox(t *testing.T) {
	t.Parallel()
	pg, err := pgtest.Start()
	if err != nil {
		if os.Getenv(testenv.RequireEnv) == "1" {
			t.Fatal(err)
		}
		t.Skipf("postgres: %v", err)
	}
	t.Cleanup(pg.Stop)
	ctx := context.Background()
	rs := testenv.NewRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr, DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	_, js := testenv.NATS(t).Connect(t)
	pub, err := publisher.New(ctx, js, &publisher.Config{Stream: "OBXD", Prefix: "obxd"})
	if err != nil {
		t.Fatal(err)
	}
	conns := &daemon.Conns{Redis: rdb, Publisher: pub}
	cfg := &config.Config{Policies: []debounce.Policy{{Type: "sync", Mode: debounce.ModeDedup}}, Outbox: config.Outbox{Postgres: pg.URL}}
	cfg.Redis.Prefix = "obxd"
	log := slog.New(slog.DiscardHandler)
	m := daemon.NewMetrics("sync")

	// A Redis that keeps nothing across a restart is refused first: the
	// relay deletes rows once decided.
	if _, err := daemon.StartOutbox(ctx, cfg, conns, m, log); err == nil || !strings.Contains(err.Error(), "neither AOF nor RDB") ||
		!strings.Contains(err.Error(), "appendonly yes") || !strings.Contains(err.Error(), "outbox.allow_non_durable_redis: true") {
		t.Fatalf("a Redis without persistence: %v", err)
	}
	cfg.Outbox.AllowNonDurableRedis = true // told explicitly: on to the next check
	if _, err := daemon.StartOutbox(ctx, cfg, conns, m, log); err == nil || !strings.Contains(err.Error(), "coalesce outbox migrate") || !strings.Contains(err.Error(), "outbox.postgres") {
		t.Fatalf("no tables: %v", err)
	}
	cfg.Outbox.AllowNonDurableRedis = false
	if err := rdb.ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := daemon.StartOutbox(ctx, cfg, conns, m, log); err == nil || !strings.Contains(err.Error(), "coalesce outbox migrate") {
		t.Fatalf("no tables, Redis with AOF: %v", err)
	}
	cfg.Outbox.Migrate = true
	stop, err := daemon.StartOutbox(ctx, cfg, conns, m, log)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO coalesce_outbox (type, args) VALUES ('sync', '{"id":1}'), ('sync', '{"id":2}')`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, _, err := outbox.Backlog(ctx, conn)
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay left %d rows (%v)", n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	stop() // twice is harmless

	// A server that does not say whether it persists (CONFIG refused, as
	// miniredis or some managed Redis) is refused too, unless told.
	_, mc := testenv.Miniredis(t)
	mconns := &daemon.Conns{Redis: mc, Publisher: pub}
	if _, err := daemon.StartOutbox(ctx, cfg, mconns, m, log); err == nil || !strings.Contains(err.Error(), "cannot tell whether Redis keeps its data") {
		t.Fatalf("a Redis that does not answer CONFIG: %v", err)
	}

	cfg.Outbox.Postgres = "postgres://app:s3cret@127.0.0.1:1/app?connect_timeout=2"
	if _, err := daemon.StartOutbox(ctx, cfg, conns, m, log); err == nil || !strings.Contains(err.Error(), "outbox.postgres") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("unreachable database: %v", err)
	}

	// Passwords in the query string (libpq's and pgx's password and
	// sslpassword parameters) are hidden too: in the start-up log line and
	// in errors. On 47bb46e both showed them (url.Redacted masks only the
	// user info).
	var logs lockedBuffer
	logged := slog.New(slog.NewTextHandler(&logs, nil))
	cfg.Outbox.Postgres = pg.URL + "&password=q-s3cret-q&sslpassword=q-s3cret-q"
	stop, err = daemon.StartOutbox(ctx, cfg, conns, nil, logged) // metrics registered once above
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if out := logs.String(); !strings.Contains(out, "outbox relay started") || strings.Contains(out, "q-s3cret-q") {
		t.Errorf("the relay's log shows a password, or nothing: %s", out)
	}
	cfg.Outbox.Postgres = "postgres://app@127.0.0.1:1/app?connect_timeout=2&password=q-s3cret-q&sslpassword=q-s3cret-q"
	if _, err := daemon.StartOutbox(ctx, cfg, conns, nil, logged); err == nil || strings.Contains(err.Error(), "q-s3cret-q") {
		t.Errorf("unreachable database, password in the query: %v", err)
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
