package debounce_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// racingPublisher fails the first publish, the opener's, and lets a joiner
// in while it does: the joiner's own publish of the round succeeds, but its
// ack comes back only after the opener has given up and backed out.
type racingPublisher struct {
	mu       sync.Mutex
	calls    int
	joinerIn chan struct{} // closed when the joiner's publish has begun
	release  chan struct{} // closed to let the joiner's publish return
	join     func()        // starts the joining Submit
	jobs     []debounce.Job
}

func (p *racingPublisher) Publish(_ context.Context, job debounce.Job) error {
	p.mu.Lock()
	p.calls++
	n := p.calls
	p.mu.Unlock()
	if n == 1 {
		go p.join()
		<-p.joinerIn
		return errors.New("nats: timeout") // the opener's publish fails
	}
	close(p.joinerIn)
	<-p.release
	p.mu.Lock()
	p.jobs = append(p.jobs, job)
	p.mu.Unlock()
	return nil
}

// TestBackoutLeavesAJoinedRound: an opener whose publish fails backs its
// round out, but a round an event has joined meanwhile is no longer only
// the opener's: the joiner may be publishing it. It must stay, or the
// joiner's accepted event (and its item) is gone while the round's job runs.
// The chaos suite's payload check found this under NATS leader kills.
func TestBackoutLeavesAJoinedRound(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		for _, p := range []debounce.Policy{
			{Type: "accum", Mode: debounce.ModeDebounce, Window: time.Second, Payload: debounce.PayloadAccumulate, ItemField: "id", KeyFields: []string{"tenant"}},
			{Type: "fixed", Mode: debounce.ModeDebounce, Window: time.Second, KeyFields: []string{"tenant"}},
		} {
			pub := &racingPublisher{joinerIn: make(chan struct{}), release: make(chan struct{})}
			f := newFixtureWith(t, b, func(c *debounce.Config) {
				c.Publisher = pub
				c.Pipelines = -1
				// The joiner runs inside the opener's publish, in this
				// process: with local joins it would wait for the opener.
				c.LocalJoins = debounce.LocalJoinsOff
			}, p)
			joined := make(chan struct{})
			var jd debounce.Decision
			var jerr error
			pub.join = func() {
				jd, jerr = f.c.Submit(context.Background(), debounce.Event{Type: p.Type, Args: json.RawMessage(`{"tenant":1,"id":2}`)})
				close(joined)
			}
			_, err := f.c.Submit(context.Background(), debounce.Event{Type: p.Type, Args: json.RawMessage(`{"tenant":1,"id":1}`)})
			if !errors.Is(err, debounce.ErrPublish) {
				t.Fatalf("%s: the opener's Submit: %v, want ErrPublish", p.Type, err)
			}
			close(pub.release)
			<-joined
			if jerr != nil || jd.Outcome != debounce.OutcomeCoalesced {
				t.Fatalf("%s: the joiner: %+v %v, want coalesced", p.Type, jd, jerr)
			}
			if len(pub.jobs) != 1 {
				t.Fatalf("%s: %d jobs published, want the joiner's one", p.Type, len(pub.jobs))
			}
			f.clock.Advance(2 * time.Second)
			rel := f.start(t, pub.jobs[0])
			if rel.Result != debounce.ReleaseReleased || rel.Summary.Events != 2 {
				t.Fatalf("%s: the round's job found %s with %d events; want released with both (the joiner's accepted event among them)", p.Type, rel.Result, rel.Summary.Events)
			}
			if p.Type == "accum" && len(rel.Summary.Items) != 2 {
				t.Errorf("accum: items %s, want the opener's and the joiner's", rel.Summary.Items)
			}
		}
	})
}

// cancellingPublisher publishes, then cancels the caller's context, as an
// HTTP client that disconnects right after the publish ack does.
type cancellingPublisher struct {
	cancel context.CancelFunc
	jobs   []debounce.Job
}

func (p *cancellingPublisher) Publish(_ context.Context, job debounce.Job) error {
	p.jobs = append(p.jobs, job)
	p.cancel()
	return nil
}

// TestMarkPublishedOutlivesTheCaller: once the round is published, marking
// it published must not depend on the caller's context. A round left
// unmarked was deleted by the reaper while its job was queued: the job then
// started 'missing' and the next event opened a second round.
func TestMarkPublishedOutlivesTheCaller(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		for _, p := range []debounce.Policy{
			{Type: "fixed", Mode: debounce.ModeDebounce, Window: time.Second},
			{Type: "last", Mode: debounce.ModeDebounce, Window: time.Second, Payload: debounce.PayloadLast},
		} {
			ctx, cancel := context.WithCancel(context.Background())
			pub := &cancellingPublisher{cancel: cancel}
			f := newFixtureWith(t, b, func(c *debounce.Config) { c.Publisher = pub }, p)
			d, err := f.c.Submit(ctx, debounce.Event{Type: p.Type, Args: json.RawMessage(`{"a":1}`)})
			if err != nil || d.Outcome != debounce.OutcomeScheduled {
				t.Fatalf("%s: Submit %+v %v", p.Type, d, err)
			}
			r, found, err := f.c.Inspect(context.Background(), p.Type, d.Key)
			if err != nil || !found || !r.Published {
				t.Errorf("%s: after a publish acknowledged and a client gone, the round is %+v (found %v, %v): want it marked published", p.Type, r, found, err)
			}
		}
	})
}

// TestAmbiguousPublishKeepsTheRound: a publish that timed out waiting for its
// ack may have been stored. Backing the round out then let the client's retry
// open a second round while the first job might be queued (two jobs for one
// key). The round stays, unpublished: the retry joins it and publishes the
// same round again (the same message id, so the stream keeps one), and the
// reaper settles a round nobody retries by looking for its message.
func TestAmbiguousPublishKeepsTheRound(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		for _, p := range []debounce.Policy{
			{Type: "fixed", Mode: debounce.ModeDebounce, Window: time.Second},
			{Type: "accum", Mode: debounce.ModeDebounce, Window: time.Second, Payload: debounce.PayloadAccumulate},
		} {
			var jobs []debounce.Job
			calls := 0
			pub := debounce.PublisherFunc(func(_ context.Context, j debounce.Job) error {
				calls++
				jobs = append(jobs, j)
				if calls == 1 {
					return fmt.Errorf("%w: nats: timeout waiting for the ack", debounce.ErrMaybePublished)
				}
				return nil
			})
			f := newFixtureWith(t, b, func(c *debounce.Config) { c.Publisher = pub }, p)
			_, err := f.c.Submit(context.Background(), debounce.Event{Type: p.Type, Args: json.RawMessage(`{"a":1}`)})
			if !errors.Is(err, debounce.ErrPublish) || !errors.Is(err, debounce.ErrMaybePublished) {
				t.Fatalf("%s: Submit after an ambiguous publish: %v, want ErrPublish and ErrMaybePublished", p.Type, err)
			}
			retry, err := f.c.Submit(context.Background(), debounce.Event{Type: p.Type, Args: json.RawMessage(`{"a":1}`)})
			if err != nil || retry.Round != jobs[0].Token || retry.Outcome != debounce.OutcomeCoalesced {
				t.Fatalf("%s: the client's retry: %+v %v, want it to join the round %s", p.Type, retry, err, jobs[0].Token)
			}
			if len(jobs) != 2 || jobs[1].Token != jobs[0].Token || jobs[1].Version != jobs[0].Version {
				t.Errorf("%s: published %d times (%+v); want the same round and version twice", p.Type, len(jobs), jobs)
			}
		}
	})
}
