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
