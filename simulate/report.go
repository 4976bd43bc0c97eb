package simulate

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/timeline"
)

// Named is a simulation's result under a name (a variant of --compare).
type Named struct {
	Name   string
	Result *Result
}

// metric is one row of the report: a figure every TypeStats has, under
// the name --expect uses.
type metric struct {
	name string
	// value is the figure as a number (durations in seconds), for --expect.
	value func(TypeStats) float64
	// text is the figure as the table shows it.
	text func(TypeStats) string
	// duration: --expect takes a duration for it.
	duration bool
	// optional rows are shown only when some column has a non-zero value.
	optional bool
}

func count(f func(TypeStats) int) (func(TypeStats) float64, func(TypeStats) string) {
	return func(t TypeStats) float64 { return float64(f(t)) },
		func(t TypeStats) string { return strconv.Itoa(f(t)) }
}

func dur(f func(TypeStats) time.Duration) (func(TypeStats) float64, func(TypeStats) string) {
	return func(t TypeStats) float64 { return f(t).Seconds() },
		func(t TypeStats) string { return FormatDuration(f(t)) }
}

// metricTable is the report's rows, in order.
func metricTable() []metric {
	var m []metric
	add := func(name string, optional bool, pair func() (func(TypeStats) float64, func(TypeStats) string), duration bool) {
		v, t := pair()
		m = append(m, metric{name: name, value: v, text: t, duration: duration, optional: optional})
	}
	c := func(f func(TypeStats) int) func() (func(TypeStats) float64, func(TypeStats) string) {
		return func() (func(TypeStats) float64, func(TypeStats) string) { return count(f) }
	}
	d := func(f func(TypeStats) time.Duration) func() (func(TypeStats) float64, func(TypeStats) string) {
		return func() (func(TypeStats) float64, func(TypeStats) string) { return dur(f) }
	}
	add("events", false, c(func(t TypeStats) int { return t.Events }), false)
	add("jobs", false, c(func(t TypeStats) int { return t.Jobs }), false)
	m = append(m, metric{name: "events_per_job",
		value: func(t TypeStats) float64 { return t.EventsPerJob },
		text: func(t TypeStats) string {
			if t.Jobs == 0 {
				return "-"
			}
			return strconv.FormatFloat(t.EventsPerJob, 'f', 1, 64)
		}})
	add("opened", true, c(func(t TypeStats) int { return t.Opened }), false)
	add("joined", true, c(func(t TypeStats) int { return t.Joined }), false)
	add("extended", true, c(func(t TypeStats) int { return t.Extended }), false)
	add("dropped", false, c(func(t TypeStats) int { return t.Dropped }), false)
	add("throttled", true, c(func(t TypeStats) int { return t.Throttled }), false)
	add("duplicate", true, c(func(t TypeStats) int { return t.Duplicate }), false)
	add("refused", true, c(func(t TypeStats) int { return t.Refused }), false)
	add("p50_latency", false, d(func(t TypeStats) time.Duration { return t.LatencyP50 }), true)
	add("p99_latency", false, d(func(t TypeStats) time.Duration { return t.LatencyP99 }), true)
	add("max_latency", false, d(func(t TypeStats) time.Duration { return t.LatencyMax }), true)
	add("cap", true, d(func(t TypeStats) time.Duration { return t.Cap }), true)
	add("capped", true, c(func(t TypeStats) int { return t.Capped }), false)
	m = append(m, metric{name: "max_jobs_per_key",
		value: func(t TypeStats) float64 { return float64(t.MaxJobsPerKey) },
		text: func(t TypeStats) string {
			if t.MaxJobsPerKey == 0 {
				return "0"
			}
			return fmt.Sprintf("%d in %s", t.MaxJobsPerKey, FormatDuration(t.BurstWindow))
		}})
	add("keys", false, c(func(t TypeStats) int { return t.Keys }), false)
	add("key_waits", true, c(func(t TypeStats) int { return t.KeyWaits }), false)
	add("rescheduled", true, c(func(t TypeStats) int { return t.Rescheduled }), false)
	add("repeated", true, c(func(t TypeStats) int { return t.Repeated }), false)
	return m
}

// metricNames lists the metrics (for messages).
func metricNames() string {
	ms := metricTable()
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.name
	}
	return strings.Join(names, ", ")
}

// lookupMetric finds a metric by name (max_wait is max_latency: the
// longest a round waited for its job).
func lookupMetric(name string) (metric, bool) {
	if name == "max_wait" {
		name = "max_latency"
	}
	for _, m := range metricTable() {
		if m.name == name {
			return m, true
		}
	}
	return metric{}, false
}

// FormatDuration prints a duration shortly: 850ms, 10.125s, 1m0.25s,
// 12m30s, 2h5m.
func FormatDuration(d time.Duration) string {
	seconds := func(d time.Duration) string {
		s := strconv.FormatFloat(d.Round(time.Millisecond).Seconds(), 'f', 3, 64)
		return strings.TrimSuffix(strings.TrimRight(strings.TrimRight(s, "0"), "."), ".") + "s"
	}
	switch {
	case d < 0:
		return "-" + FormatDuration(-d)
	case d == 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return seconds(d)
	case d < 10*time.Minute:
		m := d.Truncate(time.Minute)
		if d == m {
			return fmt.Sprintf("%dm", int(m.Minutes()))
		}
		return fmt.Sprintf("%dm%s", int(m.Minutes()), seconds(d-m))
	case d < time.Hour:
		return strings.TrimSuffix(d.Round(time.Second).String(), "0s")
	}
	return strings.TrimSuffix(strings.TrimSuffix(d.Round(time.Minute).String(), "0s"), "0m")
}

// WriteTable writes the results side by side: per job type (and a total
// when there are several), one row per metric, one column per result.
func WriteTable(w io.Writer, results []Named) error {
	if len(results) == 0 {
		return nil
	}
	rows := [][]string{append([]string{""}, names(results)...)}
	types := results[0].Result.Types
	sections := make([]string, 0, len(types)+1)
	for _, t := range types {
		sections = append(sections, t.Type)
	}
	if len(types) > 1 {
		sections = append(sections, "total")
	}
	for _, sec := range sections {
		rows = append(rows, []string{sec})
		stats := make([]TypeStats, len(results))
		for i, r := range results {
			stats[i] = r.Result.section(sec)
		}
		for _, m := range metricTable() {
			if m.optional && !anyNonZero(m, stats) {
				continue
			}
			row := []string{"  " + m.name}
			for _, st := range stats {
				row = append(row, m.text(st))
			}
			rows = append(rows, row)
		}
	}
	// The first column left-aligned, the figures right-aligned.
	widths := make([]int, len(results)+1)
	for _, row := range rows {
		for i, c := range row {
			if i > 0 || len(row) > 1 {
				widths[i] = max(widths[i], utf8.RuneCountInString(c))
			}
		}
	}
	var b strings.Builder
	for _, row := range rows {
		for i, c := range row {
			if len(row) == 1 {
				b.WriteString(c)
				continue
			}
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			switch {
			case i == 0:
				b.WriteString(c + pad)
			default:
				b.WriteString("  " + pad + c)
			}
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func names(results []Named) []string {
	out := make([]string, len(results))
	for i, r := range results {
		out[i] = r.Name
	}
	return out
}

func anyNonZero(m metric, stats []TypeStats) bool {
	for _, st := range stats {
		if m.value(st) != 0 {
			return true
		}
	}
	return false
}

// section returns a type's figures, or the total's.
func (r *Result) section(name string) TypeStats {
	if name == "total" {
		return r.Total
	}
	for _, t := range r.Types {
		if t.Type == name {
			return t
		}
	}
	return TypeStats{Type: name}
}

// WriteKeys writes the busiest keys' figures.
func WriteKeys(w io.Writer, r *Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "type\tkey\tevents\tjobs\tdropped\tmax_latency\tmax_jobs_per_key")
	for _, k := range r.Keys {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%d\n", k.Type, k.Key, k.Events, k.Jobs, k.Dropped, FormatDuration(k.LatencyMax), k.MaxJobs)
	}
	return tw.Flush()
}

// PolicySummary describes a policy in one line: "debounce 10s extend
// max_wait 1m, key tenant_id".
func PolicySummary(p debounce.Policy) string {
	var b strings.Builder
	b.WriteString(string(p.Mode))
	switch p.Mode {
	case debounce.ModeDedup:
		b.WriteString(" until " + string(p.Until))
		if p.Until == debounce.UntilExpiry {
			b.WriteString(" ttl " + FormatDuration(p.TTL))
		}
	default:
		b.WriteString(" " + FormatDuration(p.Window))
	}
	if p.Trailing {
		b.WriteString(" trailing")
	}
	if p.Extend {
		b.WriteString(" extend, max_wait " + FormatDuration(p.MaxWait))
	}
	if p.Payload != "" && p.Payload != debounce.PayloadFirst {
		b.WriteString(", payload " + string(p.Payload))
	}
	if p.Exclusive {
		b.WriteString(", exclusive")
	}
	return b.String()
}

// TimelineOptions choose the span of WriteTimeline's picture.
type TimelineOptions struct {
	Title string
	// From and To bound the picture (zero: from the keys' first event to
	// their last job, cut at MaxRounds rounds of a key).
	From, To time.Time
	// MaxRounds: the default span ends with the key's MaxRounds-th round
	// (default 40), so a long log stays legible.
	MaxRounds int
	Width     int
}

// WriteTimeline draws the keys of r.Timeline as an SVG picture: events as
// ticks, each round a bar from its first event to its job, due times and
// their extensions, max_wait caps, dropped events, the jobs' runs.
func WriteTimeline(w io.Writer, r *Result, o TimelineOptions) error {
	c := timeline.Chart{Title: o.Title, From: o.From, To: o.To, Width: o.Width}
	maxRounds := o.MaxRounds
	if maxRounds <= 0 {
		maxRounds = 40
	}
	var cut time.Time
	for _, k := range r.Timeline {
		row := timeline.Row{Label: k.Key, Note: k.Type + ": " + PolicySummary(k.Policy)}
		for _, e := range k.Events {
			row.Events = append(row.Events, timeline.Event{At: e.At, Kind: eventKind(e.Outcome)})
		}
		for i, rd := range k.Rounds {
			row.Rounds = append(row.Rounds, timeline.Round{Opened: rd.Opened, Dues: rd.Dues, Cap: rd.Cap, Start: rd.Start, End: rd.End, Events: rd.Events})
			if i == maxRounds-1 && o.To.IsZero() {
				end := rd.End
				if end.IsZero() {
					end = rd.Opened
				}
				if cut.IsZero() || end.Before(cut) {
					cut = end
				}
			}
		}
		c.Rows = append(c.Rows, row)
	}
	if !cut.IsZero() {
		c.To = cut.Add(time.Duration(math.Max(1, float64(cut.Sub(r.From))/50)))
	}
	return c.WriteSVG(w)
}

func eventKind(o debounce.Outcome) timeline.Kind {
	switch o {
	case debounce.OutcomeScheduled, debounce.OutcomePublished, debounce.OutcomeBypassed:
		return timeline.Opened
	case debounce.OutcomeExtended:
		return timeline.Extended
	case debounce.OutcomeThrottled, debounce.OutcomeDuplicate:
		return timeline.Dropped
	}
	return timeline.Joined
}
