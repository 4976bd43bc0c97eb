package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/coalesce-io/coalesce/internal/pgtest"
	"github.com/coalesce-io/coalesce/outbox"
	"github.com/coalesce-io/coalesce/worker"
)

const outboxKillConfig = `policies:
  reindex:
    mode: debounce
    window: 2s
    payload: accumulate
    item_field: id
    key_fields: [tenant_id]
`

// TestOutboxSurvivesAKilledEmbeddedDaemon is issue 23's outbox case: 160
// rows committed in Postgres, relayed by `coalesce serve` on its embedded
// default (which deletes each row once decided), the daemon SIGKILLed the
// moment the outbox is empty (the issue: 0.3 s after the commit), started
// again on its data folder, then a worker. Every committed item must reach
// a job: the relay deleted the rows, so the decisions in the embedded Redis
// are all that is left of them. Before the journal 156 of 160 were lost
// (the in-process Redis came back from a snapshot taken before them).
func TestOutboxSurvivesAKilledEmbeddedDaemon(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "coalesce.yaml")
	if err := os.WriteFile(cfgPath, []byte(outboxKillConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runBin(t, "", "outbox", "migrate", "--postgres", db); code != 0 {
		t.Fatalf("outbox migrate: exit %d %s", code, stderr)
	}
	httpAddr, natsAddr, redisAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	args := []string{"serve", "--config", cfgPath, "--http", httpAddr, "--nats-listen", natsAddr,
		"--redis-listen", redisAddr, "--data", filepath.Join(dir, "data")}
	serve := func() *proc {
		cmd := exec.Command(binary(t), args...)
		cmd.Env = append(os.Environ(), "COALESCE_OUTBOX_POSTGRES="+db)
		p := startCmd(t, cmd)
		waitHTTP(t, "http://"+httpAddr+"/readyz", p)
		return p
	}
	first := serve()

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const rows, tenants = 160, 20
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		if _, err := tx.Exec(ctx, `INSERT INTO coalesce_outbox (type, args) VALUES ('reindex', $1)`,
			fmt.Sprintf(`{"tenant_id":%d,"id":%d}`, i%tenants, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n, _, err := outbox.Backlog(ctx, conn)
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay left %d rows (%v); serve:\n%s", n, err, first.out.String())
		}
	}
	_ = first.cmd.Process.Kill() // every row is decided and deleted
	_ = first.cmd.Wait()

	again := serve()
	jobsFile := filepath.Join(dir, "jobs.ndjson")
	work := start(t, "work", "--config", cfgPath, "--redis", "redis://"+redisAddr+"/0", "--nats", "nats://"+natsAddr,
		"--type", "reindex", "--exec", "cat >> "+jobsFile+"; echo >> "+jobsFile)
	items, releases, jobs := map[string]int{}, map[string]int{}, 0
	read := func() {
		clear(items)
		clear(releases)
		docs := readNDJSON[worker.Document](t, jobsFile)
		jobs = len(docs)
		for _, j := range docs {
			releases[j.Release]++
			for _, it := range j.Summary.Items {
				items[string(it)]++
			}
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		read()
		if len(items) == rows || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(500 * time.Millisecond) // a job run twice would show now
	read()
	if lost := rows - len(items); lost != 0 || jobs != tenants || releases["released"] != tenants {
		t.Errorf("%d of %d committed items lost after the SIGKILL; %d jobs, releases %v; want every item, one job per tenant, all released\nwork:\n%s\nserve after the restart:\n%s",
			lost, rows, jobs, releases, work.out.String(), again.out.String())
	}
	for it, n := range items {
		if n != 1 {
			t.Errorf("item %s in %d jobs", it, n)
		}
	}
	if out := again.out.String(); !strings.Contains(out, "restored from its journal") || !strings.Contains(out, fmt.Sprintf("rounds=%d", tenants)) {
		t.Errorf("the restarted daemon does not say it restored %d rounds:\n%s", tenants, out)
	}
	work.stop(t)
	again.stop(t)
}
