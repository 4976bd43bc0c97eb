package simulate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/simulate"
)

// t0 is the logs' first instant.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// logOf writes a log from lines "offset type args": "1.5s r {"tenant_id":1}".
func logOf(t *testing.T, lines ...string) string {
	t.Helper()
	var b strings.Builder
	for _, l := range lines {
		off, rest, _ := strings.Cut(l, " ")
		typ, args, _ := strings.Cut(rest, " ")
		d, err := time.ParseDuration(off)
		if err != nil {
			t.Fatal(err)
		}
		if err := simulate.WriteEvent(&b, simulate.Event{At: t0.Add(d), Type: typ, Args: json.RawMessage(args)}); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// run is a simulation with its trace.
type run struct {
	*simulate.Result
	events []simulate.TraceEvent // by index
	jobs   []simulate.TraceJob   // by index
}

func simulateLog(t *testing.T, cfg simulate.Config, log string) run {
	t.Helper()
	if cfg.Lateness == 0 {
		cfg.Lateness = 250 * time.Millisecond // the expectations count with it
	}
	var r run
	cfg.OnEvent = func(e simulate.TraceEvent) {
		for len(r.events) <= e.Index {
			r.events = append(r.events, simulate.TraceEvent{Index: -1})
		}
		if r.events[e.Index].Index != -1 {
			t.Errorf("event %d reported twice", e.Index)
		}
		r.events[e.Index] = e
	}
	cfg.OnJob = func(j simulate.TraceJob) {
		if j.Index != len(r.jobs) {
			t.Errorf("job %d reported after %d jobs", j.Index, len(r.jobs))
		}
		r.jobs = append(r.jobs, j)
	}
	res, err := simulate.Run(context.Background(), cfg, simulate.ReadLog(strings.NewReader(log)))
	if err != nil {
		t.Fatal(err)
	}
	r.Result = res
	checkTrace(t, r)
	return r
}

// checkTrace checks what holds for every simulation: each event reported
// once; each covered event in exactly one job, which started after it;
// each job's summary counts the events the trace gives it.
func checkTrace(t *testing.T, r run) {
	t.Helper()
	for i, e := range r.events {
		if e.Index != i {
			t.Fatalf("event %d never reported", i)
		}
	}
	covered := 0
	for _, j := range r.jobs {
		if j.Release == debounce.ReleaseReleased && j.Summary.Events != len(j.Events) {
			t.Errorf("job %d: summary counts %d events, the trace %d", j.Index, j.Summary.Events, len(j.Events))
		}
		for _, i := range j.Events {
			e := r.events[i]
			if e.Job != j.Index {
				t.Errorf("event %d in job %d's list, but its record says job %d", i, j.Index, e.Job)
			}
			if j.Start.Before(e.At) {
				t.Errorf("event %d at %v covered by job %d started before it, at %v", i, e.At, j.Index, j.Start)
			}
			covered++
		}
	}
	dropped := 0
	for _, e := range r.events {
		if e.Job < 0 {
			dropped++
		}
	}
	if covered+dropped != len(r.events) {
		t.Errorf("%d events covered and %d dropped or refused, of %d", covered, dropped, len(r.events))
	}
}

// jobsOf lists each job as "start-offset:event,event" for comparison.
func (r run) jobsOf(typ string) []string {
	var out []string
	for _, j := range r.jobs {
		if j.Type != typ {
			continue
		}
		idx := slices.Clone(j.Events)
		slices.Sort(idx)
		s := make([]string, len(idx))
		for i, n := range idx {
			s[i] = fmt.Sprint(n)
		}
		out = append(out, fmt.Sprintf("%v:%s", j.Start.Sub(t0), strings.Join(s, ",")))
	}
	return out
}

func (r run) outcomes() []debounce.Outcome {
	out := make([]debounce.Outcome, len(r.events))
	for i, e := range r.events {
		out[i] = e.Outcome
	}
	return out
}

func (r run) stats(typ string) simulate.TypeStats {
	for _, s := range r.Types {
		if s.Type == typ {
			return s
		}
	}
	return simulate.TypeStats{}
}

func tenant(n int) string { return fmt.Sprintf(`{"tenant_id":%d}`, n) }

const (
	sc  = debounce.OutcomeScheduled
	co  = debounce.OutcomeCoalesced
	ex  = debounce.OutcomeExtended
	pub = debounce.OutcomePublished
	thr = debounce.OutcomeThrottled
	dup = debounce.OutcomeDuplicate
)

// TestModes checks each mode's jobs against what its semantics say, worked
// out by hand: which events each job covers and when it starts (due time
// plus a 250 ms lateness, or at once).
func TestModes(t *testing.T) {
	t.Parallel()
	keyed := func(p debounce.Policy) debounce.Policy { p.Type, p.KeyFields = "t", []string{"tenant_id"}; return p }
	for _, tc := range []struct {
		name     string
		policy   debounce.Policy
		cfg      simulate.Config
		log      []string // offset and args; type t
		outcomes []debounce.Outcome
		jobs     []string
		check    func(t *testing.T, r run)
	}{{
		name:   "debounce fixed window",
		policy: keyed(debounce.Policy{Mode: debounce.ModeDebounce, Window: 10 * time.Second}),
		log:    []string{"0s " + tenant(1), "1s " + tenant(1), "2s " + tenant(1), "3s " + tenant(2), "12s " + tenant(1)},
		// Tenant 1's round takes its three events at 10.25 s; the event at
		// 12 s comes after that job started, so it opens the next round.
		outcomes: []debounce.Outcome{sc, co, co, sc, sc},
		jobs:     []string{"10.25s:0,1,2", "13.25s:3", "22.25s:4"},
		check: func(t *testing.T, r run) {
			if s := r.stats("t"); s.LatencyMax != 10250*time.Millisecond || s.EventsPerJob != 5.0/3 || s.Cap != 10*time.Second {
				t.Errorf("stats %+v", s)
			}
		},
	}, {
		name:   "debounce extended up to max_wait",
		policy: keyed(debounce.Policy{Mode: debounce.ModeDebounce, Window: 5 * time.Second, Extend: true, MaxWait: 12 * time.Second}),
		log:    []string{"0s " + tenant(1), "4s " + tenant(1), "8s " + tenant(1), "11s " + tenant(1)},
		// Due 5 s, pushed to 9, then to 13 capped at 12; the event at 11 s
		// cannot push it further. The schedule fires at 5.25 and 9.25 s
		// before the round is due: the worker publishes it again each time.
		outcomes: []debounce.Outcome{sc, ex, ex, co},
		jobs:     []string{"12.25s:0,1,2,3"},
		check: func(t *testing.T, r run) {
			if s := r.stats("t"); s.Capped != 1 || s.Rescheduled != 2 || s.Extended != 2 {
				t.Errorf("stats %+v, want 1 capped round, 2 reschedules, 2 extensions", s)
			}
		},
	}, {
		// The store counts in whole milliseconds: a first event at 0.4 ms
		// is capped at 12 s from its millisecond, and the round counts as
		// capped.
		name:     "debounce extended to max_wait, sub-millisecond times",
		policy:   keyed(debounce.Policy{Mode: debounce.ModeDebounce, Window: 5 * time.Second, Extend: true, MaxWait: 12 * time.Second}),
		log:      []string{"400us " + tenant(1), "4.0004s " + tenant(1), "8.0007s " + tenant(1)},
		outcomes: []debounce.Outcome{sc, ex, ex},
		jobs:     []string{"12.25s:0,1,2"},
		check: func(t *testing.T, r run) {
			if s := r.stats("t"); s.Capped != 1 {
				t.Errorf("stats %+v, want the round capped", s)
			}
		},
	}, {
		name:     "throttle",
		policy:   keyed(debounce.Policy{Mode: debounce.ModeThrottle, Window: 10 * time.Second}),
		cfg:      simulate.Config{BurstWindow: 10 * time.Second}, // the two jobs are 11 s apart
		log:      []string{"0s " + tenant(1), "1s " + tenant(1), "5s " + tenant(1), "11s " + tenant(1)},
		outcomes: []debounce.Outcome{pub, thr, thr, pub},
		jobs:     []string{"0s:0", "11s:3"},
		check: func(t *testing.T, r run) {
			if s := r.stats("t"); s.Dropped != 2 || s.Throttled != 2 || s.MaxJobsPerKey != 1 {
				t.Errorf("stats %+v", s)
			}
		},
	}, {
		name:   "throttle with trailing",
		policy: keyed(debounce.Policy{Mode: debounce.ModeThrottle, Window: 10 * time.Second, Trailing: true}),
		log:    []string{"0s " + tenant(1), "1s " + tenant(1), "5s " + tenant(1), "12s " + tenant(1)},
		// The trailing job (window end 10 s, fired 10.25) starts the next
		// window: the event at 12 s is in it and opens the next trailing
		// round, due at that window's end, 20.25 s.
		outcomes: []debounce.Outcome{pub, sc, co, sc},
		jobs:     []string{"0s:0", "10.25s:1,2", "20.5s:3"},
	}, {
		name:   "dedup until start",
		policy: keyed(debounce.Policy{Mode: debounce.ModeDedup}),
		cfg:    simulate.Config{StartDelay: time.Second},
		log:    []string{"0s " + tenant(1), "500ms " + tenant(1), "1.5s " + tenant(1)},
		// The duplicate came before the job started: the job covers it.
		outcomes: []debounce.Outcome{pub, dup, pub},
		jobs:     []string{"1s:0,1", "2.5s:2"},
	}, {
		name:     "dedup until success",
		policy:   keyed(debounce.Policy{Mode: debounce.ModeDedup, Until: debounce.UntilSuccess}),
		cfg:      simulate.Config{JobDuration: 2 * time.Second},
		log:      []string{"0s " + tenant(1), "1s " + tenant(1), "2.5s " + tenant(1)},
		outcomes: []debounce.Outcome{pub, dup, pub},
		jobs:     []string{"0s:0", "2.5s:2"},
	}, {
		name:     "dedup until expiry",
		policy:   keyed(debounce.Policy{Mode: debounce.ModeDedup, Until: debounce.UntilExpiry, TTL: 5 * time.Second}),
		log:      []string{"0s " + tenant(1), "3s " + tenant(1), "5s " + tenant(1), "5.001s " + tenant(1)},
		outcomes: []debounce.Outcome{pub, dup, dup, pub},
		jobs:     []string{"0s:0", "5.001s:3"},
	}, {
		name:   "payload last",
		policy: keyed(debounce.Policy{Mode: debounce.ModeDebounce, Window: 10 * time.Second, Payload: debounce.PayloadLast}),
		log:    []string{`0s {"tenant_id":1,"v":1}`, `1s {"tenant_id":1,"v":2}`, `2s {"tenant_id":1,"v":3}`},
		jobs:   []string{"10.25s:0,1,2"},
		check: func(t *testing.T, r run) {
			if p := string(r.jobs[0].Summary.Payload); p != `{"tenant_id":1,"v":3}` {
				t.Errorf("payload %s, want the last event's args", p)
			}
		},
	}, {
		name:   "payload accumulate, filled",
		policy: keyed(debounce.Policy{Mode: debounce.ModeDebounce, Window: 10 * time.Second, Payload: debounce.PayloadAccumulate, ItemField: "id", MaxItems: 3}),
		log:    []string{`0s {"tenant_id":1,"id":1}`, `1s {"tenant_id":1,"id":2}`, `2s {"tenant_id":1,"id":2}`, `3s {"tenant_id":1,"id":3}`, `3.1s {"tenant_id":1,"id":4}`},
		// The third distinct item fills the round: it is published again,
		// due at once, replacing the schedule for 10 s; the item that
		// comes before its job starts still joins it.
		outcomes: []debounce.Outcome{sc, co, co, co, co},
		jobs:     []string{"3.25s:0,1,2,3,4"},
		check: func(t *testing.T, r run) {
			if items := fmt.Sprintf("%s", r.jobs[0].Summary.Items); items != "[1 2 3 4]" {
				t.Errorf("items %s", items)
			}
		},
	}, {
		name:   "exclusive key",
		policy: keyed(debounce.Policy{Mode: debounce.ModeDebounce, Window: time.Second, Exclusive: true}),
		cfg:    simulate.Config{JobDuration: 3 * time.Second},
		log:    []string{"0s " + tenant(1), "2s " + tenant(1)},
		// The first job runs 1.25 s to 4.25 s; the second round is due at
		// 3.25 s but its key is busy: it starts once the first job ended.
		outcomes: []debounce.Outcome{sc, sc},
		check: func(t *testing.T, r run) {
			if len(r.jobs) != 2 {
				t.Fatalf("jobs %v", r.jobsOf("t"))
			}
			second := r.jobs[1].Start.Sub(t0)
			if second < 4250*time.Millisecond || second > 5*time.Second || r.jobs[1].Waits < 1 || r.stats("t").KeyWaits < 1 {
				t.Errorf("second job at %v after %d waits, want after the first ended (4.25 s), within a poll", second, r.jobs[1].Waits)
			}
		},
	}, {
		name:   "workers busy",
		policy: keyed(debounce.Policy{Mode: debounce.ModeDebounce, Window: time.Second}),
		cfg:    simulate.Config{Workers: 1, JobDuration: 5 * time.Second},
		log:    []string{"0s " + tenant(1), "0s " + tenant(2)},
		// One worker: the second job waits for the first to end.
		jobs: []string{"1.25s:0", "6.25s:1"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lines := make([]string, len(tc.log))
			for i, l := range tc.log {
				off, args, _ := strings.Cut(l, " ")
				lines[i] = off + " t " + args
			}
			cfg := tc.cfg
			cfg.Policies = []debounce.Policy{tc.policy}
			r := simulateLog(t, cfg, logOf(t, lines...))
			if tc.outcomes != nil && !slices.Equal(r.outcomes(), tc.outcomes) {
				t.Errorf("outcomes %v, want %v", r.outcomes(), tc.outcomes)
			}
			if tc.jobs != nil && !slices.Equal(r.jobsOf("t"), tc.jobs) {
				t.Errorf("jobs %v, want %v", r.jobsOf("t"), tc.jobs)
			}
			if s := r.stats("t"); s.Events != len(tc.log) || s.Jobs != len(r.jobs) {
				t.Errorf("stats count %d events and %d jobs; the trace %d and %d", s.Events, s.Jobs, len(tc.log), len(r.jobs))
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

// TestRefusedAndUnknownEvents: an event Submit refuses is counted with its
// line; a type without a policy is skipped and counted.
func TestRefusedAndUnknownEvents(t *testing.T) {
	t.Parallel()
	log := logOf(t, "0s t "+tenant(1), `1s t {"other":1}`, "2s nope {}")
	r := simulateLog(t, simulate.Config{Policies: []debounce.Policy{{Type: "t", Mode: debounce.ModeDedup, KeyFields: []string{"tenant_id"}}}}, log)
	s := r.stats("t")
	if s.Refused != 1 || !strings.Contains(s.RefusedExample, "line 2") || !strings.Contains(s.RefusedExample, "tenant_id") {
		t.Errorf("refused %d: %q", s.Refused, s.RefusedExample)
	}
	if r.Unknown["nope"] != 1 || s.Jobs != 1 {
		t.Errorf("unknown %v, jobs %d", r.Unknown, s.Jobs)
	}
}

// TestMixedLogInvariants runs a random log through every mode at once and
// checks what must hold whatever the log: each event accepted is covered
// by one job that starts after it, summaries count what the trace shows,
// and no round's job runs twice.
func TestMixedLogInvariants(t *testing.T) {
	t.Parallel()
	policies := []debounce.Policy{
		{Type: "fixed", Mode: debounce.ModeDebounce, Window: 2 * time.Second, KeyFields: []string{"tenant_id"}},
		{Type: "extend", Mode: debounce.ModeDebounce, Window: time.Second, Extend: true, MaxWait: 4 * time.Second, KeyFields: []string{"tenant_id"}},
		{Type: "last", Mode: debounce.ModeDebounce, Window: 2 * time.Second, Payload: debounce.PayloadLast, KeyFields: []string{"tenant_id"}},
		{Type: "accum", Mode: debounce.ModeDebounce, Window: 2 * time.Second, Payload: debounce.PayloadAccumulate, ItemField: "item", MaxItems: 5, KeyFields: []string{"tenant_id"}},
		{Type: "throttle", Mode: debounce.ModeThrottle, Window: 2 * time.Second, KeyFields: []string{"tenant_id"}},
		{Type: "trailing", Mode: debounce.ModeThrottle, Window: 2 * time.Second, Trailing: true, KeyFields: []string{"tenant_id"}},
		{Type: "dedup", Mode: debounce.ModeDedup, KeyFields: []string{"tenant_id"}},
		{Type: "success", Mode: debounce.ModeDedup, Until: debounce.UntilSuccess, KeyFields: []string{"tenant_id"}},
		{Type: "expiry", Mode: debounce.ModeDedup, Until: debounce.UntilExpiry, TTL: 3 * time.Second, KeyFields: []string{"tenant_id"}},
		{Type: "excl", Mode: debounce.ModeDebounce, Window: time.Second, Exclusive: true, KeyFields: []string{"tenant_id"}},
	}
	types := make([]string, len(policies))
	for i, p := range policies {
		types[i] = p.Type
	}
	spec, err := simulate.ParseGenSpec("type=" + strings.Join(types, "+") + ",tenants=5,rate=40/s,duration=2m,items=8,burst=100/1s,every=20s,seed=7")
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	for ev, err := range simulate.Generate(spec) {
		if err != nil {
			t.Fatal(err)
		}
		_ = simulate.WriteEvent(&log, ev)
	}
	r := simulateLog(t, simulate.Config{Policies: policies, Workers: 3, JobDuration: 700 * time.Millisecond, StartDelay: 30 * time.Millisecond}, log.String())
	if r.Total.Events < 4000 || r.Total.Repeated != 0 || r.Total.Refused != 0 {
		t.Fatalf("total %+v", r.Total)
	}
	for _, s := range r.Types {
		if s.Jobs == 0 || s.Events != s.Opened+s.Joined+s.Dropped {
			t.Errorf("%s: %+v", s.Type, s)
		}
	}
	// Exclusive: no two jobs of one key overlap.
	runs := map[string][]simulate.TraceJob{}
	for _, j := range r.jobs {
		if j.Type == "excl" {
			runs[j.Key] = append(runs[j.Key], j)
		}
	}
	for key, js := range runs {
		for i := 1; i < len(js); i++ {
			if js[i].Start.Before(js[i-1].End) {
				t.Errorf("excl %s: job at %v started before the previous one ended (%v)", key, js[i].Start, js[i-1].End)
			}
		}
	}
	// Payload last: each job carries the args of its last event.
	for _, j := range r.jobs {
		if j.Type == "last" && len(j.Events) > 0 {
			last := r.events[slices.Max(j.Events)]
			if !j.Summary.LastSeen.Equal(last.At.Truncate(time.Millisecond)) { // Redis keeps ms
				t.Errorf("last: job %d last seen %v, its last event at %v", j.Index, j.Summary.LastSeen, last.At)
			}
		}
	}
}

// TestDeterministic: the same log gives the same figures.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	spec, _ := simulate.ParseGenSpec("type=t,tenants=30,rate=30/s,duration=5m,burst=200/2s,every=1m,skew=1.3")
	cfg := simulate.Config{Policies: []debounce.Policy{{Type: "t", Mode: debounce.ModeDebounce, Window: 5 * time.Second, Extend: true, MaxWait: 20 * time.Second, KeyFields: []string{"tenant_id"}}}, Workers: 2, JobDuration: time.Second}
	var first simulate.TypeStats
	for i := range 2 {
		r, err := simulate.Run(context.Background(), cfg, simulate.Generate(spec))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = r.Types[0]
		} else if r.Types[0] != first {
			t.Errorf("second run %+v, first %+v", r.Types[0], first)
		}
	}
	if first.Jobs == 0 || first.Events < 9000 {
		t.Errorf("stats %+v", first)
	}
}

// TestCompareTradeOff: a longer window runs fewer jobs and waits longer.
func TestCompareTradeOff(t *testing.T) {
	t.Parallel()
	base := simulate.Config{Policies: []debounce.Policy{
		{Type: "t", Mode: debounce.ModeDebounce, Window: 10 * time.Second, KeyFields: []string{"tenant_id"}},
		{Type: "d", Mode: debounce.ModeDedup},
	}}
	variants, err := simulate.ParseCompare(base, []string{"t.window=5s,30s", "workers=1,8"})
	if err != nil {
		t.Fatal(err)
	}
	if len(variants) != 4 || variants[3].Name != "t.window=30s workers=8" || variants[3].Policies[0].Window != 30*time.Second || variants[3].Workers != 8 ||
		variants[0].Policies[1].Mode != debounce.ModeDedup || variants[0].Policies[1].Window != 0 {
		t.Fatalf("variants %+v", variants)
	}
	spec, _ := simulate.ParseGenSpec("type=t,tenants=20,rate=5/s,duration=10m")
	var jobs []int
	var p50 []time.Duration
	for _, v := range []simulate.Variant{variants[1], variants[3]} { // 5s and 30s, 8 workers
		r, err := simulate.Run(context.Background(), v.Config, simulate.Generate(spec))
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, r.Types[0].Jobs)
		p50 = append(p50, r.Types[0].LatencyP50)
	}
	if jobs[1] >= jobs[0] || p50[1] <= p50[0] {
		t.Errorf("window 5s: %d jobs p50 %v; 30s: %d jobs p50 %v: want fewer jobs, longer waits", jobs[0], p50[0], jobs[1], p50[1])
	}
}

// TestParallelSameResult: on several goroutines (keys split among them)
// the figures are the ones of one goroutine.
func TestParallelSameResult(t *testing.T) {
	t.Parallel()
	policies := []debounce.Policy{
		{Type: "fixed", Mode: debounce.ModeDebounce, Window: 2 * time.Second, KeyFields: []string{"tenant_id"}},
		{Type: "extend", Mode: debounce.ModeDebounce, Window: time.Second, Extend: true, MaxWait: 4 * time.Second, KeyFields: []string{"tenant_id"}},
		{Type: "accum", Mode: debounce.ModeDebounce, Window: 2 * time.Second, Payload: debounce.PayloadAccumulate, ItemField: "item", MaxItems: 5, KeyFields: []string{"tenant_id"}},
		{Type: "trailing", Mode: debounce.ModeThrottle, Window: 2 * time.Second, Trailing: true, KeyFields: []string{"tenant_id"}},
		{Type: "expiry", Mode: debounce.ModeDedup, Until: debounce.UntilExpiry, TTL: 3 * time.Second, KeyFields: []string{"tenant_id"}},
	}
	spec, _ := simulate.ParseGenSpec("type=fixed+extend+accum+trailing+expiry+nope,tenants=200,rate=100/s,duration=3m,items=8,burst=300/1s,every=30s,skew=1.2,seed=11")
	var results []*simulate.Result
	for _, parallel := range []int{1, 4} {
		r, err := simulate.Run(context.Background(), simulate.Config{Policies: policies, Keys: 10, Parallel: parallel}, simulate.Generate(spec))
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	one, four := results[0], results[1]
	if !slices.Equal(one.Types, four.Types) || one.Total != four.Total || !slices.Equal(one.Keys, four.Keys) || one.Unknown["nope"] != four.Unknown["nope"] ||
		!one.From.Equal(four.From) || !one.To.Equal(four.To) || !one.End.Equal(four.End) {
		t.Errorf("one goroutine:\n%+v\n%+v\nfour:\n%+v\n%+v", one.Types, one.Keys, four.Types, four.Keys)
	}
	if one.Total.Events < 15000 || one.Total.Jobs == 0 || one.Unknown["nope"] == 0 {
		t.Errorf("total %+v", one.Total)
	}
}
