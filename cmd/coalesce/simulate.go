package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coalesce-io/coalesce/internal/config"
	"github.com/coalesce-io/coalesce/simulate"
	"github.com/coalesce-io/coalesce/worker"
)

const simulateSynopsis = `simulate --config FILE (--events LOG | --generate SPEC) [--compare FIELD=V1,V2 | --config-b FILE] [flags]

Replays a timestamped event log through the policies of FILE (the daemon's
configuration) in virtual time, with coalesce's own decision code and Lua
scripts on an in-process Redis, schedules firing at their due time plus
--lateness, and --workers workers that close each round as real workers do
and run --job-duration. Prints, per job type: events, jobs, events per job,
events dropped, first-event-to-job latency p50/p99/max, the cap a round may
wait (window or max_wait), and the most jobs of one key in any window.

The log is NDJSON, one event per line, in time order (within a minute):
  {"at": "2026-01-02T15:04:05.123Z" or unix ms, "type": "...", "args": {...}, "key": "..."}
coalesce serve --record FILE writes one. With no log yet, --generate makes one:
  type=T[+T2],tenants=100,rate=50/s,duration=1h,burst=500/2s,every=10m,skew=1.2,items=1000,seed=1

--compare runs the same log through variants, side by side: a policy field
(window, max_wait, extend, mode, payload, key_fields=a+b, ...; prefix it
with a job type to change that policy only: recompute.window=5s,10s) or a
setting (workers, job_duration, start_delay, lateness); several --compare
flags combine. --config-b compares with another configuration file.
--expect 'jobs<=1200,p99_latency<=40s' exits 1 when a variant breaks a
budget (metrics are the table's rows; prefix one with a job type).
--svg draws a timeline of the busiest keys (or --key LABEL).

Not simulated: failures and retries, the reaper, local joins (the daemon's
in-process answers, which by design lead to the same jobs).`

// simulateFlags are the flags of coalesce simulate.
type simulateFlags struct {
	events, generate, saveLog, configA, configB string
	compare                                     repeated
	expect, svg, trace                          string
	keyLabels, only                             repeated
	svgKeys, keys, parallel                     int
	workers                                     optionalInt
	lateness, startDelay, jobDuration, burstWin time.Duration
	asJSON                                      bool
	svgFrom, svgTo                              string
}

func runSimulate(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("simulate", simulateSynopsis, stderr)
	var f simulateFlags
	fs.StringVar(&f.configA, "config", "", "the daemon's configuration file: the policies to simulate (required)")
	fs.StringVar(&f.events, "events", "", "NDJSON event log (- for stdin)")
	fs.StringVar(&f.generate, "generate", "", "simulate a synthetic log instead: key=value,... (type, tenants, rate, duration, events, skew, burst, every, items, field, start, seed)")
	fs.StringVar(&f.saveLog, "save-log", "", "also write the events simulated to this file (NDJSON; useful with --generate)")
	fs.StringVar(&f.configB, "config-b", "", "compare with the policies of this configuration file")
	fs.Var(&f.compare, "compare", "compare variants: FIELD=V1,V2,... (repeatable; flags combine)")
	fs.StringVar(&f.expect, "expect", "", "budgets, e.g. 'jobs<=1200,p99_latency<=40s': exit 1 when a variant breaks one")
	fs.DurationVar(&f.lateness, "lateness", simulate.DefaultLateness, "how late a schedule fires after its due time")
	fs.DurationVar(&f.startDelay, "start-delay", 0, "from a worker taking a job's message to its start")
	fs.DurationVar(&f.jobDuration, "job-duration", 0, "how long a job runs")
	fs.Var(&f.workers, "workers", "jobs run at once (0: no limit; default the file's worker.concurrency, else 4)")
	fs.DurationVar(&f.burstWin, "burst-window", simulate.DefaultBurstWindow, "window of max_jobs_per_key: the most jobs one key ran in any window this long")
	fs.IntVar(&f.keys, "keys", 0, "also print the N busiest keys")
	fs.IntVar(&f.parallel, "parallel", 0, "goroutines to split the keys over (0: one per CPU); used when workers cannot make jobs wait (--workers 0, or no --job-duration and --start-delay)")
	fs.BoolVar(&f.asJSON, "json", false, "print JSON instead of the table")
	fs.Var(&f.only, "type", "print this job type only (repeatable; all are simulated)")
	fs.StringVar(&f.svg, "svg", "", "draw a timeline of the busiest keys (or --key) into this SVG file")
	fs.IntVar(&f.svgKeys, "svg-keys", 3, "keys the timeline shows when no --key is given")
	fs.Var(&f.keyLabels, "key", "a key to draw, as the tables name it (tenant_id=42, an explicit key), of any type or of one: TYPE/LABEL; repeatable")
	fs.StringVar(&f.svgFrom, "svg-from", "", "timeline start: RFC 3339, or a duration after the log's first event (90s)")
	fs.StringVar(&f.svgTo, "svg-to", "", "timeline end: RFC 3339, or a duration after the log's first event")
	fs.StringVar(&f.trace, "trace", "", "write every event's fate and every job to this file (NDJSON)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if f.configA == "" {
		return usagef("--config is required: the daemon's configuration file, whose policies are simulated")
	}
	if (f.events == "") == (f.generate == "") {
		return usagef("give one of --events LOG and --generate SPEC")
	}
	if f.configB != "" && len(f.compare) > 0 {
		return usagef("give --compare or --config-b, not both")
	}
	if f.startDelay < 0 || f.jobDuration < 0 || f.burstWin < 0 || f.keys < 0 || f.parallel < 0 || f.svgKeys < 1 {
		return usagef("--start-delay, --job-duration, --burst-window, --keys and --parallel must not be negative; --svg-keys at least 1")
	}
	cfgA, err := loadSimConfig(f.configA)
	if err != nil {
		return err
	}
	base := simulate.Config{
		Policies: cfgA.Policies, MaxAge: cfgA.NATS.MaxAge, Lateness: f.lateness, StartDelay: f.startDelay,
		JobDuration: f.jobDuration, BurstWindow: f.burstWin, Keys: f.keys, Parallel: f.parallel,
	}
	if base.Lateness == 0 {
		base.Lateness = -1 // --lateness 0: none
	}
	switch {
	case f.workers.set && f.workers.n == 0:
		base.Workers = -1
	case f.workers.set:
		base.Workers = f.workers.n
	case cfgA.Worker.Concurrency > 0:
		base.Workers = cfgA.Worker.Concurrency
	default:
		base.Workers = worker.DefaultConcurrency
	}
	variants := []simulate.Variant{{Name: "as configured", Config: base}}
	switch {
	case len(f.compare) > 0:
		if variants, err = simulate.ParseCompare(base, f.compare); err != nil {
			return usagef("%v", err)
		}
	case f.configB != "":
		cfgB, err := loadSimConfig(f.configB)
		if err != nil {
			return err
		}
		b := base
		b.Policies, b.MaxAge = cfgB.Policies, cfgB.NATS.MaxAge
		variants = []simulate.Variant{{Name: "A " + shortName(f.configA), Config: base}, {Name: "B " + shortName(f.configB), Config: b}}
	}
	var expect []simulate.Expectation
	if f.expect != "" {
		if expect, err = simulate.ParseExpect(f.expect); err != nil {
			return usagef("%v", err)
		}
	}
	if f.trace != "" && len(variants) > 1 {
		return usagef("--trace writes one simulation's events and jobs: drop --compare or --config-b")
	}
	src, cleanup, err := newEventSource(f, stdin, len(variants) > 1 || f.svg != "" && len(f.keyLabels) == 0)
	if err != nil {
		return err
	}
	defer cleanup()

	// The simulation allocates briskly and keeps little: fewer GC cycles
	// cost some memory and save a third of the time.
	debug.SetGCPercent(400)

	var trace *traceWriter
	if f.trace != "" {
		if trace, err = newTraceWriter(f.trace); err != nil {
			return err
		}
		variants[0].OnEvent, variants[0].OnJob = trace.event, trace.job
	}
	svgKeys := keySet{}
	for _, k := range f.keyLabels {
		svgKeys.add(k)
	}
	wantKeys := max(f.keys, 0)
	if f.svg != "" && len(svgKeys) == 0 {
		wantKeys = max(wantKeys, f.svgKeys)
	}
	results := make([]simulate.Named, 0, len(variants))
	for i, v := range variants {
		cfg := v.Config
		cfg.Keys = wantKeys
		if f.svg != "" && len(svgKeys) > 0 {
			cfg.Timeline = svgKeys.has
		}
		events, closeEvents, err := src(i == 0 && f.saveLog != "")
		if err != nil {
			return err
		}
		r, err := simulate.Run(ctx, cfg, events)
		closeEvents()
		if err != nil {
			return fmt.Errorf("%s: %w", v.Name, err)
		}
		fmt.Fprintf(stderr, "simulate: %s: %d events from %s to %s (%s) in %s\n", v.Name, r.Total.Events,
			r.From.UTC().Format(time.RFC3339), r.To.UTC().Format(time.RFC3339), simulate.FormatDuration(r.To.Sub(r.From)), r.Took.Round(time.Millisecond))
		results = append(results, simulate.Named{Name: v.Name, Result: r})
	}
	if trace != nil {
		if err := trace.close(); err != nil {
			return err
		}
	}
	if f.svg != "" {
		if err := drawTimeline(ctx, f, variants, results, svgKeys, src); err != nil {
			return err
		}
	}
	if err := printResults(stdout, f, results); err != nil {
		return err
	}
	if len(expect) > 0 {
		fails, err := simulate.Check(results, expect)
		if err != nil {
			return usagef("%v", err)
		}
		for _, fl := range fails {
			fmt.Fprintf(stderr, "simulate: over budget: %s\n", fl)
		}
		if len(fails) > 0 {
			return exitError{exitFailure}
		}
	}
	return nil
}

// optionalInt is an int flag that knows whether it was given.
type optionalInt struct {
	n   int
	set bool
}

func (o *optionalInt) String() string {
	if !o.set {
		return ""
	}
	return strconv.Itoa(o.n)
}

func (o *optionalInt) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return errors.New("a whole number, 0 or more")
	}
	o.n, o.set = n, true
	return nil
}

// repeated is a repeatable flag whose values may hold commas.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, " ") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

// loadSimConfig reads a configuration file for its policies, with no
// environment overrides: a simulation depends on the file alone.
func loadSimConfig(path string) (*config.Config, error) {
	cfg, err := config.Load(path, func(string) string { return "" })
	if err != nil {
		return nil, err
	}
	if len(cfg.Policies) == 0 {
		return nil, fmt.Errorf("%s has no policies: nothing to simulate", path)
	}
	return cfg, nil
}

func shortName(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[i+1:]
	}
	return path
}

// eventSource opens the events anew for each pass; save tees them to
// --save-log.
type eventSource func(save bool) (iter.Seq2[simulate.Event, error], func(), error)

// newEventSource returns the log (or the generator) as a source that can be
// read several times: stdin is copied to a temporary file first when more
// than one pass is needed.
func newEventSource(f simulateFlags, stdin io.Reader, passes bool) (eventSource, func(), error) {
	tee := func(events iter.Seq2[simulate.Event, error], save bool) (iter.Seq2[simulate.Event, error], func(), error) {
		if !save {
			return events, func() {}, nil
		}
		out, err := os.Create(f.saveLog)
		if err != nil {
			return nil, nil, err
		}
		w := bufio.NewWriterSize(out, 1<<16)
		return func(yield func(simulate.Event, error) bool) {
				for ev, err := range events {
					if err == nil {
						if werr := simulate.WriteEvent(w, ev); werr != nil {
							yield(ev, fmt.Errorf("--save-log: %w", werr))
							return
						}
					}
					if !yield(ev, err) {
						return
					}
				}
			}, func() {
				_ = w.Flush()
				_ = out.Close()
			}, nil
	}
	if f.generate != "" {
		spec, err := simulate.ParseGenSpec(f.generate)
		if err != nil {
			return nil, nil, usagef("--generate: %v", err)
		}
		return func(save bool) (iter.Seq2[simulate.Event, error], func(), error) {
			return tee(simulate.Generate(spec), save)
		}, func() {}, nil
	}
	path, cleanup := f.events, func() {}
	if path == "-" && passes {
		tmp, err := os.CreateTemp("", "coalesce-simulate-*.ndjson")
		if err != nil {
			return nil, nil, err
		}
		cleanup = func() { _ = os.Remove(tmp.Name()) }
		if _, err := io.Copy(tmp, stdin); err != nil {
			tmp.Close()
			cleanup()
			return nil, nil, fmt.Errorf("reading the log from stdin: %w", err)
		}
		if err := tmp.Close(); err != nil {
			cleanup()
			return nil, nil, err
		}
		path = tmp.Name()
	}
	return func(save bool) (iter.Seq2[simulate.Event, error], func(), error) {
		if path == "-" {
			return tee(wrapLogErrors("stdin", simulate.ReadLog(stdin)), save)
		}
		file, err := os.Open(path)
		if err != nil {
			return nil, nil, err
		}
		events, done, err := tee(wrapLogErrors(f.events, simulate.ReadLog(bufio.NewReaderSize(file, 1<<16))), save)
		if err != nil {
			file.Close()
			return nil, nil, err
		}
		return events, func() { done(); file.Close() }, nil
	}, cleanup, nil
}

// wrapLogErrors names the log in its errors.
func wrapLogErrors(name string, events iter.Seq2[simulate.Event, error]) iter.Seq2[simulate.Event, error] {
	return func(yield func(simulate.Event, error) bool) {
		for ev, err := range events {
			if err != nil {
				err = fmt.Errorf("%s: %w", name, err)
			}
			if !yield(ev, err) {
				return
			}
		}
	}
}

func printResults(w io.Writer, f simulateFlags, results []simulate.Named) error {
	if f.asJSON {
		type variantJSON struct {
			Name string `json:"name"`
			*simulate.Result
		}
		out := struct {
			Variants []variantJSON `json:"variants"`
		}{}
		for _, r := range results {
			out.Variants = append(out.Variants, variantJSON{Name: r.Name, Result: r.Result})
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	shown := results
	if len(f.only) > 0 {
		shown = make([]simulate.Named, len(results))
		for i, r := range results {
			cut := *r.Result
			cut.Types = nil
			for _, t := range r.Result.Types {
				if slices.Contains(f.only, t.Type) {
					cut.Types = append(cut.Types, t)
				}
			}
			if len(cut.Types) == 0 {
				return usagef("--type %s: no such job type in the configuration", strings.Join(f.only, ", "))
			}
			shown[i] = simulate.Named{Name: r.Name, Result: &cut}
		}
	}
	if err := simulate.WriteTable(w, shown); err != nil {
		return err
	}
	for _, r := range results {
		for typ, n := range r.Result.Unknown {
			fmt.Fprintf(w, "\n%s: %d events of type %q skipped: the configuration has no policy for it\n", r.Name, n, typ)
		}
		for _, t := range r.Result.Types {
			if t.RefusedExample != "" {
				fmt.Fprintf(w, "\n%s: %d %s events refused, e.g. %s\n", r.Name, t.Refused, t.Type, t.RefusedExample)
			}
		}
	}
	if f.keys > 0 {
		for _, r := range results {
			fmt.Fprintf(w, "\nbusiest keys (%s):\n", r.Name)
			if err := simulate.WriteKeys(w, r.Result); err != nil {
				return err
			}
		}
	}
	return nil
}

// drawTimeline writes the --svg picture: the chosen keys (--key, else the
// busiest of the first variant), one row per key and variant. Keys not
// chosen before the runs are drawn from a second pass.
func drawTimeline(ctx context.Context, f simulateFlags, variants []simulate.Variant, results []simulate.Named, keys keySet, src eventSource) error {
	if len(keys) == 0 {
		for _, k := range results[0].Result.Keys[:min(len(results[0].Result.Keys), f.svgKeys)] {
			keys.add(k.Type + "/" + k.Key)
		}
		if len(keys) == 0 {
			return errors.New("--svg: no key had an event")
		}
		for i, v := range variants {
			cfg := v.Config
			cfg.OnEvent, cfg.OnJob = nil, nil
			cfg.Timeline = keys.has
			events, closeEvents, err := src(false)
			if err != nil {
				return err
			}
			r, err := simulate.Run(ctx, cfg, events)
			closeEvents()
			if err != nil {
				return err
			}
			results[i].Result.Timeline = r.Timeline
		}
	}
	merged := &simulate.Result{From: results[0].Result.From}
	for _, r := range results {
		for _, k := range r.Result.Timeline {
			if len(results) > 1 {
				k.Key += " (" + r.Name + ")"
			}
			merged.Timeline = append(merged.Timeline, k)
		}
	}
	if len(merged.Timeline) == 0 {
		return fmt.Errorf("--svg: no event of the keys %s", strings.Join(sortedKeys(keys), ", "))
	}
	o := simulate.TimelineOptions{Title: "coalesce simulate: " + shortName(f.configA)}
	var err error
	if o.From, err = timeFlag("--svg-from", f.svgFrom, merged.From); err != nil {
		return err
	}
	if o.To, err = timeFlag("--svg-to", f.svgTo, merged.From); err != nil {
		return err
	}
	out, err := os.Create(f.svg)
	if err != nil {
		return err
	}
	if err := simulate.WriteTimeline(out, merged, o); err != nil {
		out.Close()
		return fmt.Errorf("--svg: %w", err)
	}
	return out.Close()
}

// keySet is the keys --svg draws: labels of any type, or TYPE/LABEL.
type keySet map[string]bool

func (k keySet) add(s string) { k[s] = true }

func (k keySet) has(typ, label string) bool { return k[label] || k[typ+"/"+label] }

func sortedKeys(m keySet) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// timeFlag reads an RFC 3339 time or a duration after base; "" is zero.
func timeFlag(name, v string, base time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := config.ParseDuration(v)
	if err != nil {
		return time.Time{}, usagef("%s %q: give RFC 3339 or a duration after the log's first event (90s)", name, v)
	}
	return base.Add(d), nil
}

// traceWriter writes --trace: one JSON line per event and per job.
type traceWriter struct {
	f   *os.File
	w   *bufio.Writer
	enc *json.Encoder
	err error
}

func newTraceWriter(path string) (*traceWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriterSize(f, 1<<16)
	return &traceWriter{f: f, w: w, enc: json.NewEncoder(w)}, nil
}

func (t *traceWriter) event(e simulate.TraceEvent) {
	if t.err == nil {
		t.err = t.enc.Encode(struct {
			Event simulate.TraceEvent `json:"event"`
		}{e})
	}
}

func (t *traceWriter) job(j simulate.TraceJob) {
	if t.err == nil {
		t.err = t.enc.Encode(struct {
			Job simulate.TraceJob `json:"job"`
		}{j})
	}
}

func (t *traceWriter) close() error {
	err := errors.Join(t.err, t.w.Flush(), t.f.Close())
	if err != nil {
		return fmt.Errorf("--trace: %w", err)
	}
	return nil
}
