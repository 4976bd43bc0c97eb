package debounce_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// TestPayloadChangeWithRoundsPending: a deployment that switches a policy's
// payload between first and last/accumulate changes its round layout, while
// rounds of the old layout are pending. An event for such a round joins it,
// in its own layout (it runs under the policy it was opened with), instead
// of hitting WRONGTYPE and being taken for a Redis outage (fail open: every
// event its own bypassed job; fail closed: every event refused).
func TestPayloadChangeWithRoundsPending(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		for _, tc := range []struct{ before, after debounce.Payload }{
			{debounce.PayloadFirst, debounce.PayloadLast},
			{debounce.PayloadLast, debounce.PayloadFirst},
			{debounce.PayloadFirst, debounce.PayloadAccumulate},
		} {
			for _, fail := range []debounce.FailMode{debounce.FailOpen, debounce.FailClosed} {
				typ := "t" + string(tc.before[:1]) + string(tc.after[:1]) + string(fail[:1])
				pol := func(p debounce.Payload) debounce.Policy {
					return debounce.Policy{Type: typ, Mode: debounce.ModeDebounce, Window: 5 * time.Second, Payload: p, Fail: fail, KeyFields: []string{"k"}}
				}
				old := newFixture(t, b, pol(tc.before))
				d1 := old.submit(t, typ, `{"k":1,"n":1}`)
				// The new deployment: same Redis, same prefix, the changed policy.
				cfgNew := debounce.Config{Schedules: debounce.SchedulesJetStream, Redis: b.rdb, Publisher: old.pub, Policies: []debounce.Policy{pol(tc.after)}, Prefix: old.prefix, Now: old.clock.Now}
				newer, err := debounce.New(cfgNew)
				if err != nil {
					t.Fatal(err)
				}
				d2, err := newer.Submit(context.Background(), debounce.Event{Type: typ, Args: json.RawMessage(`{"k":1,"n":2}`)})
				if err != nil || d2.Outcome != debounce.OutcomeCoalesced || d2.Round != d1.Round || d2.Events != 2 {
					t.Fatalf("%s -> %s (fail %s): the event after the change: %+v %v; want it coalesced into the pending round %s", tc.before, tc.after, fail, d2, err, d1.Round)
				}
				old.clock.Advance(6 * time.Second)
				rel, err := newer.Start(context.Background(), old.pub.distinct()[0])
				if err != nil || rel.Result != debounce.ReleaseReleased || rel.Summary.Events != 2 {
					t.Errorf("%s -> %s: the old round's job: %+v %v; want released with both events", tc.before, tc.after, rel, err)
				}
				// Released: the next event opens a round in the new layout.
				if d3, err := newer.Submit(context.Background(), debounce.Event{Type: typ, Args: json.RawMessage(`{"k":1,"n":3}`)}); err != nil || d3.Outcome != debounce.OutcomeScheduled {
					t.Errorf("%s -> %s: after the old round: %+v %v, want a new round", tc.before, tc.after, d3, err)
				}
			}
		}
	})
}
