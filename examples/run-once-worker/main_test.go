package main

import (
	"context"
	"strings"
	"testing"
)

// TestExample runs the example on in-process servers: run fails unless the
// SMS is sent exactly once and the redelivery is acknowledged as done.
func TestExample(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	err := run(context.Background(), "", "", &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "SMS sent 1 time(s)\n") {
		t.Error(`output lacks "SMS sent 1 time(s)"`)
	}
}
