package dashboard

import (
	"bytes"
	"fmt"
	"time"

	"github.com/coalesce-io/coalesce/internal/timeline"
)

// drawTimeline draws a timeline as SVG with the renderer coalesce simulate
// draws with (internal/timeline): one row per round, time running left to
// right, "now" marked; the round's span from its opening to its due time
// (or its job), its events (each one's tick when recorded, else the
// first-to-last band), the due time, and the job's start and finish.
func drawTimeline(tl Timeline) []byte {
	c := timeline.Chart{Now: tl.Now, RowHeight: 40, NoLegend: true,
		Empty: "No round of this key is pending, and this daemon has not opened one recently."}
	for _, r := range tl.Rounds {
		row := timeline.Row{Label: r.Round.String(), Note: fmt.Sprintf("%s · %d ev", r.State, r.Events)}
		rd := timeline.Round{ID: r.Round.String(), State: r.State, Opened: r.OpenedAt, Start: r.StartedAt, End: r.EndedAt,
			Events: r.Events, FirstSeen: r.FirstSeen, LastSeen: r.LastSeen}
		if rd.Opened.IsZero() {
			rd.Opened = r.FirstSeen
		}
		if !r.DueAt.IsZero() {
			rd.Dues = []time.Time{r.DueAt}
		}
		for i, t := range r.EventsAt {
			kind := timeline.Joined
			if i == 0 && t.Equal(r.OpenedAt) {
				kind = timeline.Opened
			}
			row.Events = append(row.Events, timeline.Event{At: t, Kind: kind})
		}
		row.Rounds = []timeline.Round{rd}
		c.Rows = append(c.Rows, row)
	}
	var b bytes.Buffer
	_ = c.WriteSVG(&b) // a buffer does not fail; a chart with rows always has a span
	return b.Bytes()
}
