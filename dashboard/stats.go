package dashboard

import (
	"sort"
	"sync"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// Counters are cumulative counts since the process started, by job type:
// what the overview's charts are computed from (differences between
// samples).
type Counters map[string]TypeCounters

// TypeCounters are one job type's counts.
type TypeCounters struct {
	// Events decided (every outcome but an error).
	Events float64 `json:"events"`
	// Jobs published for them: rounds opened (scheduled), immediate jobs
	// (published) and bypassed ones. Events - Jobs are the jobs saved.
	Jobs float64 `json:"jobs"`
}

// IsJob reports whether an outcome published a job of its own.
func IsJob(o debounce.Outcome) bool {
	return o == debounce.OutcomeScheduled || o == debounce.OutcomePublished || o == debounce.OutcomeBypassed
}

// sample is the counters at one time.
type sample struct {
	at time.Time
	c  Counters
}

// ring keeps the last samples.
type ring struct {
	mu      sync.Mutex
	samples []sample
	next    int
	full    bool
}

func newRing(n int) *ring { return &ring{samples: make([]sample, max(n, 2))} }

func (r *ring) add(at time.Time, c Counters) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples[r.next] = sample{at, c}
	r.next = (r.next + 1) % len(r.samples)
	if r.next == 0 {
		r.full = true
	}
}

// all returns the samples, oldest first.
func (r *ring) all() []sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.full {
		return append([]sample(nil), r.samples[:r.next]...)
	}
	return append(append([]sample(nil), r.samples[r.next:]...), r.samples[:r.next]...)
}

// Series are one type's rates between consecutive samples: At[i] is the end
// of interval i.
type Series struct {
	At           []int64   `json:"t"` // unix seconds
	EventsPerSec []float64 `json:"events_per_s"`
	JobsPerSec   []float64 `json:"jobs_per_s"`
	EventsPerJob []float64 `json:"events_per_job"` // 0 where no job was published
}

// series computes every type's series from the samples.
func series(samples []sample) map[string]*Series {
	out := map[string]*Series{}
	for i := 1; i < len(samples); i++ {
		prev, cur := samples[i-1], samples[i]
		secs := cur.at.Sub(prev.at).Seconds()
		if secs <= 0 {
			continue
		}
		for typ, c := range cur.c {
			s := out[typ]
			if s == nil {
				s = &Series{}
				out[typ] = s
			}
			p := prev.c[typ]
			ev, jobs := max(c.Events-p.Events, 0), max(c.Jobs-p.Jobs, 0) // a restart resets counters
			s.At = append(s.At, cur.at.Unix())
			s.EventsPerSec = append(s.EventsPerSec, round3(ev/secs))
			s.JobsPerSec = append(s.JobsPerSec, round3(jobs/secs))
			ratio := 0.0
			if jobs > 0 {
				ratio = round3(ev / jobs)
			}
			s.EventsPerJob = append(s.EventsPerJob, ratio)
		}
	}
	return out
}

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

// Recorder counts decisions by type and remembers the recent rounds of
// keys for the timelines, from a Coalescer's hooks: for a Go program that
// embeds the library (the daemon counts with its Prometheus series and
// gives its own Counters). The counts cost an atomic add per decision.
type Recorder struct {
	mu      sync.Mutex
	counts  map[string]*TypeCounters
	History *History
}

// NewRecorder returns a Recorder with a History of DefaultHistoryKeys keys.
func NewRecorder() *Recorder {
	return &Recorder{counts: map[string]*TypeCounters{}, History: NewHistory(DefaultHistoryKeys)}
}

// Hooks returns next with the recorder's Decision hook called first.
func (rec *Recorder) Hooks(next debounce.Hooks) debounce.Hooks {
	prev := next.Decision
	next.Decision = func(jobType string, d debounce.Decision, err error, took time.Duration) {
		if err == nil {
			rec.mu.Lock()
			c := rec.counts[jobType]
			if c == nil {
				c = &TypeCounters{}
				rec.counts[jobType] = c
			}
			c.Events++
			if IsJob(d.Outcome) {
				c.Jobs++
			}
			rec.mu.Unlock()
			rec.History.Decided(jobType, &d)
		}
		if prev != nil {
			prev(jobType, d, err, took)
		}
	}
	return next
}

// Counters returns the counts so far.
func (rec *Recorder) Counters() Counters {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	out := make(Counters, len(rec.counts))
	for t, c := range rec.counts {
		out[t] = *c
	}
	return out
}

// sortedTypes returns the types of the policies and of the counters, sorted.
func sortedTypes(policies []debounce.Policy, c Counters) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range policies {
		if !seen[p.Type] {
			seen[p.Type] = true
			out = append(out, p.Type)
		}
	}
	for t := range c {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out
}
