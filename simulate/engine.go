package simulate

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/vredis"
	"github.com/coalesce-io/coalesce/worker"
)

// sim is one simulation: the clock, the store, the Coalescer on it, the
// pending actions (schedules firing, jobs starting and ending) and the
// figures.
type sim struct {
	cfg   Config
	now   time.Time
	store *vredis.Server
	co    *debounce.Coalescer
	pub   *virtualPublisher
	queue actionQueue
	seq   uint64

	busy  int          // workers running a job (or starting one)
	ready []*delivery  // messages waiting for a worker, oldest first
	types []*typeState // in policy order
	byTyp map[string]*typeState

	rounds  map[roundID]*roundState
	events  int // events submitted (the next event's index)
	jobs    int // jobs run (the next job's index)
	unknown map[string]int
	from    time.Time
	to      time.Time
}

// typeState is one job type's policy and figures.
type typeState struct {
	TypeStats
	policy    debounce.Policy
	window    time.Duration // burst window
	latencies []time.Duration
	keys      map[debounce.RoundKey]*keyState
}

// keyState is one key's figures.
type keyState struct {
	t          *typeState
	first      debounce.Event // the key's first event, for its label
	label      string
	events     int
	jobs       int
	dropped    int
	latencyMax time.Duration
	recent     []time.Time // job starts within the burst window
	maxJobs    int
	timeline   *KeyTimeline // nil unless Config.Timeline chose it
	decided    bool         // Config.Timeline asked
}

// roundID names a round: its token is unique only per key.
type roundID struct {
	t     *typeState
	key   debounce.RoundKey
	token debounce.Token
}

// roundState is what the simulation knows of a pending round.
type roundState struct {
	k      *keyState
	opened time.Time
	due    time.Time
	events []TraceEvent // with Config.OnEvent: its events, their job not yet known
	count  int
	tl     int // index in k.timeline.Rounds, -1 when none
}

func newSim(cfg Config) (*sim, error) {
	s := &sim{cfg: cfg, byTyp: map[string]*typeState{}, rounds: map[roundID]*roundState{}, unknown: map[string]int{}}
	s.store = vredis.New(func() time.Time { return s.now })
	s.pub = &virtualPublisher{s: s, schedules: map[roundID]*action{}, ids: map[msgID]time.Time{}}
	co, err := debounce.New(debounce.Config{
		Redis: s.store.Client(), Publisher: s.pub, Policies: cfg.Policies,
		Now: func() time.Time { return s.now },
		// Every event to the store, one script call at a time: local
		// joins answer in process and flush on a real-time timer, and
		// lead to the same jobs by their design (local.go).
		LocalJoins: debounce.LocalJoinsOff, Pipelines: -1,
		// No replicas to wait for: waiting changes what survives a
		// failover, not what runs (and would read INFO on a timer).
		Replication: debounce.Replication{Acks: debounce.ReplicationOff},
	})
	if err != nil {
		s.store.Close()
		return nil, err
	}
	s.co = co
	for _, p := range cfg.Policies {
		p, _ = co.Policy(p.Type)
		t := &typeState{policy: p, keys: map[debounce.RoundKey]*keyState{}}
		t.Type = p.Type
		t.window = cmp.Or(cfg.BurstWindow, DefaultBurstWindow)
		t.BurstWindow = t.window
		switch {
		case p.Extend:
			t.Cap = p.MaxWait
		case p.Mode == debounce.ModeDebounce, p.Mode == debounce.ModeThrottle && p.Trailing:
			t.Cap = p.Window
		}
		s.types = append(s.types, t)
		s.byTyp[p.Type] = t
	}
	return s, nil
}

func (s *sim) close() { s.store.Close() }

// Actions: what happens at a time, other than an event of the log.
type actionKind int

const (
	actDeliver actionKind = iota // a message reaches the consumers (a schedule fired, a redelivery)
	actStart                     // a worker starts a message: StartDelivery
	actEnd                       // a job ends: Finish, give up the key
	actRefresh                   // a running exclusive job refreshes its key's lease
)

type action struct {
	at        time.Time
	seq       uint64
	kind      actionKind
	d         *delivery
	cancelled bool // a schedule replaced by a later publish of its round
	sched     *roundID
}

// delivery is one job message and its deliveries so far.
type delivery struct {
	job        debounce.Job
	deliveries int
	waits      int // deliveries that found the key busy
	// Set when it runs.
	index int
	lease string
	start time.Time
	end   time.Time
}

type actionQueue []*action

func (q actionQueue) Len() int { return len(q) }
func (q actionQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q actionQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *actionQueue) Push(x any)   { *q = append(*q, x.(*action)) }
func (q *actionQueue) Pop() any {
	old := *q
	a := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return a
}

func (s *sim) schedule(at time.Time, kind actionKind, d *delivery) *action {
	s.seq++
	a := &action{at: at, seq: s.seq, kind: kind, d: d}
	heap.Push(&s.queue, a)
	return a
}

// replay replays the events, then lets every pending round run.
func (s *sim) replay(ctx context.Context, events iter.Seq2[Event, error]) error {
	n := 0
	for ev, err := range events {
		if err != nil {
			return err
		}
		if n++; n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if err := s.until(ctx, ev.At); err != nil {
			return err
		}
		if ev.At.After(s.now) {
			s.now = ev.At
		}
		if s.from.IsZero() {
			s.from = ev.At
		}
		s.to = ev.At
		if err := s.submit(ctx, ev); err != nil {
			return err
		}
	}
	return s.until(ctx, time.Time{})
}

// until runs the actions due before t (all of them for the zero time).
func (s *sim) until(ctx context.Context, t time.Time) error {
	steps := 0
	for len(s.queue) > 0 && (t.IsZero() || s.queue[0].at.Before(t)) {
		if steps++; steps%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		a := heap.Pop(&s.queue).(*action)
		if a.cancelled {
			continue
		}
		if a.at.After(s.now) {
			s.now = a.at
		}
		if err := s.do(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

func (s *sim) do(ctx context.Context, a *action) error {
	switch a.kind {
	case actDeliver:
		if a.sched != nil {
			delete(s.pub.schedules, *a.sched)
		}
		s.ready = append(s.ready, a.d)
		s.dispatch()
	case actStart:
		return s.start(ctx, a.d)
	case actEnd:
		return s.end(ctx, a.d)
	case actRefresh:
		if a.d.lease != "" && s.now.Before(a.d.end) {
			if _, err := s.co.RefreshKey(ctx, a.d.job, a.d.lease); err != nil {
				return err
			}
			s.refreshLater(a.d)
		}
	}
	return nil
}

// dispatch gives waiting messages to free workers.
func (s *sim) dispatch() {
	for len(s.ready) > 0 && (s.cfg.Workers < 0 || s.busy < s.cfg.Workers) {
		d := s.ready[0]
		s.ready[0] = nil
		s.ready = s.ready[1:]
		s.busy++
		s.schedule(s.now.Add(s.cfg.StartDelay), actStart, d)
	}
}

// free gives a worker back.
func (s *sim) free() {
	s.busy--
	s.dispatch()
}

// retryIn is the wait before a delivery whose reschedule failed comes
// again (the worker's first backoff); a virtual publish never fails.
const retryIn = time.Second

// start is a worker starting a delivery, as every coalesce worker does.
func (s *sim) start(ctx context.Context, d *delivery) error {
	d.deliveries++
	wj := &worker.Job{Job: d.job, Attempt: d.deliveries}
	st, err := worker.StartDelivery(ctx, s.co, s.pub, wj, worker.DefaultMaxDeliver, retryIn)
	if err != nil {
		return fmt.Errorf("simulate: starting a %s job at %s: %w", d.job.Type, s.now.UTC().Format(time.RFC3339Nano), err)
	}
	t := s.byTyp[d.job.Type]
	switch st.Action {
	case worker.StartRun:
		d.lease, d.start = st.Lease, s.now
		d.end = s.now.Add(s.cfg.JobDuration)
		s.ran(t, d, wj)
		s.schedule(d.end, actEnd, d)
		s.refreshLater(d)
		return nil
	case worker.StartRetry:
		if st.Result == worker.JobKeyBusy {
			d.waits++
			t.KeyWaits++
		}
		s.schedule(s.now.Add(st.Delay), actDeliver, d)
	case worker.StartAck:
		if st.Result == worker.JobRescheduled {
			t.Rescheduled++
		}
	case worker.StartDead:
		return fmt.Errorf("simulate: a %s job was dead-lettered: %s", d.job.Type, st.Reason)
	}
	s.free()
	return nil
}

// refreshLater refreshes a running exclusive job's lease a third of the
// lease from now, as the worker does, if the job still runs then.
func (s *sim) refreshLater(d *delivery) {
	if d.lease == "" {
		return
	}
	lease, _ := s.co.LeaseOf(d.job)
	if at := s.now.Add(lease / 3); at.Before(d.end) {
		s.schedule(at, actRefresh, d)
	}
}

func (s *sim) end(ctx context.Context, d *delivery) error {
	if _, err := s.co.Finish(ctx, d.job, true, false); err != nil {
		return fmt.Errorf("simulate: finishing a %s job: %w", d.job.Type, err)
	}
	if d.lease != "" {
		if _, err := s.co.ReleaseKey(ctx, d.job, d.lease); err != nil {
			return fmt.Errorf("simulate: giving up a %s job's key: %w", d.job.Type, err)
		}
		d.lease = ""
	}
	s.free()
	return nil
}

// submit decides one event of the log.
func (s *sim) submit(ctx context.Context, ev Event) error {
	t := s.byTyp[ev.Type]
	if t == nil {
		s.unknown[ev.Type]++
		return nil
	}
	index := s.events
	s.events++
	t.Events++
	d, err := s.co.Submit(ctx, debounce.Event{Type: ev.Type, Args: ev.Args, Key: ev.Key})
	if err != nil {
		if !errors.Is(err, debounce.ErrInvalidEvent) && !errors.Is(err, debounce.ErrJobTooLarge) {
			return fmt.Errorf("simulate: %s: %w", where(ev, index), err)
		}
		t.Refused++
		if t.RefusedExample == "" {
			t.RefusedExample = fmt.Sprintf("%s: %v", where(ev, index), err)
		}
		if s.cfg.OnEvent != nil {
			s.cfg.OnEvent(TraceEvent{Index: index, Line: ev.Line, At: ev.At, Type: ev.Type, Job: -1, Error: err.Error()})
		}
		return nil
	}
	k := t.keys[d.Key]
	if k == nil {
		k = &keyState{t: t, first: debounce.Event{Type: ev.Type, Args: ev.Args, Key: ev.Key}}
		t.keys[d.Key] = k
		if s.cfg.Timeline != nil && s.cfg.Timeline(ev.Type, k.name()) {
			k.timeline = &KeyTimeline{Type: ev.Type, Key: k.name(), Policy: t.policy}
		}
	}
	k.events++
	if k.timeline != nil {
		k.timeline.Events = append(k.timeline.Events, TimelineEvent{At: s.now, Outcome: d.Outcome})
	}
	id := roundID{t: t, key: d.Key, token: d.Round}
	switch d.Outcome {
	case debounce.OutcomeThrottled, debounce.OutcomeDuplicate:
		if d.Outcome == debounce.OutcomeThrottled {
			t.Throttled++
		} else {
			t.Duplicate++
		}
		t.Dropped++
		k.dropped++
		if r := s.rounds[id]; r != nil {
			// A duplicate of a dedup round whose job has not started: that
			// job runs after it (and its round counts it).
			s.joined(r, k, index, ev, d)
			return nil
		}
		if s.cfg.OnEvent != nil {
			s.cfg.OnEvent(TraceEvent{Index: index, Line: ev.Line, At: ev.At, Type: ev.Type, Key: k.name(), Outcome: d.Outcome, Job: -1})
		}
		return nil
	case debounce.OutcomeScheduled, debounce.OutcomePublished:
		t.Opened++
		// The store times rounds in whole milliseconds (max_wait counts
		// from the first event's).
		opened := time.UnixMilli(s.now.UnixMilli())
		r := &roundState{k: k, opened: opened, due: d.DueAt, tl: -1}
		if k.timeline != nil {
			r.tl = len(k.timeline.Rounds)
			tr := TimelineRound{Opened: opened}
			if !d.DueAt.IsZero() {
				tr.Dues = []time.Time{d.DueAt}
			}
			if t.policy.Extend {
				tr.Cap = opened.Add(t.policy.MaxWait)
			}
			k.timeline.Rounds = append(k.timeline.Rounds, tr)
		}
		s.rounds[id] = r
	case debounce.OutcomeExtended:
		t.Joined++
		t.Extended++
	default:
		t.Joined++
	}
	r := s.rounds[id]
	if r == nil {
		// Joined a round that already ran: cannot be, a round is closed
		// at its start and later events open the next one.
		return fmt.Errorf("simulate: %s: %s event joined round %s, which is not pending", where(ev, index), ev.Type, d.Round)
	}
	s.joined(r, k, index, ev, d)
	return nil
}

// joined adds an event to its pending round.
func (s *sim) joined(r *roundState, k *keyState, index int, ev Event, d debounce.Decision) {
	r.count++
	if s.cfg.OnEvent != nil || s.cfg.OnJob != nil {
		r.events = append(r.events, TraceEvent{Index: index, Line: ev.Line, At: ev.At, Type: ev.Type, Key: k.name(), Outcome: d.Outcome})
	}
	if !d.DueAt.IsZero() && !d.DueAt.Equal(r.due) && r.count > 1 {
		// Extended, or filled (accumulate): due now.
		r.due = d.DueAt
		if r.tl >= 0 {
			tr := &k.timeline.Rounds[r.tl]
			tr.Dues = append(tr.Dues, d.DueAt)
		}
	}
}

// where names an event for messages: its line, or its place in a
// generated log.
func where(ev Event, index int) string {
	if ev.Line > 0 {
		return fmt.Sprintf("line %d", ev.Line)
	}
	return fmt.Sprintf("event %d", index+1)
}

// name is a key's label: its explicit key, else its key fields (or its
// args) as JSON, shortened.
func (k *keyState) name() string {
	if k.label == "" {
		k.label = keyLabel(k.t.policy, k.first)
	}
	return k.label
}

// ran records a job that started: it closes its round.
func (s *sim) ran(t *typeState, d *delivery, wj *worker.Job) {
	d.index = s.jobs
	s.jobs++
	t.Jobs++
	id := roundID{t: t, key: d.job.Key, token: d.job.Token}
	r := s.rounds[id]
	delete(s.rounds, id)
	var k *keyState
	opened := d.job.OpenedAt
	if r != nil {
		k, opened = r.k, r.opened
	} else {
		k = t.keys[d.job.Key]
		t.Repeated++
	}
	latency := s.now.Sub(opened)
	t.latencies = append(t.latencies, latency)
	if k != nil {
		k.jobs++
		k.latencyMax = max(k.latencyMax, latency)
		cut := s.now.Add(-t.window)
		i := 0
		for i < len(k.recent) && k.recent[i].Before(cut) {
			i++
		}
		k.recent = append(k.recent[i:], s.now)
		if len(k.recent) > k.maxJobs {
			k.maxJobs = len(k.recent)
		}
	}
	if r != nil && t.policy.Extend && !r.due.IsZero() && !r.due.Before(r.opened.Add(t.policy.MaxWait)) {
		t.Capped++
	}
	if r != nil && r.tl >= 0 {
		tr := &k.timeline.Rounds[r.tl]
		tr.Start, tr.End, tr.Events = s.now, d.end, r.count
	}
	if s.cfg.OnJob != nil || s.cfg.OnEvent != nil {
		label := ""
		if k != nil {
			label = k.name()
		}
		if s.cfg.OnEvent != nil && r != nil {
			for _, te := range r.events {
				te.Job = d.index
				s.cfg.OnEvent(te)
			}
		}
		if s.cfg.OnJob != nil {
			tj := TraceJob{Index: d.index, Type: t.Type, Key: label, Round: d.job.Token, Release: wj.Release,
				OpenedAt: opened, DueAt: d.job.DueAt, Start: s.now, End: d.end, Summary: wj.Summary, Waits: d.waits}
			if r != nil {
				tj.Events = make([]int, len(r.events))
				for i, te := range r.events {
					tj.Events[i] = te.Index
				}
				if !r.due.IsZero() {
					tj.DueAt = r.due
				}
			}
			s.cfg.OnJob(tj)
		}
	}
}

// result adds up the figures.
func (s *sim) result() *Result {
	r := &Result{From: s.from, To: s.to, End: s.now}
	if len(s.unknown) > 0 {
		r.Unknown = s.unknown
	}
	var all []time.Duration
	var keys []*keyState
	total := TypeStats{Type: "total"}
	for _, t := range s.types {
		st := t.TypeStats
		st.Keys = len(t.keys)
		if st.Jobs > 0 {
			st.EventsPerJob = float64(st.Events) / float64(st.Jobs)
		}
		slices.Sort(t.latencies)
		st.LatencyP50, st.LatencyP99, st.LatencyMax = quantiles(t.latencies)
		for _, k := range t.keys {
			if k.maxJobs > st.MaxJobsPerKey || k.maxJobs == st.MaxJobsPerKey && k.maxJobs > 0 && k.name() < st.BusiestKey {
				st.MaxJobsPerKey, st.BusiestKey = k.maxJobs, k.name()
			}
			if k.timeline != nil {
				r.Timeline = append(r.Timeline, *k.timeline)
			}
			if s.cfg.Keys > 0 {
				keys = append(keys, k)
			}
		}
		r.Types = append(r.Types, st)
		all = append(all, t.latencies...)
		total.add(st)
	}
	if total.Jobs > 0 {
		total.EventsPerJob = float64(total.Events) / float64(total.Jobs)
	}
	slices.Sort(all)
	total.LatencyP50, total.LatencyP99, total.LatencyMax = quantiles(all)
	r.Total = total
	slices.SortFunc(keys, func(a, b *keyState) int {
		return cmp.Or(cmp.Compare(b.events, a.events), cmp.Compare(a.t.Type, b.t.Type), cmp.Compare(a.name(), b.name()))
	})
	for _, k := range keys[:min(len(keys), s.cfg.Keys)] {
		r.Keys = append(r.Keys, KeyStats{Type: k.t.Type, Key: k.name(), Events: k.events, Jobs: k.jobs, Dropped: k.dropped,
			LatencyMax: k.latencyMax, MaxJobs: k.maxJobs})
	}
	slices.SortFunc(r.Timeline, func(a, b KeyTimeline) int {
		return cmp.Or(cmp.Compare(len(b.Events), len(a.Events)), cmp.Compare(a.Type, b.Type), cmp.Compare(a.Key, b.Key))
	})
	return r
}

// add adds a type's counts to a total.
func (t *TypeStats) add(o TypeStats) {
	t.Events += o.Events
	t.Jobs += o.Jobs
	t.Opened += o.Opened
	t.Joined += o.Joined
	t.Extended += o.Extended
	t.Throttled += o.Throttled
	t.Duplicate += o.Duplicate
	t.Dropped += o.Dropped
	t.Refused += o.Refused
	t.Capped += o.Capped
	t.Keys += o.Keys
	t.KeyWaits += o.KeyWaits
	t.Rescheduled += o.Rescheduled
	t.Repeated += o.Repeated
	t.Cap = max(t.Cap, o.Cap)
	if o.MaxJobsPerKey > t.MaxJobsPerKey {
		t.MaxJobsPerKey, t.BusiestKey, t.BurstWindow = o.MaxJobsPerKey, o.Type+" "+o.BusiestKey, o.BurstWindow
	}
}

// quantiles of sorted durations: p50, p99 (nearest rank) and max.
func quantiles(d []time.Duration) (p50, p99, top time.Duration) {
	if len(d) == 0 {
		return 0, 0, 0
	}
	rank := func(q float64) time.Duration {
		i := int(q*float64(len(d))+0.999999) - 1
		return d[min(max(i, 0), len(d)-1)]
	}
	return rank(0.50), rank(0.99), d[len(d)-1]
}
