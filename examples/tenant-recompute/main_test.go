package main

import (
	"strings"
	"testing"
)

// TestExample runs the example on in-process servers: run fails unless the
// 1,400 events became exactly one job per tenant covering all its events.
func TestExample(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	err := run("", "", &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "job: recompute tenant"); got != 3 {
		t.Errorf("%d jobs reported, want 3", got)
	}
}
