package main

import (
	"context"
	"strings"
	"testing"

	"github.com/coalesce-io/coalesce/internal/testenv"
)

// TestServeChecksRedisPersistence: a Redis that keeps nothing across a
// restart is warned about at start (and refused on request); one with AOF is
// named as such.
func TestServeChecksRedisPersistence(t *testing.T) {
	t.Parallel()
	rs := testenv.NewRedis(t) // --save "" --appendonly no
	nats := testenv.NATS(t)
	args := func(extra ...string) []string {
		return append([]string{"serve", "--redis", rs.URL, "--nats", nats.URL, "--http", freeAddr(t)}, extra...)
	}
	run := func(extra ...string) *proc {
		a := args(extra...)
		p := start(t, a...)
		waitHTTP(t, "http://"+a[6]+"/readyz", p)
		return p
	}
	p := run()
	if out := p.out.String(); !strings.Contains(out, "neither AOF nor RDB persistence") || !strings.Contains(out, "appendonly yes") {
		t.Errorf("no warning about a Redis without persistence:\n%s", out)
	}
	p.stop(t)

	code, _, stderr := runBin(t, "", args("--refuse-no-persistence")...)
	if code != 1 || !strings.Contains(stderr, "neither AOF nor RDB persistence") {
		t.Errorf("--refuse-no-persistence: exit %d, stderr %q", code, stderr)
	}

	if err := rs.Client(t).ConfigSet(context.Background(), "appendonly", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	p = run("--refuse-no-persistence")
	if out := p.out.String(); strings.Contains(out, "neither AOF nor RDB") || !strings.Contains(out, "AOF with appendfsync everysec") {
		t.Errorf("with AOF on:\n%s", out)
	}
	p.stop(t)
}
