package worker

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// TestMissingWatch: a steady share of missing rounds is warned about once a
// minute, with the likely causes; a few among many released are not.
func TestMissingWatch(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var m missingWatch
	now := time.Unix(1_800_000_000, 0)
	for i := range 100 {
		r := debounce.ReleaseReleased
		if i%20 == 0 {
			r = debounce.ReleaseMissing // 5 of 100: a round that expired now and then
		}
		m.note(r, now.Add(time.Duration(i)*100*time.Millisecond), log)
	}
	if buf.Len() != 0 {
		t.Fatalf("warned for 5 missing of 100: %s", buf.String())
	}
	now = now.Add(2 * time.Minute)
	for i := range 30 {
		m.note(debounce.ReleaseMissing, now.Add(time.Duration(i)*time.Second), log)
	}
	if n := strings.Count(buf.String(), "many jobs find their round missing"); n != 1 {
		t.Fatalf("%d warnings for 30 missing in 30 s, want 1:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "another Redis") || !strings.Contains(buf.String(), "noeviction") {
		t.Errorf("the warning does not give the likely causes: %s", buf.String())
	}
}
