// Package timeline draws the rounds of a few keys over time as an SVG
// picture: each event a tick, each round a bar from its first event to its
// job, its due time moved by extensions, its max_wait cap, dropped events,
// and the job as a marker with its run. The simulator draws what it
// predicts with it; anything that knows a key's events and rounds (the
// dashboard's key view) can draw them the same way.
package timeline

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Chart is a picture: rows of keys (or of rounds) over one span of time.
type Chart struct {
	Title string
	// From and To bound the time axis; zero: the rows' earliest and latest
	// times (and Now).
	From, To time.Time
	Rows     []Row
	// Now, when set, is marked on the axis ("now"): a live view.
	Now time.Time
	// Empty is written instead of the rows when there are none (zero: a
	// chart without rows is ErrEmpty).
	Empty string
	// Width in pixels (default DefaultWidth); RowHeight of each row
	// (default DefaultRowHeight, at least MinRowHeight).
	Width, RowHeight int
	// NoLegend leaves the legend out.
	NoLegend bool
}

// Row is one key.
type Row struct {
	Label  string // the key
	Note   string // under the label: the policy, say
	Events []Event
	Rounds []Round
}

// Kind is what became of an event.
type Kind string

// Event kinds.
const (
	Opened   Kind = "opened"   // opened a round (scheduled, published)
	Joined   Kind = "joined"   // joined the pending round (coalesced)
	Extended Kind = "extended" // joined and pushed the due time later
	Dropped  Kind = "dropped"  // throttled or duplicate: no job for it
)

// Event is one event of a key.
type Event struct {
	At   time.Time
	Kind Kind
}

// Round is one round of a key, from its first event to its job.
type Round struct {
	// ID and State, when set, label the round's group (data-round,
	// data-state) for a page's scripts and tests.
	ID, State string
	Opened    time.Time
	// Dues: the due time it was opened with, then each later one an
	// extension set (empty: an immediate job).
	Dues []time.Time
	// Cap: the latest it may be due (first event + max_wait); zero: none.
	// It is drawn for a round that reached it (or is still pending).
	Cap time.Time
	// Start and End: its job's run; zero Start: not run (pending).
	Start, End time.Time
	Events     int
	// FirstSeen and LastSeen, when the row has no Events of it, are drawn
	// as a band: its events happened between them.
	FirstSeen, LastSeen time.Time
}

// Sizes, in pixels.
const (
	DefaultWidth     = 960
	DefaultRowHeight = 64
	MinRowHeight     = 34
)

// Layout, in pixels.
const (
	labelWidth = 230
	rightPad   = 20
	topPad     = 44
	axisHeight = 40
	legendH    = 30
)

// Colours.
const (
	colOpened   = "#1f6feb"
	colJoined   = "#57606a"
	colExtended = "#8250df"
	colDropped  = "#cf222e"
	colWait     = "#b6d4fe"
	colRun      = "#2da44e"
	colCap      = "#cf222e"
	colDue      = "#0a3069"
)

// ErrEmpty is WriteSVG's error for a chart with nothing to draw.
var ErrEmpty = errors.New("timeline: nothing to draw")

// span returns the chart's time span.
func (c *Chart) span() (time.Time, time.Time, bool) {
	from, to := c.From, c.To
	seen := false
	grow := func(t time.Time) {
		if t.IsZero() {
			return
		}
		seen = true
		if c.From.IsZero() && (from.IsZero() || t.Before(from)) {
			from = t
		}
		if c.To.IsZero() && (to.IsZero() || t.After(to)) {
			to = t
		}
	}
	grow(c.Now)
	for _, r := range c.Rows {
		for _, e := range r.Events {
			grow(e.At)
		}
		for _, rd := range r.Rounds {
			for _, t := range []time.Time{rd.Opened, rd.End, rd.Start, rd.Cap, rd.FirstSeen, rd.LastSeen} {
				grow(t)
			}
			for _, d := range rd.Dues {
				grow(d)
			}
		}
	}
	if !seen && (from.IsZero() || to.IsZero()) {
		return from, to, false
	}
	if !to.After(from) {
		to = from.Add(time.Second)
	}
	return from, to, true
}

// WriteSVG draws the chart. Its elements carry classes a page or a test can
// find: each round a group of class "round", its due time "due" (an
// extension's "due extension"), its job's start "start" and end "finish",
// each event "event" (and data-kind), a first-to-last band "events".
func (c *Chart) WriteSVG(w io.Writer) error {
	if len(c.Rows) == 0 && c.Empty != "" {
		b := &svgWriter{}
		b.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="60" viewBox="0 0 %d 60" font-family="-apple-system,Segoe UI,Helvetica,Arial,sans-serif" font-size="12">`, cmp.Or(c.Width, DefaultWidth), cmp.Or(c.Width, DefaultWidth))
		b.f(`<rect width="100%%" height="100%%" fill="#ffffff"/><text x="10" y="34" fill="#57606a">%s</text></svg>`+"\n", esc(c.Empty))
		_, err := io.WriteString(w, b.String())
		return err
	}
	from, to, ok := c.span()
	if !ok || len(c.Rows) == 0 {
		return ErrEmpty
	}
	width := cmp.Or(c.Width, DefaultWidth)
	rowH := max(cmp.Or(c.RowHeight, DefaultRowHeight), MinRowHeight)
	plotW := float64(width - labelWidth - rightPad)
	legend := legendH
	if c.NoLegend {
		legend = 0
	}
	height := topPad + len(c.Rows)*rowH + axisHeight + legend
	total := to.Sub(from)
	x := func(t time.Time) float64 {
		f := float64(t.Sub(from)) / float64(total)
		return labelWidth + math.Max(0, math.Min(1, f))*plotW
	}
	in := func(t time.Time) bool { return !t.Before(from) && !t.After(to) }
	b := &svgWriter{}
	b.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="-apple-system,Segoe UI,Helvetica,Arial,sans-serif" font-size="12">`+"\n", width, height, width, height)
	b.f(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	if c.Title != "" {
		b.f(`<text x="10" y="22" font-size="15" font-weight="600" fill="#1f2328">%s</text>`+"\n", esc(c.Title))
	}
	// Grid and axis.
	step := tickStep(total)
	axisY := topPad + len(c.Rows)*rowH
	for t := from; !t.After(to); t = t.Add(step) {
		xx := x(t)
		b.f(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eaeef2"/>`+"\n", xx, topPad, xx, axisY)
		b.f(`<text x="%.1f" y="%d" text-anchor="middle" fill="#57606a">%s</text>`+"\n", xx, axisY+16, esc(tickLabel(t.Sub(from), step)))
	}
	b.f(`<line x1="%d" y1="%d" x2="%.1f" y2="%d" stroke="#8c959f"/>`+"\n", labelWidth, axisY, float64(labelWidth)+plotW, axisY)
	b.f(`<text x="%.1f" y="%d" text-anchor="end" fill="#57606a">time since %s</text>`+"\n", float64(labelWidth)+plotW, axisY+32, esc(from.UTC().Format("2006-01-02 15:04:05.000 UTC")))
	if !c.Now.IsZero() && in(c.Now) {
		b.f(`<line class="now" x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-dasharray="4 3"/><text x="%.1f" y="%d" text-anchor="middle" fill="%s">now</text>`+"\n",
			x(c.Now), topPad-6, x(c.Now), axisY, colCap, x(c.Now), topPad-10, colCap)
	}

	for i, r := range c.Rows {
		y0 := topPad + i*rowH
		mid := float64(y0) + float64(rowH)*0.6 // the rounds' bars
		tick := float64(y0) + float64(rowH)*0.25
		if i%2 == 1 {
			b.f(`<rect x="0" y="%d" width="%d" height="%d" fill="#f6f8fa"/>`+"\n", y0, width, rowH)
		}
		b.f(`<text x="10" y="%.0f" font-weight="600" fill="#1f2328">%s<title>%s</title></text>`+"\n", float64(y0)+float64(rowH)*0.42, esc(clip(r.Label, 30)), esc(r.Label))
		if r.Note != "" {
			b.f(`<text x="10" y="%.0f" fill="#57606a" font-size="10">%s<title>%s</title></text>`+"\n", float64(y0)+float64(rowH)*0.42+14, esc(clip(r.Note, 40)), esc(r.Note))
		}
		for _, rd := range r.Rounds {
			end := rd.Start
			pending := end.IsZero()
			if pending {
				end = to
				if len(rd.Dues) > 0 && rd.Dues[len(rd.Dues)-1].Before(to) && (c.Now.IsZero() || rd.Dues[len(rd.Dues)-1].After(c.Now)) {
					end = rd.Dues[len(rd.Dues)-1] // a live round waits for its due time
				}
			}
			if end.Before(from) || rd.Opened.After(to) {
				continue
			}
			x0, x1 := x(rd.Opened), x(end)
			b.f(`<g class="round"%s%s><title>%s</title>`, attr("data-round", rd.ID), attr("data-state", rd.State), esc(roundTitle(rd)))
			b.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="10" rx="2" fill="%s"%s/>`, x0, mid-5, math.Max(x1-x0, 1.5), colWait, dashIf(pending))
			if !rd.FirstSeen.IsZero() && !hasEvents(r) {
				last := rd.LastSeen
				if last.Before(rd.FirstSeen) {
					last = rd.FirstSeen
				}
				b.f(`<rect class="events" x="%.1f" y="%.1f" width="%.1f" height="4" fill="%s"/>`, x(rd.FirstSeen), tick-2, math.Max(x(last)-x(rd.FirstSeen), 2), colJoined)
			}
			if !rd.Start.IsZero() && in(rd.Start) {
				re := rd.End
				if re.IsZero() || re.Before(rd.Start) {
					re = rd.Start
				}
				xs, xe := x(rd.Start), x(re)
				b.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="10" fill="%s"/>`, xs, mid-5, math.Max(xe-xs, 2), colRun)
				b.f(`<path class="start" d="M%.1f %.1f l5 -7 l-10 0 z" fill="%s"/>`, xs, mid-6, colRun)
			}
			if !rd.End.IsZero() && rd.End.After(rd.Start) && in(rd.End) {
				b.f(`<rect class="finish" x="%.1f" y="%.1f" width="3" height="14" fill="%s"/>`, x(rd.End)-1.5, mid-7, colRun)
			}
			for j, d := range rd.Dues {
				if !in(d) {
					continue
				}
				class, col, h := "due", colDue, 7.0
				if j > 0 {
					class, col, h = "due extension", colExtended, 5.0
				}
				b.f(`<line class="%s" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5"/>`, class, x(d), mid-h, x(d), mid+h, col)
			}
			if !rd.Cap.IsZero() && in(rd.Cap) && (pending || len(rd.Dues) > 0 && !rd.Dues[len(rd.Dues)-1].Before(rd.Cap)) {
				b.f(`<line class="cap" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2" stroke-dasharray="3 2"/>`, x(rd.Cap), mid-17, x(rd.Cap), mid+13, colCap)
			}
			b.f("</g>\n")
		}
		for _, e := range r.Events {
			if !in(e.At) {
				continue
			}
			xe := x(e.At)
			switch e.Kind {
			case Dropped:
				b.f(`<path class="event" data-kind="dropped" d="M%.1f %.1f l6 6 m0 -6 l-6 6" stroke="%s" stroke-width="1.3"><title>%s dropped</title></path>`+"\n", xe-3, tick-3, colDropped, esc(at(e.At)))
			default:
				col := map[Kind]string{Opened: colOpened, Joined: colJoined, Extended: colExtended}[e.Kind]
				if col == "" {
					col = colJoined
				}
				h := 7.0
				if e.Kind == Opened {
					h = 10
				}
				b.f(`<line class="event" data-kind="%s" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.2"><title>%s %s</title></line>`+"\n", esc(string(e.Kind)), xe, tick-h/2, xe, tick+h/2, col, esc(at(e.At)), esc(string(e.Kind)))
			}
		}
	}
	if c.NoLegend {
		b.f("</svg>\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	// Legend.
	ly := float64(axisY + axisHeight + 12)
	lx := 10.0
	for _, it := range []struct {
		label string
		draw  func(x, y float64) string
	}{
		{"opens a round", func(x, y float64) string { return tickSVG(x+6, y, 10, colOpened) }},
		{"joins", func(x, y float64) string { return tickSVG(x+6, y, 7, colJoined) }},
		{"extends", func(x, y float64) string { return tickSVG(x+6, y, 7, colExtended) }},
		{"dropped", func(x, y float64) string {
			return fmt.Sprintf(`<path d="M%.1f %.1f l6 6 m0 -6 l-6 6" stroke="%s" stroke-width="1.3"/>`, x+3, y-3, colDropped)
		}},
		{"round pending", func(x, y float64) string {
			return fmt.Sprintf(`<rect x="%.1f" y="%.1f" width="12" height="8" fill="%s"/>`, x, y-4, colWait)
		}},
		{"job runs", func(x, y float64) string {
			return fmt.Sprintf(`<rect x="%.1f" y="%.1f" width="12" height="8" fill="%s"/>`, x, y-4, colRun)
		}},
		{"due", func(x, y float64) string {
			return fmt.Sprintf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5"/>`, x+6, y-6, x+6, y+6, colDue)
		}},
		{"max_wait cap", func(x, y float64) string {
			return fmt.Sprintf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="3 2"/>`, x+6, y-7, x+6, y+7, colCap)
		}},
	} {
		b.f("%s", it.draw(lx, ly))
		b.f(`<text x="%.1f" y="%.1f" fill="#1f2328">%s</text>`+"\n", lx+16, ly+4, it.label)
		lx += 16 + 6.5*float64(len(it.label)) + 16
	}
	b.f("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// attr is name="value", or nothing for an empty value.
func attr(name, value string) string {
	if value == "" {
		return ""
	}
	return " " + name + `="` + esc(value) + `"`
}

// hasEvents reports whether a row has its events one by one.
func hasEvents(r Row) bool { return len(r.Events) > 0 }

func tickSVG(x, y, h float64, col string) string {
	return fmt.Sprintf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.2"/>`, x, y-h/2, x, y+h/2, col)
}

func dashIf(pending bool) string {
	if pending {
		return ` stroke="#57606a" stroke-dasharray="2 2"`
	}
	return ""
}

func roundTitle(rd Round) string {
	var s strings.Builder
	fmt.Fprintf(&s, "round: %d events, first %s", rd.Events, at(rd.Opened))
	if len(rd.Dues) > 0 {
		fmt.Fprintf(&s, ", due %s", at(rd.Dues[len(rd.Dues)-1]))
		if len(rd.Dues) > 1 {
			fmt.Fprintf(&s, " (extended %d times)", len(rd.Dues)-1)
		}
	}
	if !rd.Cap.IsZero() {
		fmt.Fprintf(&s, ", cap %s", at(rd.Cap))
	}
	if rd.Start.IsZero() {
		s.WriteString(", job not run")
	} else {
		fmt.Fprintf(&s, ", job %s (waited %s)", at(rd.Start), rd.Start.Sub(rd.Opened).Round(time.Millisecond))
	}
	return s.String()
}

func at(t time.Time) string { return t.UTC().Format("15:04:05.000") }

// tickStep is a round step giving about 6 to 12 ticks over total.
func tickStep(total time.Duration) time.Duration {
	for _, s := range []time.Duration{
		100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
		time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
		time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
		time.Hour, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
	} {
		if total/s <= 12 {
			return s
		}
	}
	return total / 10
}

func tickLabel(d, step time.Duration) string {
	switch {
	case step < time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case step < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case step < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	}
	return fmt.Sprintf("%dh", int(d.Hours()))
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// esc escapes text for SVG.
func esc(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		case '"':
			b.WriteString("&quot;")
		case '\'':
			b.WriteString("&#39;")
		default:
			if r < 0x20 && r != '\t' || r == 0xFFFD {
				b.WriteRune('?')
				continue
			}
			b.WriteRune(r)
		}
	}
	return b.String()
}

type svgWriter struct{ strings.Builder }

func (b *svgWriter) f(format string, args ...any) { fmt.Fprintf(&b.Builder, format, args...) }
