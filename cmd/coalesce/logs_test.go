package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/internal/testenv"
)

// TestServeExternalLogsOnlyWhatHappened: `serve --redis URL` (NATS
// embedded) and `serve --redis URL --nats URL` say nothing about an
// embedded Redis they do not run (it logged "embedded redis: no snapshot
// in the data folder"), and a normal SIGTERM is no failure (no ERROR line,
// no "reaper: pass failed ... context canceled").
func TestServeExternalLogsOnlyWhatHappened(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		nats bool
	}{{"redis only", false}, {"redis and nats", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rs := testenv.NewRedisWith(t, "--appendonly", "yes")
			httpAddr := freeAddr(t)
			args := []string{"serve", "--config", filepath.Join("testdata", "walk.yaml"), "--redis", rs.URL, "--http", httpAddr}
			if tc.nats {
				args = append(args, "--nats", testenv.NATS(t).URL)
			} else {
				args = append(args, "--nats-listen", freeAddr(t), "--data", t.TempDir())
			}
			serve := start(t, args...)
			waitHTTP(t, "http://"+httpAddr+"/readyz", serve)
			if code, out, stderr := runBin(t, "", "submit", "--server", "http://"+httpAddr, "--type", "recompute", "--args", `{"tenant_id":1}`); code != 0 {
				t.Fatalf("submit: %d %s %s", code, out, stderr)
			}
			if code := serve.stop(t); code != 0 {
				t.Fatalf("serve exited %d after SIGTERM:\n%s", code, serve.out.String())
			}
			out := serve.out.String()
			for _, bad := range []string{"embedded redis", "snapshot", "pass failed", "level=ERROR", "context canceled"} {
				if strings.Contains(out, bad) {
					t.Errorf("serve %s logged %q:\n%s", strings.Join(args[3:], " "), bad, out)
				}
			}
		})
	}
}

// TestWorkLogsEachJobAndItsShutdown: `coalesce work` logs a line per job it
// ran (type, key, events) and one when it stops, with what it did (it
// logged nothing per job and nothing at shutdown).
func TestWorkLogsEachJobAndItsShutdown(t *testing.T) {
	t.Parallel()
	cfg, err := os.ReadFile(filepath.Join("testdata", "walk.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sd := serveEmbedded(t, string(cfg))
	work := start(t, "work", "--redis", "redis://"+sd.redisAddr+"/0", "--nats", "nats://"+sd.natsAddr, "--config", sd.cfgPath,
		"--type", "recompute", "--exec", "cat >/dev/null")
	for _, args := range []string{`{"tenant_id":1}`, `{"tenant_id":1}`, `{"tenant_id":2}`} {
		if code, out, stderr := runBin(t, "", "submit", "--server", sd.base, "--type", "recompute", "--args", args); code != 0 {
			t.Fatalf("submit: %d %s %s", code, out, stderr)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); strings.Count(work.out.String(), `msg="job ran"`) < 2; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("work logged no line for each of the 2 jobs within 30 s:\n%s", work.out.String())
		}
	}
	if code := work.stop(t); code != 0 {
		t.Fatalf("work exited %d after SIGTERM:\n%s", code, work.out.String())
	}
	out := work.out.String()
	for _, want := range []string{
		`msg="job ran" job_type=recompute key=`, " events=2 ", " events=1 ",
		`msg="shutting down: no new jobs; finishing the running ones"`,
		`msg=stopped ran=2 failed=0 dead_lettered=0`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("work's log lacks %q:\n%s", want, out)
		}
	}
}

// TestBenchStoppedBySIGTERM: a bench stopped by SIGTERM reports what it
// sent, not the events it never sent as errors, and exits 0 (it exited 1
// with every unsent event counted as failed).
func TestBenchStoppedBySIGTERM(t *testing.T) {
	t.Parallel()
	rs := testenv.NewRedis(t)
	rdb := rs.Client(t)
	bench := start(t, "bench", "--redis", rs.URL, "--events", "2000000", "--keys", "1000", "--concurrency", "8", "--payload", "last", "--window", "1m")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if n, _ := rdb.DBSize(context.Background()).Result(); n > 0 {
			break // deciding
		}
		if time.Now().After(deadline) || bench.cmd.ProcessState != nil {
			t.Fatalf("bench wrote nothing to Redis within 60 s:\n%s", bench.out.String())
		}
	}
	time.Sleep(500 * time.Millisecond)
	if code := bench.stop(t); code != 0 {
		t.Fatalf("bench exited %d after SIGTERM:\n%s", code, bench.out.String())
	}
	out := bench.out.String()
	var res struct {
		Events      int     `json:"events"`
		Errors      int64   `json:"errors"`
		EventsPerS  float64 `json:"events_per_s"`
		Interrupted bool    `json:"interrupted"`
		Sent        int     `json:"sent"`
	}
	line := out[strings.Index(out, "{"):]
	line = line[:strings.Index(line, "\n")]
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		t.Fatalf("bench's result: %v:\n%s", err, out)
	}
	if !res.Interrupted || res.Sent <= 0 || res.Sent >= res.Events || res.Errors != 0 || res.EventsPerS <= 0 {
		t.Errorf("bench stopped: interrupted %v, sent %d of %d, %d errors, %v events/s; want interrupted, some sent, no errors:\n%s",
			res.Interrupted, res.Sent, res.Events, res.Errors, res.EventsPerS, out)
	}
	if !strings.Contains(out, "stopped after") {
		t.Errorf("bench did not say it was stopped:\n%s", out)
	}
}
