package daemon

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/coalesce-io/coalesce/dashboard"
	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/publisher"
	"github.com/coalesce-io/coalesce/worker"
)

// Metrics are the Prometheus series of the daemon and the worker, all under
// the coalesce_ prefix, on their own registry.
type Metrics struct {
	Registry *prometheus.Registry

	events        *prometheus.CounterVec
	decision      *prometheus.HistogramVec
	storeErrors   *prometheus.CounterVec
	publishErrors *prometheus.CounterVec
	publishes     *prometheus.CounterVec
	releases      *prometheus.CounterVec
	roundEvents   *prometheus.HistogramVec
	roundAge      *prometheus.HistogramVec
	jobs          *prometheus.CounterVec
	guard         *prometheus.CounterVec
	ingest        *prometheus.CounterVec
	cron          *prometheus.CounterVec
	http          *prometheus.CounterVec
	reaper        *prometheus.CounterVec
	mismatch      *prometheus.CounterVec
	push          *prometheus.CounterVec
	protocol      *prometheus.CounterVec
	keyWait       *prometheus.HistogramVec
	dead          *prometheus.CounterVec
	replication   *prometheus.CounterVec
	failovers     prometheus.Counter

	types map[string]bool // the job types a label may name
	// later are the series registered after NewMetrics: the outbox's and
	// local joins', when configured.
	later []prometheus.Collector

	// History remembers the rounds this daemon opens (and a watched key's
	// events) for the dashboard's timelines.
	History *dashboard.History
}

// UnknownType is the type label of every job type the metrics were not
// given: an event's type is its sender's to choose, and a label value per
// type would let any caller grow /metrics without bound.
const UnknownType = "_unknown"

// NewMetrics registers every series on a new registry (plus Go and process
// collectors). types are the job types the series may name (the configured
// policies, a worker's types); any other is counted as UnknownType.
func NewMetrics(types ...string) *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry(), types: make(map[string]bool, len(types)), History: dashboard.NewHistory(0)}
	for _, t := range types {
		m.types[t] = true
	}
	f := func(c prometheus.Collector) { m.Registry.MustRegister(c) }
	m.events = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coalesce_events_total",
		Help: "Events decided, by job type and outcome (scheduled, coalesced, extended, published, throttled, duplicate, bypassed, error)."}, []string{"type", "outcome"})
	m.decision = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coalesce_decision_seconds",
		Help:    "Time to decide one event (fingerprint, Redis round trip, and the publish when it opens a round).",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}}, []string{"type"})
	m.storeErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coalesce_store_errors_total",
		Help: "Redis failures during a decision, by job type and failure mode (open: published without a reservation; closed: refused)."}, []string{"type", "fail"})
	m.publishErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coalesce_publish_errors_total",
		Help: "Failed publishes to JetStream, by job type."}, []string{"type"})
	m.publishes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coalesce_publishes_total",
		Help: "Publishes to JetStream, by job type and kind (schedule, immediate, duplicate: already stored)."}, []string{"type", "kind"})
	m.releases = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coalesce_releases_total",
		Help: "Rounds closed at job start or finish, by job type and result (released, retry, stale_token, missing, not_due, skipped)."}, []string{"type", "result"})
	m.roundEvents = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coalesce_round_events",
		Help:    "Events coalesced into a round, observed when its job starts.",
		Buckets: prometheus.ExponentialBuckets(1, 4, 10)}, []string{"type"})
	m.roundAge = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coalesce_round_age_seconds",
		Help:    "From a round's first event to its job's start.",
		Buckets: []float64{.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}}, []string{"type"})
	m.jobs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coalesce_jobs_total",
		Help: "Job deliveries handled by workers (coalesce work, and the worker protocol's counted by the daemon that answers it), by job type and result (ok, retry, dead, rescheduled, superseded, done, key_busy, duplicate_done, duplicate_running, release_failed)."}, []string{"type", "result"})
	m.guard = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coalesce_guard_total",
		Help: "Run-once guard decisions, by job type and result."}, []string{"type", "result"})
	m.ingest = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coalesce_ingest_total",
		Help: "Events received over NATS, by source (request, stream) and result (ok, error for a request; ok, parked, retry, dead, redelivered for a stored event)."}, []string{"source", "result"})
	m.cron = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coalesce_cron_ticks_total",
		Help: "Cron rule ticks, by rule and result (ok, error)."}, []string{"rule", "result"})
	m.http = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coalesce_http_requests_total",
		Help: "HTTP requests, by route and status code."}, []string{"route", "code"})
	m.reaper = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coalesce_reaper_actions_total",
		Help: "Reaper actions: candidate (seen unpublished), released (unpublished and unchanged, no message), marked (unpublished, but its message was there), overdue (past due and not taken), lookup (looked up in the stream), missing (message not found), repaired (job published again), error (a pass failed)."}, []string{"action"})
	m.mismatch = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coalesce_layout_mismatch_total",
		Help: "Events that met a pending round of the other layout (the policy's payload changed with rounds pending) and joined it, by job type."}, []string{"type"})
	m.push = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coalesce_push_total",
		Help: "Jobs pushed to an HTTP handler (coalesce work --post), by job type and answer (2xx, 3xx, 4xx, 408, 429, 5xx, error: none)."}, []string{"type", "result"})
	m.protocol = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coalesce_protocol_total",
		Help: "Worker protocol operations, by job type and result (start_run, start_ack, start_retry, start_dead, finish_ok, finish_failed, finish_dead)."}, []string{"type", "result"})
	m.keyWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coalesce_key_wait_seconds",
		Help:    "How long an exclusive job waited for its key (another job of the key running), observed as it starts.",
		Buckets: []float64{.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800}}, []string{"type"})
	m.dead = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coalesce_dead_letters_total",
		Help: "Dead letters acted on through the API, by action (replayed, purged)."}, []string{"action"})
	m.replication = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coalesce_replication_doubts_total",
		Help: "Decisions and takes the Redis replicas did not confirm in time (replication acks), by job type and failure mode (closed: refused; open: stood, and a failover now could lose it)."}, []string{"type", "fail"})
	m.failovers = prometheus.NewCounter(prometheus.CounterOpts{Name: "coalesce_redis_failovers_total",
		Help: "Changes of a Redis primary noticed (a failover, a promotion, a restart), each followed by a reconcile of the rounds past due."})
	for _, c := range append(m.collectors(), prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{})) {
		f(c)
	}
	return m
}

// WatchLocalJoins exports co's local-join counters (debounce.LocalStats).
// The first Coalescer a Metrics watches is the one it reports.
func (m *Metrics) WatchLocalJoins(co *debounce.Coalescer) {
	register := func(c prometheus.Collector) {
		if m.Registry.Register(c) == nil {
			m.later = append(m.later, c)
		}
	}
	counter := func(name, help string, v func(debounce.LocalStats) uint64) {
		register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v(co.LocalStats())) }))
	}
	counter("coalesce_local_joins_total", "Events answered without a Redis call, their round known pending here (local joins).",
		func(s debounce.LocalStats) uint64 { return s.Joined })
	counter("coalesce_local_flushes_total", "Flushes of locally joined events to Redis (round trips).",
		func(s debounce.LocalStats) uint64 { return s.Flushes })
	counter("coalesce_local_flush_errors_total", "Flush calls that got no reply (sent again unchanged).",
		func(s debounce.LocalStats) uint64 { return s.FlushErrors })
	counter("coalesce_local_skipped_total", "Events sent to Redis without a local try: their type's events were seldom answered locally (the local-join gate).",
		func(s debounce.LocalStats) uint64 { return s.Skipped })
	counter("coalesce_local_resubmitted_total", "Locally joined events submitted again: their round was gone at the flush.",
		func(s debounce.LocalStats) uint64 { return s.Resubmitted })
	register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coalesce_local_rounds",
		Help: "Rounds this daemon remembers for local joins."}, func() float64 { return float64(co.LocalStats().Rounds) }))
}

// collectors are coalesce's own series.
func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.replication, m.failovers, m.dead, m.keyWait, m.protocol, m.push, m.reaper, m.mismatch, m.events, m.decision, m.storeErrors, m.publishErrors, m.publishes, m.releases,
		m.roundEvents, m.roundAge, m.jobs, m.guard, m.ingest, m.cron, m.http}
}

// typ is the label value of a job type.
func (m *Metrics) typ(jobType string) string {
	if m.types[jobType] {
		return jobType
	}
	return UnknownType
}

// DebounceHooks feed the decision, store and release series.
func (m *Metrics) DebounceHooks() debounce.Hooks {
	return debounce.Hooks{
		Decision: func(jobType string, d debounce.Decision, err error, took time.Duration) {
			outcome := string(d.Outcome)
			if err != nil {
				outcome = "error"
			}
			m.events.WithLabelValues(m.typ(jobType), outcome).Inc()
			m.decision.WithLabelValues(m.typ(jobType)).Observe(took.Seconds())
			if err == nil {
				m.History.Decided(jobType, &d) // an opening, or a watched key's event; else one atomic load
			}
		},
		StoreError: func(jobType string, fail debounce.FailMode, _ error) {
			m.storeErrors.WithLabelValues(m.typ(jobType), string(fail)).Inc()
		},
		PublishError: func(jobType string, _ error) { m.publishErrors.WithLabelValues(m.typ(jobType)).Inc() },
		Release: func(jobType string, r debounce.ReleaseResult, _ debounce.Summary) {
			m.releases.WithLabelValues(m.typ(jobType), string(r)).Inc()
		},
		LayoutMismatch: func(jobType string) { m.mismatch.WithLabelValues(m.typ(jobType)).Inc() },
		Replication: func(jobType string, fail debounce.FailMode, _ error) {
			m.replication.WithLabelValues(m.typ(jobType), string(fail)).Inc()
		},
	}
}

// OnFailover counts a change of primary noticed.
func (m *Metrics) OnFailover() { m.failovers.Inc() }

// OnPublish feeds the publish series (publisher.Config.OnPublish).
func (m *Metrics) OnPublish(info publisher.PublishInfo) {
	if info.Err != nil {
		return // counted by the publish error hook
	}
	kind := "immediate"
	switch {
	case info.Duplicate:
		kind = "duplicate"
	case info.Scheduled:
		kind = "schedule"
	}
	m.publishes.WithLabelValues(m.typ(info.JobType), kind).Inc()
}

// OnKeyWait observes an exclusive job's wait for its key.
func (m *Metrics) OnKeyWait(jobType string, waited time.Duration) {
	m.keyWait.WithLabelValues(m.typ(jobType)).Observe(waited.Seconds())
}

// OnPush counts one push request's answer (worker.PushConfig.Result).
func (m *Metrics) OnPush(jobType, result string) {
	m.push.WithLabelValues(m.typ(jobType), result).Inc()
}

// WorkerHooks feed the job, round and guard series.
func (m *Metrics) WorkerHooks() worker.Hooks {
	return worker.Hooks{
		Job: func(jobType string, result worker.JobResult, _ debounce.ReleaseResult, _ time.Duration) {
			m.jobs.WithLabelValues(m.typ(jobType), string(result)).Inc()
		},
		RoundAge: func(jobType string, age time.Duration, events int) {
			m.roundAge.WithLabelValues(m.typ(jobType)).Observe(age.Seconds())
			m.roundEvents.WithLabelValues(m.typ(jobType)).Observe(float64(events))
		},
		Guard:   func(jobType string, r worker.GuardResult) { m.guard.WithLabelValues(m.typ(jobType), string(r)).Inc() },
		KeyWait: m.OnKeyWait,
	}
}
