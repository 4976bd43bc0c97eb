package main

import (
	"context"
	"strings"
	"testing"

	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/publisher"
)

func TestDedupeStreamCommand(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	_, js := srv.Connect(t)
	ctx := context.Background()
	if _, err := publisher.New(ctx, js, nil); err != nil {
		t.Fatal(err)
	}
	// A queue flooded before coalesce: the same recomputation 5 times, spelled differently.
	for _, body := range []string{`{"tenant_id":1}`, `{ "tenant_id" : 1 }`, `{"tenant_id":1.0}`, `{"tenant_id":2}`, `{"tenant_id":1}`} {
		if _, err := js.Publish(ctx, "co.jobs.recompute", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	count := func() uint64 {
		s, _ := js.Stream(ctx, publisher.DefaultStream)
		info, _ := s.Info(ctx)
		return info.State.Msgs
	}
	code, out, stderr := runCLI(t, "", "dedupe-stream", "--nats", srv.URL)
	if code != 0 || !strings.Contains(out, "would remove") || count() != 5 {
		t.Fatalf("dry run: exit %d, %d messages left, out %q stderr %q", code, count(), out, stderr)
	}
	code, out, stderr = runCLI(t, "", "dedupe-stream", "--nats", srv.URL, "--apply")
	if code != 0 || count() != 2 {
		t.Fatalf("apply: exit %d, %d messages left (want 2), out %q stderr %q", code, count(), out, stderr)
	}
	if code, _, stderr := runCLI(t, "", "dedupe-stream", "--fields", "noequals"); code != 2 || !strings.Contains(stderr, "TYPE=field1,field2") {
		t.Errorf("bad --fields: exit %d %q", code, stderr)
	}
}
