package simulate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Expectation is one budget of --expect: a metric of a job type (or of the
// total) compared with a value.
type Expectation struct {
	Type   string  // "" for the total
	Metric string  // a row of the report (WriteTable), e.g. jobs, p99_latency
	Op     string  // <=, <, >=, >, ==
	Value  float64 // durations in seconds
	Text   string  // as written
}

// ErrExpect is matched by ParseExpect's errors.
var ErrExpect = errors.New("simulate: --expect")

// ParseExpect reads budgets: comma-separated metric OP value, as in
//
//	jobs<=1200,p99_latency<=40s,recompute.events_per_job>=10
//
// A metric is a row of the report (events, jobs, events_per_job, dropped,
// p99_latency, max_latency, max_jobs_per_key, ...; max_wait is
// max_latency), of the total, or of one job type when prefixed with it and
// a dot. OP is <=, <, >=, > or == (= too). Latencies take a duration
// (40s, 1m30s), the others a number.
func ParseExpect(spec string) ([]Expectation, error) {
	var out []Expectation
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		e, err := parseExpectation(part)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %w", ErrExpect, truncate(part, 60), err)
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: empty; give budgets such as jobs<=1200,p99_latency<=40s", ErrExpect)
	}
	return out, nil
}

func parseExpectation(s string) (Expectation, error) {
	i := strings.IndexAny(s, "<>=!")
	if i < 0 {
		return Expectation{}, errors.New("no comparison; write metric<=value (or <, >=, >, ==)")
	}
	lhs := strings.TrimSpace(s[:i])
	rest := s[i:]
	n := 0
	for n < len(rest) && strings.IndexByte("<>=!", rest[n]) >= 0 {
		n++
	}
	e := Expectation{Text: s}
	switch op := rest[:n]; op {
	case "<=", ">=", "==", "<", ">":
		e.Op = op
	case "=":
		e.Op = "=="
	default:
		return e, fmt.Errorf("%q is not a comparison; use <=, <, >=, > or ==", op)
	}
	val := strings.TrimSpace(rest[n:])
	if strings.ContainsAny(val, "<>=") {
		return e, errors.New("one comparison per budget; separate budgets with commas")
	}
	if lhs == "" {
		return e, errors.New("no metric before the comparison")
	}
	e.Metric = lhs
	if dot := strings.LastIndexByte(lhs, '.'); dot >= 0 {
		e.Type, e.Metric = lhs[:dot], lhs[dot+1:]
		if e.Type == "" {
			return e, errors.New("empty job type before the dot")
		}
	}
	m, ok := lookupMetric(e.Metric)
	if !ok {
		return e, fmt.Errorf("unknown metric %q (metrics: %s)", e.Metric, metricNames())
	}
	if val == "" {
		return e, errors.New("no value after the comparison")
	}
	if m.duration {
		d, err := parseDuration(val)
		if err != nil {
			if _, nerr := strconv.ParseFloat(val, 64); nerr == nil {
				return e, fmt.Errorf("%s is a duration: give a unit, e.g. %ss", m.name, val)
			}
			return e, fmt.Errorf("%s: %q is not a duration (like 40s, 1m30s)", m.name, truncate(val, 20))
		}
		e.Value = d.Seconds()
		return e, nil
	}
	f, err := strconv.ParseFloat(val, 64)
	if err != nil || f != f {
		return e, fmt.Errorf("%s: %q is not a number", m.name, truncate(val, 20))
	}
	e.Value = f
	return e, nil
}

// Failure is a budget a result broke.
type Failure struct {
	Variant     string
	Expectation Expectation
	Got         string // the metric's value, as the table shows it
}

func (f Failure) String() string {
	name := f.Variant
	if name == "" {
		name = "as configured"
	}
	return fmt.Sprintf("%s: %s is %s, budget %s", name, f.Expectation.label(), f.Got, f.Expectation.Text)
}

func (e Expectation) label() string {
	if e.Type == "" {
		return e.Metric
	}
	return e.Type + "." + e.Metric
}

// Check returns the budgets results break, and an error naming a budget's
// job type that has no policy.
func Check(results []Named, expect []Expectation) ([]Failure, error) {
	var fails []Failure
	for _, r := range results {
		for _, e := range expect {
			st := r.Result.Total
			if e.Type != "" {
				found := false
				for _, t := range r.Result.Types {
					if t.Type == e.Type {
						st, found = t, true
					}
				}
				if !found {
					return nil, fmt.Errorf("%w %q: no policy for job type %q", ErrExpect, e.Text, e.Type)
				}
			}
			m, _ := lookupMetric(e.Metric)
			got := m.value(st)
			ok := false
			switch e.Op {
			case "<=":
				ok = got <= e.Value
			case "<":
				ok = got < e.Value
			case ">=":
				ok = got >= e.Value
			case ">":
				ok = got > e.Value
			case "==":
				ok = got == e.Value
			}
			if !ok {
				fails = append(fails, Failure{Variant: r.Name, Expectation: e, Got: m.text(st)})
			}
		}
	}
	return fails, nil
}
