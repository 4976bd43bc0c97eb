package timeline_test

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/internal/timeline"
)

var t0 = time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// elements counts the SVG's elements by name, and checks it is well-formed XML.
func elements(t *testing.T, svg []byte) map[string]int {
	t.Helper()
	n := map[string]int{}
	d := xml.NewDecoder(bytes.NewReader(svg))
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return n
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok {
			n[se.Name.Local]++
		}
	}
}

func TestChart(t *testing.T) {
	t.Parallel()
	c := timeline.Chart{Title: "a <b> & c", Rows: []timeline.Row{{
		Label: `tenant_id=1 <script>`,
		Note:  "debounce 5s extend",
		Events: []timeline.Event{
			{At: at(0), Kind: timeline.Opened}, {At: at(2), Kind: timeline.Extended}, {At: at(3), Kind: timeline.Joined},
			{At: at(20), Kind: timeline.Dropped},
		},
		Rounds: []timeline.Round{
			// Extended to its cap, then run for 2 s.
			{Opened: at(0), Dues: []time.Time{at(5), at(7), at(12)}, Cap: at(12), Start: at(12.25), End: at(14.25), Events: 3},
			// Still pending at the end.
			{Opened: at(16), Dues: []time.Time{at(21)}, Cap: at(28), Events: 1},
		},
	}}}
	var b bytes.Buffer
	if err := c.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	n := elements(t, b.Bytes())
	svg := b.String()
	if n["svg"] != 1 || n["title"] < 2 || strings.Contains(svg, "<script>") || !strings.Contains(svg, "&lt;script&gt;") ||
		!strings.Contains(svg, "a &lt;b&gt; &amp; c") {
		t.Fatalf("elements %v:\n%s", n, svg)
	}
	// The rounds: two bars, one run, one job marker; three due ticks
	// (one first, two extensions) for the first round, one for the second;
	// the cap drawn for the round that reached it and the pending one.
	for _, want := range []string{"round: 3 events, first 09:00:00.000, due 09:00:12.000 (extended 2 times), cap 09:00:12.000, job 09:00:12.250 (waited 12.25s)",
		"round: 1 events, first 09:00:16.000, due 09:00:21.000, cap 09:00:28.000, job not run",
		"09:00:20.000 dropped", "09:00:02.000 extended"} {
		if !strings.Contains(svg, want) {
			t.Errorf("no %q in\n%s", want, svg)
		}
	}
	if got := strings.Count(svg, `stroke-dasharray="3 2"`); got != 3 { // two caps and the legend's
		t.Errorf("%d caps drawn, want 2 (and the legend's)", got-1)
	}
	if err := (&timeline.Chart{}).WriteSVG(&b); !errors.Is(err, timeline.ErrEmpty) {
		t.Errorf("empty chart: %v", err)
	}
}

// TestChartSpan: events outside From..To are left out, and the axis is
// labelled in a step that suits the span.
func TestChartSpan(t *testing.T) {
	t.Parallel()
	row := timeline.Row{Label: "k"}
	for i := range 600 {
		row.Events = append(row.Events, timeline.Event{At: at(float64(i)), Kind: timeline.Joined})
	}
	c := timeline.Chart{From: at(60), To: at(120), Rows: []timeline.Row{row}}
	var b bytes.Buffer
	if err := c.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(b.String(), " joined</title>"); got != 61 {
		t.Errorf("%d events drawn, want the 61 in the span", got)
	}
	if !strings.Contains(b.String(), ">10s<") || !strings.Contains(b.String(), ">60s<") {
		t.Errorf("axis labels: %s", b.String())
	}
}

// TestChartLive: the dashboard's use: "now" marked, rounds labelled for the
// page's scripts, a band where single events are not known, compact rows
// without a legend, and a message when there is nothing to draw.
func TestChartLive(t *testing.T) {
	t.Parallel()
	now := at(60)
	c := timeline.Chart{Now: now, RowHeight: 20, NoLegend: true, Rows: []timeline.Row{
		{Label: "0000000000000001", Note: "finished · 4 ev", Rounds: []timeline.Round{{ID: "0000000000000001", State: "finished",
			Opened: at(0), Dues: []time.Time{at(10)}, Start: at(11), End: at(15), FirstSeen: at(0), LastSeen: at(5), Events: 4}}},
		{Label: "0000000000000002", Note: "pending · 2 ev", Events: []timeline.Event{{At: at(55), Kind: timeline.Opened}, {At: at(59), Kind: timeline.Joined}},
			Rounds: []timeline.Round{{ID: "0000000000000002", State: "pending", Opened: at(55), Dues: []time.Time{at(65)}, Events: 2}}},
	}}
	var b bytes.Buffer
	if err := c.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	elements(t, b.Bytes())
	for want, n := range map[string]int{`class="round"`: 2, `data-state="pending"`: 1, `class="due"`: 2, `class="start"`: 1, `class="finish"`: 1,
		`class="event"`: 2, `class="events"`: 1, `class="now"`: 1, "opens a round": 0} {
		if got := strings.Count(svg, want); got != n {
			t.Errorf("%s: %d, want %d", want, got, n)
		}
	}
	// Rows of at least MinRowHeight: 44 + 2*34 + 40.
	if !strings.Contains(svg, `height="152"`) {
		t.Errorf("height: %.200s", svg)
	}
	b.Reset()
	if err := (&timeline.Chart{Empty: "No round & none pending"}).WriteSVG(&b); err != nil || !strings.Contains(b.String(), "No round &amp; none pending") {
		t.Errorf("empty: %v %s", err, b.String())
	}
}
