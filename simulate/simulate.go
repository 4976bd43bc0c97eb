// Package simulate replays an event log through coalesce policies in
// virtual time and reports what they would do: jobs, events per job,
// events dropped, and how long rounds wait.
//
// The decisions are coalesce's own: a debounce.Coalescer runs Submit and
// its Lua scripts against an in-process Redis on a virtual clock
// (internal/vredis), a publisher stands in for JetStream (a schedule fires
// at its due time plus Config.Lateness; a reschedule replaces it, as the
// stream's subject rollup does), and virtual workers close each round as
// the real ones do (worker.StartDelivery: Start, exclusive keys' leases,
// rescheduling a round not yet due), run for Config.JobDuration and Finish.
// Nothing sleeps: a day of events takes tens of CPU-seconds, split over the
// CPUs when the workers cannot make a job wait (Config.Parallel).
//
// What it does not model: failures (Redis or NATS outages, crashed
// workers, handler errors and their retries), local joins (the daemon
// answers some joins in process; by their design they lead to the same
// jobs, and the simulator sends every event to its store), message size
// limits, and the reaper (it has nothing to do when nothing fails).
package simulate

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"runtime"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// Defaults of Config.
const (
	// DefaultLateness is how late a schedule fires after its due time, and
	// its job starts: nats-server 2.15 fired them 2 to 255 ms late here
	// (TestSimulatePredictsTheDaemon, median 55 to 171 ms by run).
	DefaultLateness = 125 * time.Millisecond
	// DefaultWorkers is how many jobs run at once: the worker's default
	// concurrency.
	DefaultWorkers = 4
	// DefaultBurstWindow is the window of TypeStats.MaxJobsPerKey: how
	// hard one key's jobs hit what they run against.
	DefaultBurstWindow = time.Minute
)

// Config configures a simulation.
type Config struct {
	// Policies are the job types' policies, as the daemon's configuration
	// gives them (config.Config.Policies).
	Policies []debounce.Policy
	// MaxAge is the stream's max age (nats.max_age; default
	// debounce.DefaultMaxAge).
	MaxAge time.Duration
	// Lateness: a schedule fires this long after its due time (default
	// DefaultLateness; negative: 0).
	Lateness time.Duration
	// StartDelay: a job's Start comes this long after a worker took its
	// message (fetching it, a slow process start).
	StartDelay time.Duration
	// JobDuration: how long a job runs once started (default 0).
	JobDuration time.Duration
	// Workers: jobs run at once, across types (default DefaultWorkers;
	// negative: no limit).
	Workers int
	// BurstWindow is the window of TypeStats.MaxJobsPerKey (default
	// DefaultBurstWindow).
	BurstWindow time.Duration
	// Keys: report the KeyStats of this many busiest keys (by events).
	Keys int
	// Timeline keeps, for Result.Timeline, every event and round of the
	// keys it selects (nil: none kept). It is called once per key, with
	// the key's label, the first time the key is seen.
	Timeline func(jobType, label string) bool
	// OnEvent and OnJob, when set, get a record of every event (once its
	// fate is known: dropped, or its job started) and of every job run.
	OnEvent func(TraceEvent)
	OnJob   func(TraceJob)
	// Parallel: simulate on this many goroutines, each with the keys of
	// its share (0: GOMAXPROCS; 1: one). Keys never interact, so the result
	// is the same, as long as the workers cannot make a job wait (no limit
	// on them, or jobs that take no time and start at once); otherwise,
	// and with OnEvent or OnJob, it runs on one.
	Parallel int
}

// shards is how many goroutines a simulation runs on.
func (cfg Config) shards() int {
	if cfg.OnEvent != nil || cfg.OnJob != nil || cfg.Workers >= 0 && (cfg.JobDuration > 0 || cfg.StartDelay > 0) {
		return 1
	}
	if cfg.Parallel > 0 {
		return cfg.Parallel
	}
	return runtime.GOMAXPROCS(0)
}

// ErrConfig is matched by the errors Run returns for a bad Config.
var ErrConfig = errors.New("simulate: invalid config")

func (cfg Config) withDefaults() Config {
	if cfg.Lateness == 0 {
		cfg.Lateness = DefaultLateness
	}
	cfg.Lateness = max(cfg.Lateness, 0)
	if cfg.Workers == 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.MaxAge == 0 {
		cfg.MaxAge = debounce.DefaultMaxAge
	}
	return cfg
}

func (cfg Config) validate() error {
	switch {
	case len(cfg.Policies) == 0:
		return fmt.Errorf("%w: no policies: give the daemon's configuration file (policies:)", ErrConfig)
	case cfg.StartDelay < 0:
		return fmt.Errorf("%w: start delay %v is negative", ErrConfig, cfg.StartDelay)
	case cfg.JobDuration < 0:
		return fmt.Errorf("%w: job duration %v is negative", ErrConfig, cfg.JobDuration)
	case cfg.BurstWindow < 0:
		return fmt.Errorf("%w: burst window %v is negative", ErrConfig, cfg.BurstWindow)
	case cfg.Keys < 0:
		return fmt.Errorf("%w: keys %d is negative", ErrConfig, cfg.Keys)
	}
	return nil
}

// Run replays events (in time order: ReadLog or Generate) through the
// policies and returns what happened. It stops at the first bad event the
// sequence yields, or when ctx ends.
func Run(ctx context.Context, cfg Config, events iter.Seq2[Event, error]) (*Result, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	var r *Result
	if n := cfg.shards(); n > 1 {
		var err error
		if r, err = runSharded(ctx, cfg, n, events); err != nil {
			return nil, err
		}
	} else {
		s, err := newSim(cfg)
		if err != nil {
			return nil, err
		}
		defer s.close()
		if err := s.replay(ctx, events); err != nil {
			return nil, err
		}
		r = s.result()
	}
	r.Took = time.Since(start)
	return r, nil
}

// Result is what a simulation found.
type Result struct {
	// From and To span the log's events; End is when the last job ended.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	End  time.Time `json:"end"`
	// Types are the policies' figures, in the configuration's order;
	// Total adds them up (its latencies over every job).
	Types []TypeStats `json:"types"`
	Total TypeStats   `json:"total"`
	// Keys are the busiest keys (Config.Keys), most events first.
	Keys []KeyStats `json:"keys,omitempty"`
	// Unknown counts events of types without a policy, by type (they are
	// skipped).
	Unknown map[string]int `json:"unknown,omitempty"`
	// Timeline has the keys Config.Timeline chose.
	Timeline []KeyTimeline `json:"-"`
	// Took is the simulation's wall time.
	Took time.Duration `json:"took_ns"`
}

// TypeStats are one job type's figures.
type TypeStats struct {
	Type   string `json:"type"`
	Events int    `json:"events"`
	// Jobs run (a job whose round was taken at its start, or an immediate
	// job: dedup, throttle's leading edge).
	Jobs int `json:"jobs"`
	// EventsPerJob is Events / Jobs.
	EventsPerJob float64 `json:"events_per_job"`
	// The events' outcomes: Opened (scheduled or published: a new round),
	// Joined (coalesced or extended), Extended of them, and the dropped
	// by design: Throttled, Duplicate.
	Opened    int `json:"opened"`
	Joined    int `json:"joined"`
	Extended  int `json:"extended"`
	Throttled int `json:"throttled"`
	Duplicate int `json:"duplicate"`
	Dropped   int `json:"dropped"`
	// Refused: events Submit refused (args without the key fields, bad
	// args); RefusedExample is the first such error.
	Refused        int    `json:"refused,omitempty"`
	RefusedExample string `json:"refused_example,omitempty"`
	// Latency, per job: from its round's first event to its start.
	LatencyP50 time.Duration `json:"latency_p50_ns"`
	LatencyP99 time.Duration `json:"latency_p99_ns"`
	LatencyMax time.Duration `json:"latency_max_ns"`
	// Cap is the longest a round may wait by its policy (max_wait with
	// extend, else window; 0 for immediate modes); Capped counts the
	// extended rounds that reached max_wait.
	Cap    time.Duration `json:"cap_ns,omitempty"`
	Capped int           `json:"capped,omitempty"`
	// MaxJobsPerKey is the most jobs one key ran in any BurstWindow, and
	// BusiestKey that key.
	MaxJobsPerKey int           `json:"max_jobs_per_key"`
	BurstWindow   time.Duration `json:"burst_window_ns"`
	BusiestKey    string        `json:"busiest_key,omitempty"`
	// Keys that had events.
	Keys int `json:"keys"`
	// KeyWaits counts deliveries that found their exclusive key busy;
	// Rescheduled, deliveries of an extended round not yet due (published
	// again for the later time); Repeated, rounds whose job ran twice
	// (never, unless something is wrong).
	KeyWaits    int `json:"key_waits,omitempty"`
	Rescheduled int `json:"rescheduled,omitempty"`
	Repeated    int `json:"repeated,omitempty"`
}

// KeyStats are one key's figures.
type KeyStats struct {
	Type       string        `json:"type"`
	Key        string        `json:"key"` // its label: explicit key, key fields, or args
	Events     int           `json:"events"`
	Jobs       int           `json:"jobs"`
	Dropped    int           `json:"dropped"`
	LatencyMax time.Duration `json:"latency_max_ns"`
	// MaxJobs is the most jobs in any burst window.
	MaxJobs int `json:"max_jobs"`
}

// TraceEvent is one event's fate.
type TraceEvent struct {
	Index   int              `json:"index"` // 0-based, in time order
	Line    int              `json:"line,omitempty"`
	At      time.Time        `json:"at"`
	Type    string           `json:"type"`
	Key     string           `json:"key"`
	Outcome debounce.Outcome `json:"outcome"`
	// Job is the index of the job that ran for the event's round; -1 when
	// dropped (throttled, duplicate) or refused.
	Job int `json:"job"`
	// Error is why Submit refused the event.
	Error string `json:"error,omitempty"`
}

// TraceJob is one job run.
type TraceJob struct {
	Index   int                    `json:"index"`
	Type    string                 `json:"type"`
	Key     string                 `json:"key"`
	Round   debounce.Token         `json:"round"`
	Release debounce.ReleaseResult `json:"release"`
	// OpenedAt is the round's first event; DueAt when it was due (zero:
	// immediate); Start and End the run.
	OpenedAt time.Time        `json:"opened_at"`
	DueAt    time.Time        `json:"due_at,omitzero"`
	Start    time.Time        `json:"start"`
	End      time.Time        `json:"end"`
	Summary  debounce.Summary `json:"summary"`
	// Events are the indices of the events the round took in.
	Events []int `json:"events"`
	// Waits: deliveries that found its exclusive key busy.
	Waits int `json:"waits,omitempty"`
}

// KeyTimeline is one key's events and rounds, for a timeline picture.
type KeyTimeline struct {
	Type   string
	Key    string
	Policy debounce.Policy
	Events []TimelineEvent
	Rounds []TimelineRound
}

// TimelineEvent is one event of a key.
type TimelineEvent struct {
	At      time.Time
	Outcome debounce.Outcome
}

// TimelineRound is one round of a key: from its first event to its job.
type TimelineRound struct {
	Opened time.Time
	// Dues are its due times: the first, then each extension's.
	Dues  []time.Time
	Cap   time.Time // extend: first event + max_wait
	Start time.Time // its job (zero: never ran)
	End   time.Time
	// Events it took in.
	Events int
}
