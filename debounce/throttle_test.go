package debounce_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// TestThrottleTrailingOpensTheNextWindow: as lodash's throttle, the trailing
// job starts the next window. An event just after the trailing job started
// is gathered into the next window's trailing job, a window later; it used
// to become a leading job at once (two jobs milliseconds apart), or, while
// the window key had not quite expired, a second trailing job of the same
// window, due at once.
func TestThrottleTrailingOpensTheNextWindow(t *testing.T) {
	t.Parallel()
	const w = 10 * time.Second
	eachBackend(t, func(t *testing.T, b backend) {
		for _, payload := range []debounce.Payload{debounce.PayloadFirst, debounce.PayloadLast} {
			typ := "th" + string(payload)
			f := newFixture(t, b, debounce.Policy{Type: typ, Mode: debounce.ModeThrottle, Window: w, Trailing: true, Payload: payload, KeyFields: []string{"k"}})
			lead := f.submit(t, typ, `{"k":1,"n":0}`)
			f.clock.Advance(time.Second)
			trail := f.submit(t, typ, `{"k":1,"n":1}`)
			if lead.Outcome != debounce.OutcomePublished || trail.Outcome != debounce.OutcomeScheduled {
				t.Fatalf("%s: %s then %s, want published then scheduled", typ, lead.Outcome, trail.Outcome)
			}
			var job debounce.Job
			for _, j := range f.pub.distinct() {
				if j.Token == trail.Round {
					job = j
				}
			}
			f.clock.Advance(w - time.Second) // the window's end: its trailing job starts
			startedAt := time.Now()
			if rel := f.start(t, job); rel.Result != debounce.ReleaseReleased || rel.Summary.Events != 1 {
				t.Fatalf("%s: trailing Start %+v", typ, rel)
			}
			f.clock.Advance(10 * time.Millisecond)
			next := f.submit(t, typ, fmt.Sprintf(`{"k":1,"n":%d}`, 2))
			if next.Outcome != debounce.OutcomeScheduled || next.Round == trail.Round {
				t.Fatalf("%s: the event just after the trailing job: %+v; want it scheduled into the next window's trailing round", typ, next)
			}
			// Due a window after the trailing job started: on miniredis by the
			// fake clock, on a real server by its own.
			wantDue, tol := f.clock.Now().Add(w-10*time.Millisecond), 50*time.Millisecond
			if b.mini == nil {
				wantDue, tol = startedAt.Add(w), time.Second
			}
			if d := next.DueAt.Sub(wantDue); d < -tol || d > tol {
				t.Errorf("%s: the next trailing job is due %v, want a window after the trailing job started (%v)", typ, next.DueAt, wantDue)
			}
		}
	})
}

// TestThrottleJobsAWindowApart runs random event sequences through a
// throttle policy with trailing in virtual time (miniredis; a worker starts
// each job at its due time) and checks, as lodash's throttle guarantees: the
// jobs of a key are at least a window apart, every event is covered by a job
// at or after it, and a window has at most one trailing job.
func TestThrottleJobsAWindowApart(t *testing.T) {
	t.Parallel()
	const w = 2 * time.Second
	b := backends(t)[0] // miniredis: the clock can be moved
	rng := rand.New(rand.NewPCG(7, 11))
	for seq := range 24 {
		f := newFixture(t, b, debounce.Policy{Type: "th", Mode: debounce.ModeThrottle, Window: w, Trailing: true, KeyFields: []string{"k"}})
		t0 := f.clock.Now()
		var jobAt []time.Duration // when each job ran, from t0
		pending := map[debounce.Token]debounce.Job{}
		runDue := func(upTo time.Time) {
			for {
				var next debounce.Job
				for _, j := range f.pub.distinct() {
					if _, done := pending[j.Token]; done || j.Immediate() {
						continue
					}
					if !j.DueAt.After(upTo) && (next.Token == 0 || j.DueAt.Before(next.DueAt)) {
						next = j
					}
				}
				if next.Token == 0 {
					return
				}
				pending[next.Token] = next
				f.clock.Advance(next.DueAt.Sub(f.clock.Now()))
				if rel := f.start(t, next); rel.Result != debounce.ReleaseReleased {
					t.Fatalf("seq %d: trailing job %s at %v: %s", seq, next.Token, next.DueAt.Sub(t0), rel.Result)
				}
				jobAt = append(jobAt, f.clock.Now().Sub(t0))
			}
		}
		var events []time.Duration
		at := time.Duration(0)
		for range 30 {
			at += time.Duration(rng.IntN(1500)) * time.Millisecond
			runDue(t0.Add(at))
			f.clock.Advance(t0.Add(at).Sub(f.clock.Now()))
			events = append(events, at)
			if d := f.submit(t, "th", `{"k":1}`); d.Outcome == debounce.OutcomePublished {
				jobAt = append(jobAt, at) // a leading job, run at once
			}
		}
		runDue(t0.Add(at + 3*w))
		for i := 1; i < len(jobAt); i++ {
			if gap := jobAt[i] - jobAt[i-1]; gap < w {
				t.Errorf("seq %d: jobs at %v and %v, %v apart, less than the %v window (jobs %v)", seq, jobAt[i-1], jobAt[i], gap, w, jobAt)
			}
		}
		last := jobAt[len(jobAt)-1]
		if events[len(events)-1] > last {
			t.Errorf("seq %d: the last event at %v is covered by no job (last job at %v)", seq, events[len(events)-1], last)
		}
	}
}

// TestThrottleWindowStaysClosedUntilItsTrailingJobStarts: a window's key
// expires at its trailing round's due time, but the trailing job starts
// later (NATS fires schedules up to ~0.5 s late; workers may be busy). An
// event in between joins the trailing round: no leading job runs just
// before the trailing one. On 47bb46e it opened a new window and ran a
// leading job at once, milliseconds before the trailing job.
func TestThrottleWindowStaysClosedUntilItsTrailingJobStarts(t *testing.T) {
	t.Parallel()
	const w = time.Second
	eachBackend(t, func(t *testing.T, b backend) {
		for _, payload := range []debounce.Payload{debounce.PayloadFirst, debounce.PayloadLast} {
			typ := "th" + string(payload)
			f := newFixture(t, b, debounce.Policy{Type: typ, Mode: debounce.ModeThrottle, Window: w, Trailing: true, Payload: payload, KeyFields: []string{"k"}})
			lead := f.submit(t, typ, `{"k":1,"n":0}`)
			trail := f.submit(t, typ, `{"k":1,"n":1}`)
			if lead.Outcome != debounce.OutcomePublished || trail.Outcome != debounce.OutcomeScheduled {
				t.Fatalf("%s: %s then %s, want published then scheduled", typ, lead.Outcome, trail.Outcome)
			}
			// The window's end passes; the trailing job has not started.
			if b.mini != nil {
				f.clock.Advance(w + 100*time.Millisecond)
			} else {
				time.Sleep(w + 300*time.Millisecond) // at least that long: the window's key is gone
				f.clock.Sync()
			}
			late := f.submit(t, typ, `{"k":1,"n":2}`)
			if late.Outcome == debounce.OutcomePublished || late.Round != trail.Round {
				t.Fatalf("%s: an event after the window's end, before its trailing job started: %+v; want it joined to the trailing round %s", typ, late, trail.Round)
			}
			var job debounce.Job
			for _, j := range f.pub.distinct() {
				if j.Token == trail.Round {
					job = j
				}
			}
			if rel := f.start(t, job); rel.Result != debounce.ReleaseReleased || rel.Summary.Events != 2 {
				t.Fatalf("%s: trailing Start %+v, want released with 2 events", typ, rel)
			}
			if next := f.submit(t, typ, `{"k":1,"n":3}`); next.Outcome != debounce.OutcomeScheduled {
				t.Errorf("%s: the event after the trailing job started: %+v; want it scheduled into the next window", typ, next)
			}
			if n := len(f.pub.distinct()); n != 3 {
				t.Errorf("%s: %d jobs, want the leading, the trailing and the next window's trailing", typ, n)
			}
		}
	})
}

// throttleReference is the semantics a throttle policy with trailing
// promises, as lodash's throttle({leading: true, trailing: true}) with its
// trailing call made when the worker starts the trailing job: an event
// with no window open and no trailing job pending runs a leading job at
// once and opens a window; any other event joins the trailing job, due at
// the window's end; the trailing job opens the next window when it starts.
// It returns when each job started, given the events' times and each
// trailing job's lateness (start minus due), in the order they are made.
func throttleReference(w time.Duration, events, lateness []time.Duration) []time.Duration {
	var jobs []time.Duration
	windowEnd := time.Duration(-1)
	pending, made := false, 0
	var due, start time.Duration
	for _, at := range events {
		if pending && start <= at { // the worker starts it before this event
			jobs = append(jobs, start)
			windowEnd, pending = start+w, false
		}
		switch {
		case at < windowEnd && !pending:
			pending, due = true, windowEnd
			start = due + lateness[made]
			made++
		case at < windowEnd || pending:
		default:
			jobs = append(jobs, at)
			windowEnd = at + w
		}
	}
	if pending {
		jobs = append(jobs, start)
	}
	return jobs
}

// TestThrottleMatchesTheReferenceWithLateWorkers runs random event
// sequences through a throttle policy with trailing in virtual time
// (miniredis), a worker starting each trailing job up to 0.6 s after its
// due time, and checks the jobs against throttleReference exactly: the
// same jobs at the same times, so a key's jobs are at least a window apart
// and every event is covered by a job that starts after it. On 47bb46e an
// event between a window's end and its trailing job's start ran a leading
// job (the jobs then milliseconds apart).
func TestThrottleMatchesTheReferenceWithLateWorkers(t *testing.T) {
	t.Parallel()
	const w = 2 * time.Second
	b := backends(t)[0] // miniredis: the clock can be moved
	rng := rand.New(rand.NewPCG(24, 8))
	closePairs := 0
	for seq := range 24 {
		// Event times are 1 mod 3 ms, and every window ends at 0 mod 3 ms
		// (2000 is 2 mod 3, lateness 1 mod 3): no event is ever on a
		// window's end, where miniredis and Redis expire differently.
		var events, lateness []time.Duration
		at := time.Millisecond
		for range 30 {
			at += time.Duration(3*rng.IntN(500)) * time.Millisecond
			events = append(events, at)
			lateness = append(lateness, time.Duration(1+3*rng.IntN(200))*time.Millisecond)
		}
		want := throttleReference(w, events, lateness)

		f := newFixture(t, b, debounce.Policy{Type: "th", Mode: debounce.ModeThrottle, Window: w, Trailing: true, KeyFields: []string{"k"}})
		t0 := f.clock.Now()
		var got []time.Duration
		started := map[debounce.Token]bool{}
		late := map[debounce.Token]time.Duration{}
		runDue := func(upTo time.Duration) {
			for {
				var next debounce.Job
				for _, j := range f.pub.distinct() {
					if started[j.Token] || j.Immediate() {
						continue
					}
					if _, ok := late[j.Token]; !ok {
						late[j.Token] = lateness[len(late)]
					}
					s := j.DueAt.Sub(t0) + late[j.Token]
					if s <= upTo && (next.Token == 0 || j.DueAt.Before(next.DueAt)) {
						next = j
					}
				}
				if next.Token == 0 {
					return
				}
				started[next.Token] = true
				f.clock.Advance(t0.Add(next.DueAt.Sub(t0) + late[next.Token]).Sub(f.clock.Now()))
				if rel := f.start(t, next); rel.Result != debounce.ReleaseReleased {
					t.Fatalf("seq %d: trailing job %s: %s", seq, next.Token, rel.Result)
				}
				got = append(got, f.clock.Now().Sub(t0))
			}
		}
		for _, at := range events {
			runDue(at)
			f.clock.Advance(t0.Add(at).Sub(f.clock.Now()))
			if d := f.submit(t, "th", `{"k":1}`); d.Outcome == debounce.OutcomePublished {
				got = append(got, at)
			}
		}
		runDue(events[len(events)-1] + 3*w)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("seq %d: jobs at %v, want %v (events %v)", seq, got, want, events)
		}
		for i := 1; i < len(got); i++ {
			if gap := got[i] - got[i-1]; gap < w {
				t.Errorf("seq %d: jobs at %v and %v, %v apart, less than the %v window", seq, got[i-1], got[i], gap, w)
				closePairs++
			}
		}
	}
	if closePairs > 0 {
		t.Logf("%d pairs of jobs less than a window apart", closePairs)
	}
}
