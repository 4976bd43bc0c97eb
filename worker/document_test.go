package worker_test

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/fingerprint"
	"github.com/coalesce-io/coalesce/worker"
)

// TestDocumentContract pins the JSON a worker in another language reads
// (`coalesce work --exec` on stdin): every field name and format, against
// testdata/job_document.json. A change here breaks those workers; only
// add fields, and add them to the file.
func TestDocumentContract(t *testing.T) {
	fp, err := fingerprint.FromJSON("recompute", []byte(`{"tenant_id":7}`))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	job := &worker.Job{
		Job: debounce.Job{Type: "recompute", Key: debounce.RoundKey(fp), Fingerprint: fp, Token: 0x00688c648c70ab8e,
			Mode: debounce.ModeDebounce, Payload: debounce.PayloadAccumulate, Args: json.RawMessage(`{"tenant_id":7,"id":1}`),
			OpenedAt: at, DueAt: at.Add(10 * time.Second), TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		Summary: debounce.Summary{Events: 3, FirstSeen: at, LastSeen: at.Add(2 * time.Second),
			Items: []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`2`)}},
		Release: debounce.ReleaseReleased,
		Attempt: 1,
	}
	got, err := json.MarshalIndent(job.Document(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/job_document.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(want)) {
		t.Errorf("the job document changed:\n%s\nwant (testdata/job_document.json):\n%s", got, want)
	}
	// A bypassed job (no round) has no round field, and an id of its own;
	// a job due now, no due_at.
	bypassed := &worker.Job{Job: debounce.Job{Type: "t", Key: debounce.RoundKey(fp), Args: json.RawMessage(`{}`), Bypass: "_0123456789abcdef"}}
	bare, _ := json.Marshal(bypassed.Document())
	var m map[string]any
	_ = json.Unmarshal(bare, &m)
	for _, absent := range []string{"round", "due_at", "traceparent", "mode", "payload"} {
		if _, ok := m[absent]; ok {
			t.Errorf("a bypassed job's document has %q: %s", absent, bare)
		}
	}
	if want := debounce.RoundKey(fp).String() + "._0123456789abcdef"; m["id"] != want {
		t.Errorf("a bypassed job's id %v, want %s", m["id"], want)
	}
}
