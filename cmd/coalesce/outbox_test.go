package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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

func TestMain(m *testing.M) { pgtest.Main(m) }

const outboxConfig = `policies:
  reindex:
    mode: debounce
    window: 1s
    payload: accumulate
    item_field: id
    key_fields: [tenant_id]
`

// The outbox end to end with the binary: migrate, serve relays committed
// rows (the URL from COALESCE_OUTBOX_POSTGRES), work runs the jobs with
// every committed item, a poison row is listed by outbox dead, and status
// counts what is left.
func TestOutboxCommandsAndServeRelay(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "coalesce.yaml")
	if err := os.WriteFile(cfgPath, []byte(outboxConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := runBin(t, "", "outbox", "--help"); code != 0 || !strings.Contains(stderr+out, "Usage: coalesce outbox migrate") {
		t.Errorf("outbox --help: exit %d", code)
	}
	if code, _, stderr := runBin(t, "", "outbox", "frobnicate", "--postgres", db); code != 2 || !strings.Contains(stderr, "unknown subcommand") {
		t.Errorf("outbox frobnicate: exit %d %q", code, stderr)
	}
	if code, _, stderr := runBin(t, "", "outbox", "replay", "--postgres", db); code != 2 || !strings.Contains(stderr, "--id N or --all") {
		t.Errorf("outbox replay without --id: exit %d %q", code, stderr)
	}
	if code, out, _ := runBin(t, "", "outbox", "schema"); code != 0 || !strings.Contains(out, "CREATE TABLE IF NOT EXISTS coalesce_outbox") {
		t.Fatalf("outbox schema: exit %d", code)
	}
	if code, _, stderr := runBin(t, "", "outbox", "status", "--postgres", db); code != 1 || !strings.Contains(stderr, "coalesce outbox migrate") {
		t.Errorf("status before migrate: exit %d, %q", code, stderr)
	}
	if code, _, stderr := runBin(t, "", "outbox", "status"); code != 2 || !strings.Contains(stderr, "--postgres") {
		t.Errorf("status without a database: exit %d, %q", code, stderr)
	}
	httpAddr, natsAddr, redisAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	args := []string{"serve", "--config", cfgPath, "--http", httpAddr, "--nats-listen", natsAddr,
		"--redis-listen", redisAddr, "--data", filepath.Join(dir, "data")}
	early := exec.Command(binary(t), args...)
	early.Env = append(os.Environ(), "COALESCE_OUTBOX_POSTGRES="+db)
	if out, err := early.CombinedOutput(); err == nil || !strings.Contains(string(out), "coalesce outbox migrate") {
		t.Errorf("serve before migrate: %v, %s", err, out)
	}
	for range 2 {
		if code, out, stderr := runBin(t, "", "outbox", "migrate", "--postgres", db); code != 0 || !strings.Contains(out, fmt.Sprintf("schema %d", outbox.SchemaVersion)) {
			t.Fatalf("outbox migrate: exit %d %q %q", code, out, stderr)
		}
	}

	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), "COALESCE_OUTBOX_POSTGRES="+db)
	serve := startCmd(t, cmd)
	base := "http://" + httpAddr
	waitHTTP(t, base+"/readyz", serve)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := tx.Exec(ctx, `INSERT INTO coalesce_outbox (type, args) VALUES ($1, $2)`, "reindex",
			`{"tenant_id":`+string(rune('1'+i%2))+`,"id":`+string(rune('0'+i))+`}`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO coalesce_outbox (type, args) VALUES ('reindex', '{"tenant_id":9007199254740993,"id":1}')`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	jobsFile := filepath.Join(dir, "jobs.ndjson")
	start(t, "work", "--config", cfgPath, "--redis", "redis://"+redisAddr+"/0", "--nats", "nats://"+natsAddr,
		"--type", "reindex", "--exec", "cat >> "+jobsFile+"; echo >> "+jobsFile)
	items := map[string]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for len(items) < 10 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		raw, _ := os.ReadFile(jobsFile)
		sc := bufio.NewScanner(bytes.NewReader(raw))
		for sc.Scan() {
			if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
				var j worker.Document
				if err := json.Unmarshal(line, &j); err == nil {
					for _, it := range j.Summary.Items {
						items[string(it)] = true
					}
				}
			}
		}
	}
	if len(items) != 10 {
		t.Fatalf("the jobs carried %d of the 10 committed items; serve said:\n%s", len(items), serve.out.String())
	}
	code, out, stderr := runBin(t, "", "outbox", "status", "--postgres", db)
	var st outboxStatusLine
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Schema != outbox.SchemaVersion || st.Backlog != 0 || st.Dead != 1 {
		t.Errorf("outbox status: exit %d %q %q", code, out, stderr)
	}
	if code, out, _ := runBin(t, "", "outbox", "dead", "--postgres", db); code != 0 || !strings.Contains(out, `"code":"unsafe_integer"`) || !strings.Contains(out, `"field":"args.tenant_id"`) {
		t.Errorf("outbox dead: exit %d %q", code, out)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`coalesce_outbox_rows_total{result="relayed",type="reindex"} 10`, `coalesce_outbox_rows_total{result="dead",type="reindex"} 1`, "coalesce_outbox_lag_seconds_bucket", "coalesce_outbox_backlog_rows"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	if code, out, _ := runBin(t, "", "outbox", "replay", "--postgres", db, "--all"); code != 0 || !strings.Contains(out, "1 dead rows back") {
		t.Errorf("outbox replay: exit %d %q", code, out)
	}
	if c := serve.stop(t); c != 0 {
		t.Errorf("serve exit %d", c)
	}
	if !strings.Contains(serve.out.String(), "outbox relay started") {
		t.Errorf("serve did not say it relays the outbox:\n%s", serve.out.String())
	}
}
