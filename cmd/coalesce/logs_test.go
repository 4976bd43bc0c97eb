package main

import (
	"path/filepath"
	"strings"
	"testing"

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
