package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/worker"
)

const restartConfig = `policies:
  reindex:
    mode: debounce
    window: 2s
    payload: accumulate
    item_field: id
    key_fields: [tenant_id]
`

// TestEmbeddedRestartKeepsRounds is the newcomer's case from the round-lifetime
// issue: 50 items over 5 tenants go to `coalesce serve` on its embedded
// default, the daemon is stopped and started again on the same data folder
// before any worker ran (gracefully, or with SIGKILL right after the last
// answer), and `coalesce work` then runs 5 jobs carrying all 50 items. Before
// the snapshot the in-process Redis came back empty: 45 items were lost; with
// the snapshot a SIGKILL within its interval still lost them.
func TestEmbeddedRestartKeepsRounds(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"sigterm", "sigkill"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfgPath := filepath.Join(dir, "coalesce.yaml")
			if err := os.WriteFile(cfgPath, []byte(restartConfig), 0o644); err != nil {
				t.Fatal(err)
			}
			httpAddr, natsAddr, redisAddr := freeAddr(t), freeAddr(t), freeAddr(t)
			args := []string{"serve", "--config", cfgPath, "--http", httpAddr, "--nats-listen", natsAddr,
				"--redis-listen", redisAddr, "--data", filepath.Join(dir, "data")}
			base := "http://" + httpAddr
			serve := start(t, args...)
			waitHTTP(t, base+"/readyz", serve)
			var batch strings.Builder
			for i := range 50 {
				fmt.Fprintf(&batch, `{"type":"reindex","args":{"tenant_id":%d,"id":%d}}`+"\n", i%5, i)
			}
			if code, out, stderr := runBin(t, batch.String(), "submit", "--server", base); code != 0 || strings.Count(out, `"outcome":"scheduled"`) != 5 {
				t.Fatalf("submit: exit %d, %d scheduled; %s", code, strings.Count(out, `"outcome":"scheduled"`), stderr)
			}
			if how == "sigterm" {
				if c := serve.stop(t); c != 0 {
					t.Fatalf("serve exit %d; output:\n%s", c, serve.out.String())
				}
			} else {
				// At once: every answered event is journaled before its
				// answer (the snapshot used to lose the last second).
				_ = serve.cmd.Process.Kill()
				_ = serve.cmd.Wait()
			}
			again := start(t, args...)
			waitHTTP(t, base+"/readyz", again)
			if out := again.out.String(); !strings.Contains(out, "restored from its journal") || !strings.Contains(out, "rounds=5") {
				t.Errorf("the restarted daemon does not say it restored 5 rounds:\n%s", out)
			}
			jobsFile := filepath.Join(dir, "jobs.ndjson")
			work := start(t, "work", "--config", cfgPath, "--redis", "redis://"+redisAddr+"/0", "--nats", "nats://"+natsAddr,
				"--type", "reindex", "--exec", "cat >> "+jobsFile+"; echo >> "+jobsFile)
			read := func() []worker.Document {
				raw, _ := os.ReadFile(jobsFile)
				var jobs []worker.Document
				sc := bufio.NewScanner(bytes.NewReader(raw))
				for sc.Scan() {
					if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
						var j worker.Document
						if err := json.Unmarshal(line, &j); err != nil {
							t.Fatalf("job line %s: %v", line, err)
						}
						jobs = append(jobs, j)
					}
				}
				return jobs
			}
			deadline := time.Now().Add(20 * time.Second)
			for len(read()) < 5 {
				if time.Now().After(deadline) {
					t.Fatalf("%d jobs within 20s; work:\n%s\nserve:\n%s", len(read()), work.out.String(), again.out.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(time.Second)
			items, events := 0, 0
			for _, j := range read() {
				items += len(j.Summary.Items)
				events += j.Summary.Events
				if j.Release != "released" {
					t.Errorf("job %s: release %s", j.Key, j.Release)
				}
			}
			if n := len(read()); n != 5 || items != 50 || events != 50 {
				t.Fatalf("%d jobs with %d items and %d events after the restart; want 5, 50, 50", n, items, events)
			}
			work.stop(t)
			again.stop(t)
		})
	}
}
