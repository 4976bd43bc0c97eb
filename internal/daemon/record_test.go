package daemon_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/daemon"
	"github.com/coalesce-io/coalesce/simulate"
)

// TestRecorder: accepted events are written as an event log coalesce
// simulate reads back, refused ones are not, and the file stops growing at
// its limit (appending to what is there).
func TestRecorder(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.ndjson")
	r, err := daemon.OpenRecorder(path, 400, nil)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	ok := debounce.Decision{Outcome: debounce.OutcomeScheduled}
	r.Record(debounce.Event{Type: "r", Args: json.RawMessage(`{"tenant_id": 1}`)}, t0, ok, nil)
	r.Record(debounce.Event{Type: "r", Args: json.RawMessage(`{}`)}, t0, debounce.Decision{}, debounce.ErrInvalidEvent)
	r.Record(debounce.Event{Type: "r", Args: json.RawMessage(`{"tenant_id":2}`), Key: "k"}, t0.Add(time.Second), debounce.Decision{Outcome: debounce.OutcomeCoalesced}, nil)
	for range 10 { // past the 400 bytes
		r.Record(debounce.Event{Type: "r", Args: json.RawMessage(`{"tenant_id":3}`)}, t0.Add(2*time.Second), ok, nil)
	}
	dropped, err := r.Close()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	if len(raw) > 400 || dropped == 0 || !strings.HasPrefix(string(raw),
		`{"at":"2026-01-02T03:04:05.678Z","type":"r","args":{"tenant_id": 1},"outcome":"scheduled"}`+"\n"+
			`{"at":"2026-01-02T03:04:06.678Z","type":"r","args":{"tenant_id":2},"key":"k","outcome":"coalesced"}`+"\n") {
		t.Fatalf("%d bytes, %d dropped:\n%s", len(raw), dropped, raw)
	}
	var evs []simulate.Event
	for ev, err := range simulate.ReadLog(strings.NewReader(string(raw))) {
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	if len(evs)+int(dropped) != 12 || evs[1].Key != "k" || !evs[0].At.Equal(t0) {
		t.Fatalf("read back %+v, %d dropped", evs, dropped)
	}
	// Opened again: appends, and is full at once.
	r, err = daemon.OpenRecorder(path, 400, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Record(debounce.Event{Type: "r", Args: json.RawMessage(`{"tenant_id":4}`)}, t0, ok, nil)
	if dropped, err := r.Close(); err != nil || dropped != 1 {
		t.Fatalf("a full file: %d dropped, %v", dropped, err)
	}
	if _, err := daemon.OpenRecorder(filepath.Join(t.TempDir(), "no", "such", "dir"), 0, nil); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file that cannot be created: %v", err)
	}
}
