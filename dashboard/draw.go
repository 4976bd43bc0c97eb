package dashboard

import (
	"bytes"
	"fmt"
	"html"
	"time"
)

// drawTimeline draws a timeline as SVG: one row per round, time running
// left to right; the round's span from its opening to its due time, its
// events (each one's tick when recorded, else the first-to-last band with
// the count), the due time, and the job's start and finish. This is the
// one place that draws: a shared renderer (internal/timeline, for coalesce
// simulate) can replace its body, taking the same Timeline.
func drawTimeline(tl Timeline) []byte {
	const (
		width, left, right = 960.0, 150.0, 20.0
		rowH, top          = 34.0, 30.0
	)
	var b bytes.Buffer
	height := top + rowH*float64(max(len(tl.Rounds), 1)) + 30
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="system-ui,sans-serif" font-size="11">`, width, height, width, height)
	b.WriteString(`<rect width="100%" height="100%" fill="#fff"/>`)
	if len(tl.Rounds) == 0 {
		fmt.Fprintf(&b, `<text x="10" y="40" fill="#555">No round of this key is pending, and this daemon has not opened one recently.</text></svg>`)
		return b.Bytes()
	}
	lo, hi := tl.Now, tl.Now
	for _, r := range tl.Rounds {
		for _, t := range []time.Time{r.OpenedAt, r.FirstSeen, r.LastSeen, r.DueAt, r.StartedAt, r.EndedAt} {
			if t.IsZero() {
				continue
			}
			if t.Before(lo) {
				lo = t
			}
			if t.After(hi) {
				hi = t
			}
		}
	}
	span := hi.Sub(lo)
	if span < 2*time.Second {
		span = 2 * time.Second
	}
	lo = lo.Add(-span / 20)
	span += span / 10
	x := func(t time.Time) float64 { return left + (width-left-right)*float64(t.Sub(lo))/float64(span) }
	// Axis: five labelled ticks and "now".
	axisY := height - 18
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/>`, left, axisY, width-right, axisY)
	for i := 0; i <= 4; i++ {
		t := lo.Add(span * time.Duration(i) / 4)
		anchor := [...]string{"start", "middle", "middle", "middle", "end"}[i]
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/><text x="%.1f" y="%.1f" fill="#555" text-anchor="%s">%s</text>`,
			x(t), axisY, x(t), axisY+4, x(t), axisY+15, anchor, t.Local().Format("15:04:05"))
	}
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#c33" stroke-dasharray="3,3"/><text x="%.1f" y="%.1f" fill="#c33" text-anchor="middle">now</text>`,
		x(tl.Now), top-12, x(tl.Now), axisY, x(tl.Now), top-16)
	for i, r := range tl.Rounds {
		y := top + rowH*float64(i)
		mid := y + rowH/2
		fmt.Fprintf(&b, `<g class="round" data-round="%s" data-state="%s">`, r.Round, html.EscapeString(r.State))
		fmt.Fprintf(&b, `<text x="6" y="%.1f" fill="#222">%s</text><text x="6" y="%.1f" fill="#777">%s · %d ev</text>`, mid-3, r.Round, mid+10, html.EscapeString(r.State), r.Events)
		end := r.DueAt
		if end.IsZero() {
			end = r.OpenedAt
		}
		if !r.StartedAt.IsZero() && r.StartedAt.After(end) {
			end = r.StartedAt
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="10" rx="3" fill="#dbe8f7" stroke="#8fb3dd"/>`, x(r.OpenedAt), mid-5, max(x(end)-x(r.OpenedAt), 2))
		if len(r.EventsAt) > 0 {
			for _, t := range r.EventsAt {
				fmt.Fprintf(&b, `<line class="event" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#1f5fa8" stroke-width="1.5"/>`, x(t), mid-8, x(t), mid+8)
			}
		} else if !r.FirstSeen.IsZero() {
			fmt.Fprintf(&b, `<rect class="events" x="%.1f" y="%.1f" width="%.1f" height="6" fill="#1f5fa8"/>`, x(r.FirstSeen), mid-3, max(x(r.LastSeen)-x(r.FirstSeen), 2))
		}
		if !r.DueAt.IsZero() {
			fmt.Fprintf(&b, `<path class="due" d="M%.1f %.1fl5 5l-5 5l-5 -5z" fill="#e0a020"><title>due %s</title></path>`, x(r.DueAt), mid-5, r.DueAt.UTC().Format(time.RFC3339))
		}
		if !r.StartedAt.IsZero() {
			fmt.Fprintf(&b, `<path class="start" d="M%.1f %.1fl8 6l-8 6z" fill="#2a9d4b"><title>job started %s</title></path>`, x(r.StartedAt), mid-6, r.StartedAt.UTC().Format(time.RFC3339))
		}
		if !r.EndedAt.IsZero() {
			fmt.Fprintf(&b, `<rect class="finish" x="%.1f" y="%.1f" width="6" height="12" fill="#2a9d4b"><title>job finished %s</title></rect>`, x(r.EndedAt), mid-6, r.EndedAt.UTC().Format(time.RFC3339))
		}
		b.WriteString(`</g>`)
	}
	b.WriteString(`</svg>`)
	return b.Bytes()
}
