package main

import (
	"strings"
	"testing"
)

// TestExample runs the example on in-process servers: run fails unless the
// 1,400 events became one job per round, each event in exactly one job
// (under -race on a loaded machine the burst may outlast the 2 s window, and
// a tenant then has two rounds).
func TestExample(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	err := run("", "", &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "job: recompute tenant"); got < 3 {
		t.Errorf("%d jobs reported, want at least one per tenant", got)
	}
}
