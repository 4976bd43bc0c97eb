package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/worker"
)

const protocolConfig = `policies:
  digest:
    mode: debounce
    window: 1s
    payload: accumulate
    key_fields: [user]
  sync:
    mode: debounce
    window: 1s
    extend: true
    max_wait: 4s
    key_fields: [user]
  invoice:
    mode: dedup
    until: success
    key_fields: [order]
  tenant_sync:
    mode: dedup
    key_fields: [tenant]
    exclusive: true
    lease: 2s
`

// nodeWorker finds node and the example's installed packages, or skips
// (fails when servers are required, as in CI, which runs npm ci there).
func nodeWorker(t *testing.T) (node, dir string) {
	t.Helper()
	dir, _ = filepath.Abs("../../examples/node-worker")
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", "nats", "package.json"))
	}
	if err != nil {
		if os.Getenv("COALESCE_REQUIRE_SERVERS") != "" {
			t.Fatalf("node and examples/node-worker's packages are required (npm ci --prefix examples/node-worker): %v", err)
		}
		t.Skipf("no node or no examples/node-worker/node_modules: %v", err)
	}
	return node, dir
}

type nodeRun struct {
	Started, Ended float64
	Job            worker.Document
}

// TestNodeWorkerOverTheProtocol runs examples/node-worker (Node, the
// official nats client) against the built daemon: it consumes the job
// stream itself and starts and finishes each job over NATS request/reply.
// Checked from the Node handler's own log: an accumulate job carries every
// item and an event after its start opens the next round; an extended
// round's job runs once, after its last extension, with every event; and
// finish releases a dedup reservation held until success.
func TestNodeWorkerOverTheProtocol(t *testing.T) {
	t.Parallel()
	node, dir := nodeWorker(t)
	sd := serveEmbedded(t, protocolConfig)
	tmp, natsAddr, serve, base := sd.dir, sd.natsAddr, sd.serve, sd.base
	logPath := filepath.Join(tmp, "runs.ndjson")
	cmd := exec.Command(node, "worker.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NATS_URL=nats://"+natsAddr, "JOB_TYPE=digest,sync,invoice,tenant_sync", "JOB_LOG="+logPath)
	nw := startCmd(t, cmd)
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(nw.out.String(), "working"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the Node worker did not start:\n%s", nw.out.String())
		}
	}
	runs := func() map[string][]nodeRun {
		out := map[string][]nodeRun{}
		for _, r := range readNDJSON[nodeRun](t, logPath) {
			out[r.Job.Type] = append(out[r.Job.Type], r)
		}
		return out
	}
	submit := func(line string) string {
		t.Helper()
		code, out, stderr := runBin(t, line+"\n", "submit", "--server", base)
		if code != 0 {
			t.Fatalf("submit %s: exit %d: %s", line, code, stderr)
		}
		return out
	}
	waitRuns := func(typ string, n int, within time.Duration) []nodeRun {
		t.Helper()
		deadline := time.Now().Add(within)
		for len(runs()[typ]) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d %s runs within %v, want %d; node worker:\n%s\nserve:\n%s", len(runs()[typ]), typ, within, n, nw.out.String(), serve.out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		return runs()[typ]
	}

	// Accumulate: three items, one job; an event after it started opens
	// the next round.
	for _, n := range []string{"1", "2", "3"} {
		submit(`{"type":"digest","args":{"user":"ann","n":` + n + `}}`)
	}
	// Extend: three events 600 ms apart push the due time to the last + 1 s.
	var last time.Time
	for i := range 3 {
		if i > 0 {
			time.Sleep(600 * time.Millisecond)
		}
		submit(`{"type":"sync","args":{"user":"bo","i":` + string(rune('0'+i)) + `}}`)
		last = time.Now()
	}
	// Dedup until success: a duplicate until its job finishes (the job
	// takes 2 s; the key is the order alone).
	if out := submit(`{"type":"invoice","args":{"order":7,"sleep_ms":2000}}`); !strings.Contains(out, `"outcome":"published"`) {
		t.Fatalf("first invoice event: %s", out)
	}
	time.Sleep(300 * time.Millisecond) // its job has started
	if out := submit(`{"type":"invoice","args":{"order":7}}`); !strings.Contains(out, `"outcome":"duplicate"`) {
		t.Fatalf("an invoice event while its job runs: %s, want duplicate (until success)", out)
	}

	// Exclusive: a 4 s job; the next round's job of the tenant (opened by
	// an event during the run) waits for it to end. The job outlasts its
	// 2 s lease, so the worker must refresh it (progress), or the second
	// job would start while it runs.
	submit(`{"type":"tenant_sync","args":{"tenant":1,"sleep_ms":4000}}`)
	time.Sleep(300 * time.Millisecond)
	if out := submit(`{"type":"tenant_sync","args":{"tenant":1}}`); !strings.Contains(out, `"outcome":"published"`) {
		t.Fatalf("an event during the exclusive job: %s, want the next round", out)
	}

	d := waitRuns("digest", 1, 15*time.Second)[0].Job
	if d.V != 1 || d.Summary.Events != 3 || len(d.Summary.Items) != 3 || d.Release != "released" || d.Attempt != 1 {
		t.Errorf("digest job: %+v", d)
	}
	if out := submit(`{"type":"digest","args":{"user":"ann","n":4}}`); !strings.Contains(out, `"outcome":"scheduled"`) {
		t.Errorf("an event after the digest job started: %s, want a new round", out)
	}
	d2 := waitRuns("digest", 2, 10*time.Second)[1].Job
	if d2.Summary.Events != 1 || len(d2.Summary.Items) != 1 {
		t.Errorf("the next digest job: %d events, items %s", d2.Summary.Events, d2.Summary.Items)
	}

	s := waitRuns("sync", 1, 15*time.Second)
	if started := time.Unix(0, int64(s[0].Started*1e9)); started.Before(last.Add(700 * time.Millisecond)) {
		t.Errorf("the extended job started %v after the last event, before its extended due time (1 s)", started.Sub(last))
	}
	if s[0].Job.Summary.Events != 3 || s[0].Job.Release != "released" {
		t.Errorf("extended job: %+v", s[0].Job)
	}

	ts := waitRuns("tenant_sync", 2, 20*time.Second)
	if ts[1].Started < ts[0].Ended {
		t.Errorf("the exclusive key's second job started at %.3f, before the first ended at %.3f", ts[1].Started, ts[0].Ended)
	}

	waitRuns("invoice", 1, 10*time.Second)
	// finish (ok) released the reservation: the same order is new again.
	deadline := time.Now().Add(5 * time.Second)
	for {
		out := submit(`{"type":"invoice","args":{"order":7}}`)
		if strings.Contains(out, `"outcome":"published"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the invoice job finished, an event for the same order is still %s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // no extra runs
	for typ, n := range map[string]int{"digest": 2, "sync": 1, "invoice": 2, "tenant_sync": 2} {
		if got := len(runs()[typ]); got != n {
			t.Errorf("%s ran %d times, want %d", typ, got, n)
		}
	}
	// The extended round's earlier schedules were answered "ack"
	// (rescheduled by the daemon) before the one that ran.
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, series := range []string{`coalesce_protocol_total{result="start_ack",type="sync"}`, `coalesce_protocol_total{result="start_run",type="sync"} 1`,
		`coalesce_protocol_total{result="finish_ok",type="invoice"} 2`} {
		if !bytes.Contains(metrics, []byte(series)) {
			t.Errorf("the daemon's /metrics lacks %s", series)
		}
	}
	if t.Failed() {
		t.Logf("node worker:\n%s", nw.out.String())
	}
	nw.stop(t)
	serve.stop(t)
}
