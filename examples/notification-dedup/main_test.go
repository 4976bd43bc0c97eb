package main

import (
	"context"
	"strings"
	"testing"
)

// TestExample runs the example on in-process servers: run fails unless every
// duplicate is dropped and exactly the expected pushes arrive in time.
func TestExample(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	err := run(context.Background(), "", "", &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "-> duplicate"); got != 4 {
		t.Errorf("%d events reported duplicate, want 4", got)
	}
}
