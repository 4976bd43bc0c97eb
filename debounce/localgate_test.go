package debounce_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
)

// TestLocalJoinsGoColdAndBack: a type whose events are all new keys stops
// paying for local joins (most of its events skip the local try: no entry,
// no learning, rounds remembered stop growing), every event still gets its
// round from Redis and one job each; when its events start to meet rounds
// this process knows (a storm), they are answered locally again. A type
// with local_joins: on is never gated. Counts, not times: the gate measures
// over a number of tries (localgate.go).
func TestLocalJoinsGoColdAndBack(t *testing.T) {
	t.Parallel()
	auto := debounce.Policy{Type: "auto", Mode: debounce.ModeDebounce, Window: time.Minute, KeyFields: []string{"k"}}
	for _, b := range backends(t) {
		if b.name != "redis" {
			continue
		}
		f := newFixture(t, b, auto)
		ctx := context.Background()
		submit := func(k, i int) debounce.Decision {
			t.Helper()
			d, err := f.c.Submit(ctx, debounce.Event{Type: "auto", Args: json.RawMessage(fmt.Sprintf(`{"k":%d,"i":%d}`, k, i))})
			if err != nil {
				t.Fatalf("event %d of key %d: %v", i, k, err)
			}
			return d
		}
		// Every event a new key: the first measurement (about
		// debounce.GateWindow events) answers none locally, and the type
		// goes cold. The gate samples by random numbers: the bounds below
		// hold but for odds far below one in a billion.
		const cold = 2 * debounce.GateWindow
		for k := range cold {
			if d := submit(k, 0); d.Outcome != debounce.OutcomeScheduled || d.Events != 1 {
				t.Fatalf("key %d: %+v, want a round opened", k, d)
			}
		}
		st := f.c.LocalStats()
		if st.Joined != 0 || st.Skipped < debounce.GateWindow/2 {
			t.Fatalf("after %d new keys: %+v, want none joined locally and at least %d skipped", cold, st, debounce.GateWindow/2)
		}
		if st.Rounds > cold-int(st.Skipped) {
			t.Errorf("%d rounds remembered after %d events, %d of them skipped: a skipped event's round was learned", st.Rounds, cold, st.Skipped)
		}
		if n := len(f.pub.distinct()); n != cold {
			t.Fatalf("%d jobs published, want %d (one per new key)", n, cold)
		}
		// A storm on a few keys: skipped events join in Redis, sampled
		// ones learn the rounds; after a cold measurement the type is warm
		// and its events are answered locally.
		skipped := st.Skipped
		const storm = 3 * debounce.GateWindow
		for i := range storm {
			d := submit(cold+i%8, i)
			if d.Outcome != debounce.OutcomeScheduled && d.Outcome != debounce.OutcomeCoalesced {
				t.Fatalf("storm event %d: %+v", i, d)
			}
		}
		st = f.c.LocalStats()
		if st.Joined < debounce.GateWindow {
			t.Errorf("the storm: %+v, want its events answered locally again (at least %d)", st, debounce.GateWindow)
		}
		if st.Skipped-skipped >= storm/2 {
			t.Errorf("the storm: %d of %d events skipped the local try, want the type warm again within a measurement", st.Skipped-skipped, storm)
		}
		// Every storm event is counted in its round, once.
		events := 0
		for k := cold; k < cold+8; k++ {
			key, err := f.c.RoundKeyOf(debounce.Event{Type: "auto", Args: json.RawMessage(fmt.Sprintf(`{"k":%d}`, k))})
			if err != nil {
				t.Fatal(err)
			}
			events += f.inspect(t, f.c, "auto", key).Events
		}
		if events != storm {
			t.Errorf("the storm's rounds count %d events, want %d", events, storm)
		}
	}
}

// TestLocalJoinsOnAreNotGated: local_joins: on (payload last) tries every
// event locally, however seldom they join.
func TestLocalJoinsOnAreNotGated(t *testing.T) {
	t.Parallel()
	on := debounce.Policy{Type: "on", Mode: debounce.ModeDebounce, Window: time.Minute, Payload: debounce.PayloadLast, LocalJoins: debounce.LocalJoinsOn, KeyFields: []string{"k"}}
	for _, b := range backends(t) {
		if b.name != "redis" {
			continue
		}
		f := newFixture(t, b, on)
		for k := range debounce.GateWindow + 512 {
			if _, err := f.c.Submit(context.Background(), debounce.Event{Type: "on", Args: json.RawMessage(fmt.Sprintf(`{"k":%d}`, k))}); err != nil {
				t.Fatal(err)
			}
		}
		if st := f.c.LocalStats(); st.Skipped != 0 {
			t.Errorf("%+v, want no event skipped with local_joins: on", st)
		}
	}
}

// TestLocalJoinsStayWarmThroughFailingFlushes: while flushes fail, a
// storm's events skip the local try and go to Redis; those are not misses
// of the type's local joins, so the gate keeps the type warm and its events
// are answered locally again as soon as a flush succeeds, each counted once.
// On 6c1a247 the declined tries counted as misses: after three measurements
// of them the type was cold, and nearly every event after the outage
// skipped the local try.
func TestLocalJoinsStayWarmThroughFailingFlushes(t *testing.T) {
	t.Parallel()
	rdb := testenv.SharedRedis(t).Client(t)
	down := &flushesDown{} // on: every pipeline (a flush) fails; a lone decision passes
	rdb.AddHook(down)
	c, err := debounce.New(debounce.Config{
		Redis: rdb, Publisher: debounce.PublisherFunc(func(context.Context, debounce.Job) error { return nil }),
		Policies: []debounce.Policy{{Type: "storm", Mode: debounce.ModeDebounce, Window: time.Hour, KeyFields: []string{"k"}}},
		Prefix:   testenv.Prefix(t), Schedules: debounce.SchedulesRedis, Forwarding: debounce.ForwardingOff,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sent := 0
	submit := func() {
		t.Helper()
		d, err := c.Submit(ctx, debounce.Event{Type: "storm", Args: json.RawMessage(fmt.Sprintf(`{"k":%d,"i":%d}`, sent%8, sent))})
		if err != nil || d.Outcome != debounce.OutcomeScheduled && d.Outcome != debounce.OutcomeCoalesced {
			t.Fatalf("event %d: %+v, %v", sent, d, err)
		}
		sent++
	}
	for range 2 * debounce.GateWindow {
		submit()
	}
	if st := c.LocalStats(); st.Joined < debounce.GateWindow || st.Skipped != 0 {
		t.Fatalf("the storm before the outage: %+v, want most events answered locally, none skipped", st)
	}
	// Flushes fail from now on: the first failed flush stops local
	// answers, and the storm's events go to Redis.
	down.on.Store(true)
	for i := 0; c.LocalStats().FlushErrors == 0; i++ {
		if i == 50_000 {
			t.Fatal("no flush failed in 50,000 events")
		}
		submit()
		time.Sleep(100 * time.Microsecond)
	}
	joined := c.LocalStats().Joined
	for range 4 * debounce.GateWindow {
		submit()
	}
	// (A few may be answered in the moment between the failed flush's
	// count and its verdict.)
	if st := c.LocalStats(); st.Joined-joined > 64 {
		t.Fatalf("%d events answered locally while flushes failed", st.Joined-joined)
	}
	down.on.Store(false)
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.Flush(fctx); err != nil {
		t.Fatalf("Flush once flushes reach Redis: %v", err)
	}
	before := c.LocalStats()
	for range debounce.GateWindow {
		submit()
	}
	after := c.LocalStats()
	if skipped := after.Skipped - before.Skipped; skipped != 0 {
		t.Errorf("after the outage %d of %d events skipped the local try: the outage turned the type cold", skipped, debounce.GateWindow)
	}
	if after.Joined-before.Joined < debounce.GateWindow/2 {
		t.Errorf("after the outage %d of %d events answered locally", after.Joined-before.Joined, debounce.GateWindow)
	}
	// Every event counted once in its round.
	if err := c.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	events := 0
	for k := range 8 {
		key, err := c.RoundKeyOf(debounce.Event{Type: "storm", Args: json.RawMessage(fmt.Sprintf(`{"k":%d}`, k))})
		if err != nil {
			t.Fatal(err)
		}
		r, found, err := c.Inspect(ctx, "storm", key)
		if err != nil || !found {
			t.Fatalf("key %d: round found %v, %v", k, found, err)
		}
		events += r.Events
	}
	if events != sent {
		t.Errorf("the rounds count %d events, %d were sent", events, sent)
	}
}
