package dashboard

import (
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// TestSeriesRatesFromSamples: rates are differences over the interval, a
// counter reset (a restart) counts nothing instead of a negative rate, and
// events per job is 0 where no job was published.
func TestSeriesRatesFromSamples(t *testing.T) {
	t.Parallel()
	r := newRing(3)
	t0 := time.Unix(1_000_000, 0)
	r.add(t0, Counters{"a": {Events: 10, Jobs: 2}})
	r.add(t0.Add(5*time.Second), Counters{"a": {Events: 60, Jobs: 7}})
	r.add(t0.Add(10*time.Second), Counters{"a": {Events: 60, Jobs: 7}})
	r.add(t0.Add(15*time.Second), Counters{"a": {Events: 5, Jobs: 1}}) // restarted; the ring drops the first
	s := series(r.all())["a"]
	if len(s.At) != 2 || s.EventsPerSec[0] != 0 || s.EventsPerJob[0] != 0 || s.EventsPerSec[1] != 0 || s.JobsPerSec[1] != 0 {
		t.Errorf("series %+v", s)
	}
	r2 := newRing(10)
	r2.add(t0, Counters{"a": {Events: 10, Jobs: 2}})
	r2.add(t0.Add(5*time.Second), Counters{"a": {Events: 60, Jobs: 7}})
	s = series(r2.all())["a"]
	if s.EventsPerSec[0] != 10 || s.JobsPerSec[0] != 1 || s.EventsPerJob[0] != 10 {
		t.Errorf("series %+v, want 10 events/s, 1 job/s, 10 events per job", s)
	}
}

// TestHistoryBounds: openings are kept (8 rounds per key, maxKeys keys,
// oldest forgotten first); joins are recorded only for a watched key, and
// a join of a round opened elsewhere is not invented into one.
func TestHistoryBounds(t *testing.T) {
	t.Parallel()
	h := NewHistory(2)
	now := time.Now()
	k := func(b byte) debounce.RoundKey { return debounce.RoundKey{b} }
	for i := range 10 {
		h.Decided("t", &debounce.Decision{Outcome: debounce.OutcomeScheduled, Key: k(1), Round: debounce.Token(i + 1), DueAt: now})
		h.Decided("t", &debounce.Decision{Outcome: debounce.OutcomeCoalesced, Key: k(1), Round: debounce.Token(i + 1)})
	}
	rs := h.rounds("t", k(1))
	if len(rs) != roundsPerKey || rs[0].token != 3 || rs[7].token != 10 || rs[7].count != 1 || len(rs[7].events) != 0 {
		t.Fatalf("rounds %+v", rs)
	}
	h.Watch("t", k(1), now)
	h.Decided("t", &debounce.Decision{Outcome: debounce.OutcomeCoalesced, Key: k(1), Round: 10})
	h.Decided("t", &debounce.Decision{Outcome: debounce.OutcomeCoalesced, Key: k(1), Round: 99}) // opened elsewhere
	rs = h.rounds("t", k(1))
	if len(rs) != roundsPerKey || rs[7].count != 2 || len(rs[7].events) != 1 {
		t.Errorf("after a watched join: %+v", rs[7])
	}
	h.Decided("t", &debounce.Decision{Outcome: debounce.OutcomePublished, Key: k(2), Round: 1})
	h.Decided("t", &debounce.Decision{Outcome: debounce.OutcomePublished, Key: k(3), Round: 1})
	if h.rounds("t", k(1)) != nil || h.rounds("t", k(3)) == nil {
		t.Error("the oldest key is not the one forgotten")
	}
}

// TestDrawTimelineIsSVG: the picture is well-formed XML with a row per
// round, its due time, start and finish, and each recorded event.
func TestDrawTimelineIsSVG(t *testing.T) {
	t.Parallel()
	now := time.Now()
	tl := Timeline{Now: now, Rounds: []TimelineRound{
		{Round: 1, State: "finished", OpenedAt: now.Add(-time.Minute), DueAt: now.Add(-50 * time.Second), StartedAt: now.Add(-49 * time.Second), EndedAt: now.Add(-48 * time.Second), FirstSeen: now.Add(-time.Minute), LastSeen: now.Add(-55 * time.Second), Events: 4},
		{Round: 2, State: "pending", OpenedAt: now.Add(-5 * time.Second), DueAt: now.Add(5 * time.Second), EventsAt: []time.Time{now.Add(-5 * time.Second), now.Add(-time.Second)}, Events: 2},
	}}
	svg := string(drawTimeline(tl))
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Fatalf("not XML: %v\n%s", err, svg)
	}
	for want, n := range map[string]int{`class="round"`: 2, `class="due"`: 2, `class="start"`: 1, `class="finish"`: 1, `class="event"`: 2, `class="events"`: 1} {
		if got := strings.Count(svg, want); got != n {
			t.Errorf("%s: %d, want %d", want, got, n)
		}
	}
	if empty := string(drawTimeline(Timeline{Now: now})); !strings.Contains(empty, "No round") {
		t.Errorf("empty timeline: %s", empty)
	}
}

// BenchmarkHistoryDecided: what the daemon's Decision hook adds per event:
// a join of an unwatched key, and an opening.
func BenchmarkHistoryDecided(b *testing.B) {
	h := NewHistory(0)
	b.Run("join", func(b *testing.B) {
		d := debounce.Decision{Outcome: debounce.OutcomeCoalesced, Key: debounce.RoundKey{1}, Round: 7}
		for b.Loop() {
			h.Decided("t", &d)
		}
	})
	b.Run("opening", func(b *testing.B) {
		d := debounce.Decision{Outcome: debounce.OutcomeScheduled, Round: 7}
		i := 0
		for b.Loop() {
			i++
			d.Key[0], d.Key[1], d.Key[2] = byte(i), byte(i>>8), byte(i>>16)
			h.Decided("t", &d)
		}
	})
}
