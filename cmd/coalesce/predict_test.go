package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/config"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/simulate"
	"github.com/coalesce-io/coalesce/worker"
)

// The honest-predictions test (issue 27, item 6): the same event log, sent
// at its real times to the built daemon on a real Redis and NATS with a
// real worker, runs the jobs coalesce simulate predicts for it.

// predictPolicies has one type per mode and payload, 1 s windows (2 s for
// throttle: room for events inside a window, away from both its ends).
const predictPolicies = `policies:
  deb_fixed:
    mode: debounce
    window: 1s
    key_fields: [tenant_id]
  deb_extend:
    mode: debounce
    window: 1s
    extend: true
    max_wait: 3s
    key_fields: [tenant_id]
  deb_last:
    mode: debounce
    window: 1s
    payload: last
    key_fields: [tenant_id]
  deb_accum:
    mode: debounce
    window: 1s
    payload: accumulate
    item_field: id
    max_items: 3
    key_fields: [tenant_id]
  thr:
    mode: throttle
    window: 2s
    key_fields: [tenant_id]
  thr_trail:
    mode: throttle
    window: 2s
    trailing: true
    payload: last
    key_fields: [tenant_id]
  dedup_start:
    mode: dedup
    key_fields: [tenant_id]
  dedup_success:
    mode: dedup
    until: success
    key_fields: [tenant_id]
  dedup_expiry:
    mode: dedup
    until: expiry
    ttl: 2s
    key_fields: [tenant_id]
  excl:
    mode: debounce
    window: 1s
    exclusive: true
    key_fields: [tenant_id]
`

// predictJob is how long each job runs (the handler sleeps it).
const predictJob = 2500 * time.Millisecond

// Tolerances: a job runs within predictTolerance of its predicted start
// (schedules fire late by up to a few hundred ms, more on a loaded
// machine); the log keeps every event after a job's start predictMargin
// away from it (and for dedup until success and exclusive keys from its
// end), so that such lateness cannot move it into another job.
const (
	predictTolerance = time.Second
	predictMargin    = 750 * time.Millisecond
	// predictBefore is the room an event joining a round keeps before the
	// earliest moment the round can be taken (its due time less the due
	// slack): only the event's own trip to the daemon could move it.
	predictBefore = 200 * time.Millisecond
)

// predictPlan is the log: per type, "tenant@seconds" (and for deb_last and
// deb_accum the member they carry, "tenant@seconds=value").
var predictPlan = map[string][]string{
	// Tenant 1's first round takes three events; the event at 3 s opens
	// the next. Tenant 2: two rounds.
	"deb_fixed": {"1@0", "1@0.1", "1@0.3", "2@0.2", "1@3", "2@5", "2@5.2"},
	// Tenant 1 pushes its due time at each event until max_wait (3 s)
	// caps it: the job starts at the cap, its schedule published again by
	// the worker at each early delivery.
	"deb_extend": {"1@0", "1@0.6", "1@1.2", "1@1.8", "1@2.4", "2@0.5", "1@5"},
	"deb_last":   {"1@0=1", "1@0.2=2", "1@0.4=3", "2@2=7"},
	// The third distinct id fills the round: it runs at once ("!": the
	// event starts its job, so no margin is needed before that job).
	"deb_accum": {"1@0=1", "1@0.1=2", "1@0.2=2", "1@0.3=3!", "1@2=9"},
	// The leading event runs at once, the next two in its window are
	// dropped; the event at 3.5 s is a new window's leading edge.
	"thr": {"1@0", "1@0.8", "1@1", "1@3.5", "2@0.1"},
	// The events after the leading one gather into the trailing job at
	// the window's end (its payload the last one's), which starts the next
	// window; the event at 5.5 s comes after that one ended.
	"thr_trail":   {"1@0=1", "1@0.8=2", "1@1=3", "1@5.5=4", "2@0.1=5"},
	"dedup_start": {"1@0", "1@2", "2@1"},
	// The event at 1 s comes while the job runs (until 2.5 s): a
	// duplicate; the one at 3.5 s after it succeeded: a new job.
	"dedup_success": {"1@0", "1@1", "1@3.5", "2@0.3"},
	// The reservation lasts its 2 s ttl, whatever the job does.
	"dedup_expiry": {"1@0", "1@1", "1@3", "2@0.5"},
	// The second round is due while the first job still runs (1.25 s to
	// 3.75 s): it waits for the key, then runs.
	"excl": {"1@0", "1@2", "1@8"},
}

// plannedEvent is one event of the plan.
type plannedEvent struct {
	n       int // its number, in its args
	typ     string
	at      time.Duration
	args    string
	trigger bool // it makes its round run at once (fills it)
}

func predictEvents(t *testing.T) []plannedEvent {
	t.Helper()
	var out []plannedEvent
	types := make([]string, 0, len(predictPlan))
	for typ := range predictPlan {
		types = append(types, typ)
	}
	slices.Sort(types)
	for _, typ := range types {
		for _, p := range predictPlan[typ] {
			trigger := strings.HasSuffix(p, "!")
			tenant, rest, _ := strings.Cut(strings.TrimSuffix(p, "!"), "@")
			sec, val, hasVal := strings.Cut(rest, "=")
			f, err := strconv.ParseFloat(sec, 64)
			if err != nil {
				t.Fatal(err)
			}
			n := len(out) + 1
			args := fmt.Sprintf(`{"tenant_id":%s,"n":%d}`, tenant, n)
			if hasVal {
				field := "v" // deb_last, thr_trail
				if typ == "deb_accum" {
					field = "id"
				}
				args = fmt.Sprintf(`{"tenant_id":%s,"n":%d,%q:%s}`, tenant, n, field, val)
			}
			out = append(out, plannedEvent{n: n, typ: typ, at: time.Duration(f * float64(time.Second)), args: args, trigger: trigger})
		}
	}
	slices.SortStableFunc(out, func(a, b plannedEvent) int { return int(a.at - b.at) })
	return out
}

// prediction is what simulate says of one event, and of the jobs.
type prediction struct {
	events map[int]simulate.TraceEvent // by event number
	jobs   []simulate.TraceJob
}

// predictFromTrace reads a --trace file, the events named by the n of
// their log line's args.
func predictFromTrace(t *testing.T, tracePath string, lineN map[int]int) prediction {
	t.Helper()
	p := prediction{events: map[int]simulate.TraceEvent{}}
	type line struct {
		Event *simulate.TraceEvent `json:"event"`
		Job   *simulate.TraceJob   `json:"job"`
	}
	for _, l := range readNDJSON[line](t, tracePath) {
		switch {
		case l.Event != nil:
			p.events[lineN[l.Event.Line]] = *l.Event
		case l.Job != nil:
			p.jobs = append(p.jobs, *l.Job)
		}
	}
	return p
}

// checkMargins fails the test when the plan puts an event within
// predictMargin of a predicted job of its key: such an event could land in
// either job, and the test would compare a guess.
func checkMargins(t *testing.T, p prediction, triggers map[int]bool) {
	t.Helper()
	// A job started by an event (one that filled its round) cannot start
	// before that event: the events up to it are in it whatever the
	// lateness.
	triggered := map[int]time.Time{}
	for n, e := range p.events {
		if triggers[n] && e.At.After(triggered[e.Job]) {
			triggered[e.Job] = e.At
		}
	}
	for n, e := range p.events {
		for _, j := range p.jobs {
			if j.Type != e.Type || j.Key != e.Key {
				continue
			}
			if e.Job == j.Index && (!e.At.After(triggered[j.Index]) || j.DueAt.IsZero() && outcomeClass(e.Outcome) == "opened") {
				continue // the job this event started (or that an event after it started)
			}
			var d time.Duration
			switch {
			case e.Job == j.Index && !j.DueAt.IsZero():
				// In the job: a worker may take the round from its due time
				// less the due slack, before simulate's start.
				d = j.DueAt.Add(-debounce.DefaultDueSlack).Sub(e.At) + predictMargin - predictBefore
			case e.At.Before(j.Start):
				continue // an earlier round's
			default:
				// After the job started: a later start would take it in.
				d = e.At.Sub(j.Start)
			}
			if (e.Type == "dedup_success" || e.Type == "excl") && e.At.Sub(j.End).Abs() < d {
				d = e.At.Sub(j.End).Abs()
			}
			if d < predictMargin {
				t.Fatalf("the plan is ambiguous: %s event %d at %v is too near a job of its key (start %v, due %v, end %v)", e.Type, n, e.At, j.Start, j.DueAt, j.End)
			}
		}
	}
}

// ran is a job the real worker ran.
type ran struct {
	at  time.Time
	doc worker.Document
}

// decided is the daemon's answer to one event.
type decided struct {
	at       time.Time        // when the answer came
	arrived  time.Time        // when the daemon decided it (its recording's at)
	Outcome  debounce.Outcome `json:"outcome"`
	Round    string           `json:"round"`
	planned  plannedEvent
	response string
}

// outcomeClass: opened a round, joined one, or dropped by design.
func outcomeClass(o debounce.Outcome) string {
	switch o {
	case debounce.OutcomeScheduled, debounce.OutcomePublished:
		return "opened"
	case debounce.OutcomeCoalesced, debounce.OutcomeExtended:
		return "joined"
	}
	return string(o)
}

// TestSimulatePredictsTheDaemon sends the plan at its real times to coalesce
// serve (real Redis, NATS, local joins on) with coalesce work running the
// jobs, records it with serve --record, runs coalesce simulate on that
// recording, and compares, per mode and payload: every event's outcome,
// which events each job covered, each job's start (within
// predictTolerance), its count and its payload.
func TestSimulatePredictsTheDaemon(t *testing.T) {
	t.Parallel()
	rs := testenv.NewRedis(t)
	ns := testenv.NATS(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "coalesce.yaml")
	// Concurrency 40: each type's consumer prefetches 4 jobs. With 2 or 1
	// (concurrency 20 or 16 over these 10 types), a type's second job
	// that came due while its first ran started 1.2 to 1.5 s late, every
	// run: a worker delay simulate does not model (reported with issue 27).
	cfgText := predictPolicies + fmt.Sprintf("redis:\n  url: %s\n  prefix: %s\nnats:\n  url: %s\nworker:\n  concurrency: 40\n", rs.URL, "p", ns.URL)
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := predictEvents(t)

	// The plan must be unambiguous by simulate's own reading of it.
	cfg, err := config.Load(cfgPath, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	var planned strings.Builder
	lineN := map[int]int{}
	for i, e := range plan {
		_ = simulate.WriteEvent(&planned, simulate.Event{At: time.Unix(1_800_000_000, 0).Add(e.at), Type: e.typ, Args: json.RawMessage(e.args)})
		lineN[i+1] = e.n
	}
	pre := prediction{events: map[int]simulate.TraceEvent{}}
	if _, err := simulate.Run(context.Background(), simulate.Config{Policies: cfg.Policies, Workers: 40, JobDuration: predictJob,
		OnEvent: func(e simulate.TraceEvent) { pre.events[lineN[e.Line]] = e },
		OnJob:   func(j simulate.TraceJob) { pre.jobs = append(pre.jobs, j) },
	}, simulate.ReadLog(strings.NewReader(planned.String()))); err != nil {
		t.Fatal(err)
	}
	triggers := map[int]bool{}
	for _, e := range plan {
		triggers[e.n] = e.trigger
	}
	checkMargins(t, pre, triggers)

	// The worker's handler: it notes when each job starts, and runs for
	// predictJob.
	var mu sync.Mutex
	var jobs []ran
	handler := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		body, _ := io.ReadAll(r.Body)
		var doc worker.Document
		if err := json.Unmarshal(body, &doc); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		jobs = append(jobs, ran{at, doc})
		mu.Unlock()
		time.Sleep(predictJob)
	}))
	defer handler.Close()

	record := filepath.Join(dir, "recorded.ndjson")
	httpAddr := freeAddr(t)
	serve := start(t, "serve", "--config", cfgPath, "--http", httpAddr, "--record", record)
	base := "http://" + httpAddr
	waitHTTP(t, base+"/readyz", serve)
	work := start(t, "work", "--config", cfgPath, "--type", strings.Join(cfg.Types(), ","), "--post", handler.URL)
	// The worker's consumers exist shortly after it says it works.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(work.out.String(), "msg=working"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("coalesce work did not start:\n%s", work.out.String())
		}
	}
	time.Sleep(time.Second)

	// Send the plan at its times.
	client := &http.Client{Timeout: 10 * time.Second}
	t0 := time.Now().Add(500 * time.Millisecond)
	answers := map[int]decided{}
	for _, e := range plan {
		time.Sleep(time.Until(t0.Add(e.at)))
		body := fmt.Sprintf(`{"type":%q,"args":%s}`, e.typ, e.args)
		resp, err := client.Post(base+"/v1/events", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var d decided
		if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &d) != nil {
			t.Fatalf("event %d: %d %s", e.n, resp.StatusCode, raw)
		}
		d.at, d.planned, d.response = time.Now(), e, string(raw)
		answers[e.n] = d
	}
	// Wait for the jobs simulate predicted from the plan, and a little
	// more: a job too many would show.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		n := len(jobs)
		mu.Unlock()
		if n >= len(pre.jobs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs ran within 30 s, %d predicted\nwork:\n%s\nserve:\n%s", n, len(pre.jobs), work.out.String(), serve.out.String())
		}
	}
	time.Sleep(2*time.Second + predictJob)
	if code := work.stop(t); code != 0 {
		t.Errorf("work exit %d:\n%s", code, work.out.String())
	}
	if code := serve.stop(t); code != 0 {
		t.Errorf("serve exit %d:\n%s", code, serve.out.String())
	}

	// The recording has every event, once, with the daemon's answer.
	type recordedLine struct {
		At      time.Time        `json:"at"`
		Args    json.RawMessage  `json:"args"`
		Outcome debounce.Outcome `json:"outcome"`
	}
	recLines := readNDJSON[recordedLine](t, record)
	recN := map[int]int{} // line -> event number
	for i, l := range recLines {
		var a struct{ N int }
		_ = json.Unmarshal(l.Args, &a)
		if _, dup := answers[a.N]; !dup || recN[i+1] != 0 {
			t.Fatalf("recorded line %d: %s", i+1, l.Args)
		}
		recN[i+1] = a.N
		d := answers[a.N]
		d.arrived = l.At
		answers[a.N] = d
		if l.Outcome != answers[a.N].Outcome {
			t.Errorf("event %d recorded as %s, answered %s", a.N, l.Outcome, answers[a.N].Outcome)
		}
	}
	if len(recLines) != len(plan) {
		t.Fatalf("%d events recorded, %d sent", len(recLines), len(plan))
	}

	// coalesce simulate on the recording, through the CLI.
	trace := filepath.Join(dir, "trace.ndjson")
	code, out, stderr := runBin(t, "", "simulate", "--config", cfgPath, "--events", record, "--job-duration", predictJob.String(), "--trace", trace)
	if code != 0 {
		t.Fatalf("simulate: exit %d\n%s\n%s", code, out, stderr)
	}
	p := predictFromTrace(t, trace, recN)
	t.Logf("simulate on the recording:\n%s", out)

	compareWithDaemon(t, p, answers, jobs)
}

// compareWithDaemon compares simulate's prediction with what the daemon
// answered and the worker ran.
func compareWithDaemon(t *testing.T, p prediction, answers map[int]decided, jobs []ran) {
	t.Helper()
	byToken := map[string]ran{}
	for _, j := range jobs {
		if _, twice := byToken[j.doc.Round]; twice {
			t.Errorf("%s round %s ran twice", j.doc.Type, j.doc.Round)
		}
		byToken[j.doc.Round] = j
	}
	// Each real job's events: those whose round it is and that the daemon
	// decided before it started (an immediate job may start before its
	// event's answer reaches the client).
	realJob := map[string][]int{}
	for n, d := range answers {
		if j, ok := byToken[d.Round]; ok && !j.at.Before(d.arrived) {
			realJob[d.Round] = append(realJob[d.Round], n)
		}
	}
	predictedBySet := map[string]simulate.TraceJob{}
	for _, j := range p.jobs {
		var ns []int
		for n, e := range p.events {
			if e.Job == j.Index {
				ns = append(ns, n)
			}
		}
		slices.Sort(ns)
		predictedBySet[j.Type+fmt.Sprint(ns)] = j
	}
	matched := 0
	var late []time.Duration
	for token, ns := range realJob {
		j := byToken[token]
		slices.Sort(ns)
		key := j.doc.Type + fmt.Sprint(ns)
		pj, ok := predictedBySet[key]
		if !ok {
			t.Errorf("%s job at %s covered events %v: no job predicted covers those", j.doc.Type, j.at.Format("15:04:05.000"), ns)
			continue
		}
		matched++
		delete(predictedBySet, key)
		if d := j.at.Sub(pj.Start); d.Abs() > predictTolerance {
			t.Errorf("%s job of events %v started %v from its prediction (%s, predicted %s)", j.doc.Type, ns, d, j.at.Format("15:04:05.000"), pj.Start.Format("15:04:05.000"))
		}
		if !pj.DueAt.IsZero() && pj.Waits == 0 {
			late = append(late, j.at.Sub(pj.DueAt))
			t.Logf("%s job of events %v: %v after its due time", j.doc.Type, ns, j.at.Sub(pj.DueAt))
		}
		if j.doc.Release == "released" && j.doc.Summary.Events != pj.Summary.Events {
			t.Errorf("%s job of events %v counted %d events, predicted %d", j.doc.Type, ns, j.doc.Summary.Events, pj.Summary.Events)
		}
		if string(j.doc.Summary.Payload) != string(pj.Summary.Payload) {
			t.Errorf("%s job of events %v: payload %s, predicted %s", j.doc.Type, ns, j.doc.Summary.Payload, pj.Summary.Payload)
		}
		if fmt.Sprintf("%s", j.doc.Summary.Items) != fmt.Sprintf("%s", pj.Summary.Items) {
			t.Errorf("%s job of events %v: items %s, predicted %s", j.doc.Type, ns, j.doc.Summary.Items, pj.Summary.Items)
		}
	}
	for key, pj := range predictedBySet {
		t.Errorf("predicted %s job at %s (%s) did not run", pj.Type, pj.Start.Format("15:04:05.000"), key)
	}
	if extra := len(jobs) - matched; extra > 0 && len(realJob) < len(jobs) {
		t.Errorf("%d jobs ran covering no event", len(jobs)-len(realJob))
	}
	// Every event's outcome, by class.
	for n, d := range answers {
		e, ok := p.events[n]
		if !ok {
			t.Errorf("event %d: no prediction", n)
			continue
		}
		if outcomeClass(e.Outcome) != outcomeClass(d.Outcome) {
			t.Errorf("%s event %d at %v: the daemon answered %s, simulate predicted %s", d.planned.typ, n, d.planned.at, d.Outcome, e.Outcome)
		}
	}
	types := map[string]bool{}
	for _, j := range jobs {
		types[j.doc.Type] = true
	}
	if len(types) != len(predictPlan) || matched < 25 {
		t.Errorf("jobs of %d types ran, %d matched; the plan has %d types", len(types), matched, len(predictPlan))
	}
	slices.Sort(late)
	if len(late) > 0 {
		t.Logf("%d scheduled jobs started after their due time by %v (median), %v (max); simulate assumes %v",
			len(late), late[len(late)/2], late[len(late)-1], simulate.DefaultLateness)
	}
}
