package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/worker"
)

const exclusiveConfig = `policies:
  recompute:
    mode: debounce
    window: 1s
    key_fields: [tenant]
    exclusive: true
    lease: 2s
`

// TestExclusiveKeysAcrossWorkerProcesses is the scenario: a 1 s
// window, a 2.5 s job, events every 300 ms for three tenants, two
// `coalesce work --exec` processes. Without exclusive keys such a run had
// 28 overlapping pairs of one tenant's jobs in 9 s. Checked from the jobs'
// own start and end times (the 2.5 s jobs outlast their 2 s lease, so the
// workers must refresh it): no two jobs of a tenant overlap, every event is
// in exactly one job (the events of a tenant's jobs add up to what was
// submitted), and each tenant's last event is covered by a job that started
// after it.
func TestExclusiveKeysAcrossWorkerProcesses(t *testing.T) {
	t.Parallel()
	sd := serveEmbedded(t, exclusiveConfig)
	dir, cfgPath, natsAddr, redisAddr, serve, base := sd.dir, sd.cfgPath, sd.natsAddr, sd.redisAddr, sd.serve, sd.base
	runs := filepath.Join(dir, "runs.ndjson")
	script := `t0=$(date +%s.%N); doc=$(cat); sleep 2.5; t1=$(date +%s.%N); printf '{"start":%s,"end":%s,"job":%s}\n' "$t0" "$t1" "$doc" >> ` + runs
	var workers []*proc
	for range 2 {
		workers = append(workers, start(t, "work", "--config", cfgPath, "--redis", "redis://"+redisAddr+"/0", "--nats", "nats://"+natsAddr,
			"--type", "recompute", "--concurrency", "4", "--exec", script))
	}

	submitted := map[string]int{}
	last := map[string]time.Time{}
	keyOf := map[string]string{} // round key -> tenant
	end := time.Now().Add(8 * time.Second)
	for time.Now().Before(end) {
		for _, tenant := range []string{"a", "b", "c"} {
			resp, err := http.Post(base+"/v1/events", "application/json", strings.NewReader(`{"type":"recompute","args":{"tenant":"`+tenant+`"}}`))
			if err != nil {
				t.Fatal(err)
			}
			var d struct{ Outcome, Key string }
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err := json.Unmarshal(body, &d); err != nil || resp.StatusCode != 200 {
				t.Fatalf("submit: %d %s", resp.StatusCode, body)
			}
			submitted[tenant]++
			last[tenant] = time.Now()
			keyOf[d.Key] = tenant
		}
		time.Sleep(300 * time.Millisecond)
	}

	type run struct {
		Start, End float64
		Job        worker.Document
	}
	read := func() map[string][]run {
		out := map[string][]run{}
		for _, r := range readNDJSON[run](t, runs) {
			out[keyOf[r.Job.Key]] = append(out[keyOf[r.Job.Key]], r)
		}
		return out
	}
	covered := func(got map[string][]run) bool {
		for tenant, n := range submitted {
			sum := 0
			for _, r := range got[tenant] {
				sum += r.Job.Summary.Events
			}
			if sum < n {
				return false
			}
		}
		return true
	}
	var got map[string][]run
	for deadline := time.Now().Add(40 * time.Second); !covered(got); time.Sleep(200 * time.Millisecond) {
		if got = read(); time.Now().After(deadline) {
			t.Fatalf("within 40 s of the last event, the jobs cover %v of %v events:\n%s\n%s", got, submitted, workers[0].out.String(), workers[1].out.String())
		}
	}
	time.Sleep(4 * time.Second) // no job more
	got = read()
	for tenant, n := range submitted {
		rs := got[tenant]
		sort.Slice(rs, func(i, j int) bool { return rs[i].Start < rs[j].Start })
		sum := 0
		for i, r := range rs {
			sum += r.Job.Summary.Events
			if i > 0 && r.Start < rs[i-1].End {
				t.Errorf("tenant %s: job %d started at %.3f, before job %d ended at %.3f", tenant, i, r.Start, i-1, rs[i-1].End)
			}
		}
		if sum != n {
			t.Errorf("tenant %s: its %d jobs cover %d events, %d were submitted", tenant, len(rs), sum, n)
		}
		if lastStart := time.Unix(0, int64(rs[len(rs)-1].Start*1e9)); lastStart.Before(last[tenant]) {
			t.Errorf("tenant %s: its last job started %v before its last event", tenant, last[tenant].Sub(lastStart))
		}
		t.Logf("tenant %s: %d events in %d jobs", tenant, n, len(rs))
	}
	for _, w := range workers {
		w.stop(t)
	}
	serve.stop(t)
}
