package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/coalesce-io/coalesce/internal/pgtest"
)

// TestOutboxDocExample runs docs/outbox.md's SQL as written (its orders
// table created first: it is the application's) on a real Postgres, the
// tables made by the `coalesce outbox migrate` it names, and the daemon
// relaying with the tour's configuration (examples/coalesce.yaml): the row
// becomes the event it says, in a pending round, and nothing goes dead.
func TestOutboxDocExample(t *testing.T) {
	t.Parallel()
	doc := string(mustRead(t, filepath.Join(repoRoot, "docs", "outbox.md")))
	sql := codeBlock(t, doc, "## Events that must survive the producer: the Postgres outbox", "sql")
	if !strings.Contains(sql, "-- once: coalesce outbox migrate --postgres URL") {
		t.Fatalf("the outbox's SQL no longer starts from `coalesce outbox migrate`:\n%s", sql)
	}
	db := pgtest.DB(t)
	if code, out, stderr := runBin(t, "", "outbox", "migrate", "--postgres", db); code != 0 {
		t.Fatalf("outbox migrate: exit %d %s %s", code, out, stderr)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE orders (tenant_id bigint, order_id bigint)`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, sql); err != nil { // simple protocol: the block's statements in turn
		t.Fatalf("docs/outbox.md's SQL: %v\n%s", err, sql)
	}

	dir := t.TempDir()
	httpAddr := freeAddr(t)
	cmd := exec.Command(binary(t), "serve", "--config", filepath.Join(repoRoot, "examples", "coalesce.yaml"), "--http", httpAddr,
		"--nats-listen", freeAddr(t), "--redis-listen", freeAddr(t), "--data", filepath.Join(dir, "data"))
	cmd.Env = append(os.Environ(), "COALESCE_OUTBOX_POSTGRES="+db)
	serve := startCmd(t, cmd)
	base := "http://" + httpAddr
	waitHTTP(t, base+"/readyz", serve)

	// The relayed row is the round's event (the tour's policy keys on tenant_id).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		code, out, _ := runBin(t, "", "inspect", "--server", base, "--type", "recompute_financials", "--args", `{"tenant_id":42}`)
		if code == 0 && strings.Contains(out, `"events": 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no round of tenant 42 with the outbox's event within 30 s: %s\nserve:\n%s", out, serve.out.String())
		}
	}
	code, out, stderr := runBin(t, "", "outbox", "status", "--postgres", db)
	if code != 0 || !strings.Contains(out, "dead") {
		t.Fatalf("outbox status: exit %d %s %s", code, out, stderr)
	}
	var left, dead int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM coalesce_outbox), (SELECT count(*) FROM coalesce_outbox_dead)`).Scan(&left, &dead); err != nil {
		t.Fatal(err)
	}
	if left != 0 || dead != 0 {
		t.Errorf("after the relay: %d rows left, %d dead (a type without a policy goes dead with no_policy); status:\n%s", left, dead, out)
	}
	if c := serve.stop(t); c != 0 {
		t.Errorf("serve exit %d:\n%s", c, serve.out.String())
	}
}
