package debounce_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// TestEventHook: Hooks.Event sees every event submitted (by Submit or
// SubmitPrepared, answered by Redis or locally) with its arrival time by
// the Coalescer's clock and its decision, and the refused ones with their
// error: what coalesce serve --record writes.
func TestEventHook(t *testing.T) {
	t.Parallel()
	type seen struct {
		ev  debounce.Event
		at  time.Time
		d   debounce.Decision
		err error
	}
	var got []seen
	b := backends(t)[0]
	f := newFixtureWith(t, b, func(c *debounce.Config) {
		c.Hooks.Event = func(ev debounce.Event, at time.Time, d debounce.Decision, err error) {
			got = append(got, seen{ev, at, d, err})
		}
	}, debounce.Policy{Type: "r", Mode: debounce.ModeDebounce, Window: time.Minute, KeyFields: []string{"tenant_id"}})
	t0 := f.clock.Now()
	f.submit(t, "r", `{"tenant_id":1,"n":1}`)
	f.clock.Advance(time.Second)
	f.submit(t, "r", `{"tenant_id":1,"n":2}`) // answered locally
	pr, err := f.c.Prepare(debounce.Event{Type: "r", Args: json.RawMessage(`{"tenant_id":2}`), Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.SubmitPrepared(context.Background(), pr); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Submit(context.Background(), debounce.Event{Type: "r", Args: json.RawMessage(`{}`)}); err == nil {
		t.Fatal("an event without the key field was accepted")
	}
	if len(got) != 4 {
		t.Fatalf("%d events seen, want 4", len(got))
	}
	if string(got[0].ev.Args) != `{"tenant_id":1,"n":1}` || !got[0].at.Equal(t0) || got[0].d.Outcome != debounce.OutcomeScheduled {
		t.Errorf("first: %+v", got[0])
	}
	if !got[1].at.Equal(t0.Add(time.Second)) || got[1].d.Outcome != debounce.OutcomeCoalesced || got[1].d.Round != got[0].d.Round {
		t.Errorf("second: %+v", got[1])
	}
	if got[2].ev.Key != "k" || got[2].d.Outcome != debounce.OutcomeScheduled {
		t.Errorf("prepared: %+v", got[2])
	}
	if !errors.Is(got[3].err, debounce.ErrInvalidEvent) {
		t.Errorf("refused: %+v", got[3])
	}
}
