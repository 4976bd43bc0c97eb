package debounce_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

var lastPolicy = debounce.Policy{Type: "last", Mode: debounce.ModeDebounce, Window: 10 * time.Second, Payload: debounce.PayloadLast,
	KeyFields: []string{"k"}, LocalJoins: debounce.LocalJoinsOn}

// lastKeyBackends are the backends where local_joins: on is allowed: all
// but the Cluster.
func lastKeyBackends(t *testing.T, test func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends(t) {
		if b.name == "cluster" {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			test(t, b)
		})
	}
}

// lastArgs is the i-th event of key k.
func lastArgs(k, i int) string { return fmt.Sprintf(`{"k":%d,"i":%d}`, k, i) }

// TestLastJoinsWriteTheirArgsFirst: a producer that knows a round with
// payload last answers its events once their args are in the round's
// payload key (one SET XX, lastkey.go). With its flushes held back, the
// job that starts at the due time runs with the last event's args all the
// same; the flush that comes after the take finds the round gone and
// drops only the counts: no event is submitted again, no second job.
func TestLastJoinsWriteTheirArgsFirst(t *testing.T) {
	t.Parallel()
	lastKeyBackends(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, lastPolicy)
		ctx := context.Background()
		opened := f.submit(t, "last", lastArgs(1, 0))
		release := debounce.HoldFlushes(f.c)
		for i := 1; i <= 5; i++ {
			d := f.submit(t, "last", lastArgs(1, i))
			if d.Outcome != debounce.OutcomeCoalesced || d.Round != opened.Round || d.Events != i+1 {
				t.Fatalf("event %d: %+v", i, d)
			}
		}
		if n := f.c.LocalStats().Joined; n != 5 {
			t.Fatalf("%d joined locally, want 5", n)
		}
		// The payload key keeps the round's expiry (SET XX KEEPTTL).
		rkey := debounce.RoundRedisKey(f.c, debounce.Job{Type: "last", Key: opened.Key, Mode: debounce.ModeDebounce})
		pk := rkey + "a" + strconv.FormatUint(uint64(opened.Round), 10)
		if a, b := b.rdb.PExpireTime(ctx, pk).Val(), b.rdb.PExpireTime(ctx, rkey).Val(); a <= 0 || a != b {
			t.Errorf("payload key expires at %v, its round at %v", a, b)
		}
		// A worker (another process) takes the round at its due time,
		// before this producer flushed a single count.
		f.clock.Advance(10 * time.Second)
		worker := f.other(t, lastPolicy)
		jobs := f.pub.distinct()
		if len(jobs) != 1 {
			t.Fatalf("%d jobs published, want 1", len(jobs))
		}
		rel, err := worker.Start(ctx, jobs[0])
		if err != nil || rel.Result != debounce.ReleaseReleased {
			t.Fatalf("Start: %+v, %v", rel, err)
		}
		if got, want := string(rel.Summary.Payload), lastArgs(1, 5); got != want {
			t.Errorf("the job runs with %s, want the last event's %s", got, want)
		}
		release()
		if err := f.c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		st := f.c.LocalStats()
		if st.Resubmitted != 0 || st.Forgotten != 5 {
			t.Errorf("after the take, the flush: %d submitted again, %d forgotten; want 0 and 5 (counts only)", st.Resubmitted, st.Forgotten)
		}
		if n := len(f.pub.distinct()); n != 1 {
			t.Errorf("%d jobs published, want 1", n)
		}
		// The next event opens the next round.
		if d := f.submit(t, "last", lastArgs(1, 6)); d.Outcome != debounce.OutcomeScheduled || d.Round == opened.Round {
			t.Errorf("after the take: %+v", d)
		}
	})
}

// TestLastJoinAfterTheRoundClosed: an event for a round this producer
// still believes pending, which another process took or cancelled, is
// not answered as joined to it: its SET XX finds no payload key (the
// close deleted it) and it goes to Redis, which opens the next round.
func TestLastJoinAfterTheRoundClosed(t *testing.T) {
	t.Parallel()
	lastKeyBackends(t, func(t *testing.T, b backend) {
		for _, how := range []string{"take", "cancel"} {
			f := newFixture(t, b, lastPolicy)
			ctx := context.Background()
			opened := f.submit(t, "last", lastArgs(2, 0))
			f.submit(t, "last", lastArgs(2, 1)) // learned, joined locally
			worker := f.other(t, lastPolicy)
			switch how {
			case "take":
				f.clock.Advance(10 * time.Second)
				f.flush(t)
				rel, err := worker.Start(ctx, f.pub.distinct()[0])
				if err != nil || rel.Result != debounce.ReleaseReleased || string(rel.Summary.Payload) != lastArgs(2, 1) || rel.Summary.Events != 2 {
					t.Fatalf("Start: %+v, %v", rel, err)
				}
			case "cancel":
				if _, ok, err := worker.Cancel(ctx, "last", opened.Key); err != nil || !ok {
					t.Fatalf("Cancel: %v %v", ok, err)
				}
			}
			d := f.submit(t, "last", lastArgs(2, 2))
			if d.Outcome != debounce.OutcomeScheduled || d.Round == opened.Round || d.Events != 1 {
				t.Errorf("%s: the event after it: %+v, want a new round opened", how, d)
			}
			// After the cancel the producer's entry is still live: the
			// event's SET XX found no payload key (not a local join).
			// After the take it is past its local time: straight to Redis.
			if n := f.c.LocalStats().Joined; n != 1 {
				t.Errorf("%s: %d joined locally, want the one before the close", how, n)
			}
		}
	})
}

// TestLastPayloadKeyStaysTheLatest: joins through the script (a producer
// with local joins off, or one that does not know the round) write the
// payload key too, so whichever way the last event came, the job runs
// with its args; a round opened by a producer that gives it no payload
// key (local joins off) is joined through the script by one that would;
// and a round opened by an older version, whose hash does not say whether
// it has a payload key, still gets its latest args there.
func TestLastPayloadKeyStaysTheLatest(t *testing.T) {
	t.Parallel()
	off := lastPolicy
	off.LocalJoins = debounce.LocalJoinsOff
	lastKeyBackends(t, func(t *testing.T, b backend) {
		for _, order := range []string{"local-then-script", "script-then-local", "opened-without-key", "opened-by-an-older-version"} {
			f := newFixture(t, b, lastPolicy)
			scripted := f.other(t, off)
			ctx := context.Background()
			submitVia := func(c *debounce.Coalescer, i int) debounce.Decision {
				t.Helper()
				d, err := c.Submit(ctx, debounce.Event{Type: "last", Args: json.RawMessage(lastArgs(3, i))})
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			switch order {
			case "local-then-script":
				submitVia(f.c, 0)
				submitVia(f.c, 1) // local
				submitVia(scripted, 2)
			case "script-then-local":
				submitVia(f.c, 0)
				submitVia(scripted, 1)
				submitVia(f.c, 2) // local
			case "opened-without-key":
				submitVia(scripted, 0)
				submitVia(f.c, 1) // learns the round (a script join)
				submitVia(f.c, 2) // its SET XX finds no key: the script
			case "opened-by-an-older-version":
				// A round opened before its hash said whether it has a
				// payload key (no field z): a script join still writes the
				// key, which the take prefers to the hash's args.
				d := submitVia(f.c, 0)
				rkey := debounce.RoundRedisKey(f.c, debounce.Job{Type: "last", Key: d.Key, Mode: debounce.ModeDebounce})
				if n := b.rdb.HDel(ctx, rkey, "z").Val(); n != 1 {
					t.Fatalf("the round's hash has no field z (%d removed)", n)
				}
				submitVia(f.c, 1) // local
				submitVia(scripted, 2)
			}
			f.clock.Advance(10 * time.Second)
			rel := f.start(t, f.pub.distinct()[0])
			if rel.Result != debounce.ReleaseReleased || string(rel.Summary.Payload) != lastArgs(3, 2) || rel.Summary.Events != 3 {
				t.Errorf("%s: %+v, want the third event's args and 3 events", order, rel)
			}
		}
	})
}

// TestInspectShowsTheLatestArgs: Inspect and InspectMany show a round's
// latest args, which a join that knew the round wrote in its payload key
// only.
func TestInspectShowsTheLatestArgs(t *testing.T) {
	t.Parallel()
	lastKeyBackends(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, lastPolicy)
		ctx := context.Background()
		d := f.submit(t, "last", lastArgs(4, 0))
		f.submit(t, "last", lastArgs(4, 1))
		if n := f.c.LocalStats().Joined; n != 1 {
			t.Fatalf("%d joined locally, want 1", n)
		}
		if r := f.inspect(t, f.c, "last", d.Key); string(r.Payload) != lastArgs(4, 1) || r.Events != 2 {
			t.Errorf("Inspect: %+v", r)
		}
		rounds, found, err := f.c.InspectMany(ctx, "last", []debounce.RoundKey{d.Key})
		if err != nil || !found[0] || string(rounds[0].Payload) != lastArgs(4, 1) {
			t.Errorf("InspectMany: %+v %v %v", rounds, found, err)
		}
	})
}

// TestLocalJoinsOnIsRefusedWhereItCannotHold: local_joins on is refused,
// naming the field, on a policy other than a fixed-window payload last
// debounce, and on a Cluster; auto keeps payload last going to Redis.
func TestLocalJoinsOnIsRefusedWhereItCannotHold(t *testing.T) {
	t.Parallel()
	for _, p := range []debounce.Policy{
		{Type: "first", Mode: debounce.ModeDebounce, Window: time.Second, LocalJoins: debounce.LocalJoinsOn},
		{Type: "ext", Mode: debounce.ModeDebounce, Window: time.Second, Extend: true, MaxWait: time.Minute, Payload: debounce.PayloadLast, LocalJoins: debounce.LocalJoinsOn},
		{Type: "acc", Mode: debounce.ModeDebounce, Window: time.Second, Payload: debounce.PayloadAccumulate, LocalJoins: debounce.LocalJoinsOn},
	} {
		var pe *debounce.PolicyError
		if err := p.Validate(); !errors.As(err, &pe) || pe.Field != "local_joins" {
			t.Errorf("%s with local_joins on: %v, want a policy error naming local_joins", p.Type, err)
		}
	}
	for _, b := range backends(t) {
		if b.name != "cluster" {
			continue
		}
		_, err := debounce.New(debounce.Config{Redis: b.rdb, Policies: []debounce.Policy{lastPolicy}})
		var pe *debounce.PolicyError
		if !errors.As(err, &pe) || pe.Field != "local_joins" {
			t.Errorf("local_joins on with a Cluster client: %v, want a policy error naming local_joins", err)
		}
	}
}
