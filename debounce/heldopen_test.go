package debounce_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// heldFixture is a fixture whose rounds wait in Redis, local joins off so
// every event goes to Redis.
func heldFixture(t *testing.T, b backend, policies ...debounce.Policy) *fixture {
	t.Helper()
	return newFixtureWith(t, b, func(c *debounce.Config) {
		c.Schedules, c.Forwarding, c.LocalJoins = debounce.SchedulesRedis, debounce.ForwardingOff, debounce.LocalJoinsOff
	}, policies...)
}

// TestHeldOpeningKeepsItsIdentityInTheTypesHash: a packed round held in
// Redis is one key, its listing and a field of its type's identity hash
// (no identity key of its own, measured cheaper, issue 25) until its first
// forward moves the identity to the round's identity key, with the round's
// expiry; from then on it is kept as before (the reaper, take and cancel
// read it there), and its job runs.
func TestHeldOpeningKeepsItsIdentityInTheTypesHash(t *testing.T) {
	t.Parallel()
	pol := debounce.Policy{Type: "first", Mode: debounce.ModeDebounce, Window: 10 * time.Second, KeyFields: []string{"t"}}
	deferredBackends(t, func(t *testing.T, b backend) {
		f := heldFixture(t, b, pol)
		ctx := context.Background()
		rdb := f.b.rdb
		d := f.submit(t, "first", `{"t":1}`)
		if d.Outcome != debounce.OutcomeScheduled || d.Events != 1 || !d.DueAt.Equal(f.clock.Now().Add(10*time.Second)) {
			t.Fatalf("opening: %+v", d)
		}
		rkey := debounce.RoundRedisKey(f.c, debounce.Job{Type: "first", Key: d.Key, Mode: debounce.ModeDebounce})
		ids := f.prefix + "dueids:first"
		id, err := rdb.HGet(ctx, ids, rkey).Result()
		if err != nil || !strings.Contains(id, d.Round.String()) {
			t.Fatalf("identity in the type's hash: %q, %v", id, err)
		}
		if n := rdb.Exists(ctx, rkey+"j").Val(); n != 0 {
			t.Errorf("an identity key before the first forward")
		}
		if score := rdb.ZScore(ctx, f.prefix+"due:first", rkey).Val(); int64(score) != d.DueAt.UnixMilli() {
			t.Errorf("listed at %v, want its due time %d", score, d.DueAt.UnixMilli())
		}
		f.clock.Advance(10 * time.Second)
		if rep := f.forward(t); rep.Published != 1 {
			t.Fatalf("forward: %+v", rep)
		}
		if rdb.HExists(ctx, ids, rkey).Val() {
			t.Errorf("the identity stayed in the type's hash after the forward")
		}
		moved := rdb.HGetAll(ctx, rkey+"j").Val()
		if moved["j"] != id || moved["r"] != "1" {
			t.Errorf("identity key after the forward: %v, want j the identity and r 1", moved)
		}
		if a, b := rdb.PExpireTime(ctx, rkey+"j").Val(), rdb.PExpireTime(ctx, rkey).Val(); a != b {
			t.Errorf("identity key expires at %v, the round at %v", a, b)
		}
		if rel := f.start(t, f.pub.all()[0]); rel.Result != debounce.ReleaseReleased || rel.Summary.Events != 1 {
			t.Errorf("job: %+v", rel)
		}
		if n := rdb.Exists(ctx, rkey+"j").Val(); n != 0 {
			t.Errorf("the take left the identity key")
		}
	})
}

// TestHeldOpeningAfterAnUnforwardedRoundWasCancelled: a round cancelled
// before it was forwarded leaves its identity in the type's hash until its
// listing is claimed; the key's next round replaces it (HSET, not
// HSETNX), so its own job runs when due.
func TestHeldOpeningAfterAnUnforwardedRoundWasCancelled(t *testing.T) {
	t.Parallel()
	pol := debounce.Policy{Type: "first", Mode: debounce.ModeDebounce, Window: 10 * time.Second, KeyFields: []string{"t"}}
	deferredBackends(t, func(t *testing.T, b backend) {
		f := heldFixture(t, b, pol)
		ctx := context.Background()
		first := f.submit(t, "first", `{"t":1}`)
		if _, ok, err := f.c.Cancel(ctx, "first", first.Key); err != nil || !ok {
			t.Fatalf("Cancel: %v %v", ok, err)
		}
		f.clock.Advance(time.Second)
		next := f.submit(t, "first", `{"t":1}`)
		if next.Outcome != debounce.OutcomeScheduled || next.Round == first.Round {
			t.Fatalf("after the cancel: %+v", next)
		}
		f.clock.Advance(10 * time.Second)
		for range 2 {
			f.forward(t)
		}
		jobs := f.pub.all()
		if len(jobs) != 1 || jobs[0].Token != next.Round {
			t.Fatalf("published %+v, want the next round's job", jobs)
		}
		if rel := f.start(t, jobs[0]); rel.Result != debounce.ReleaseReleased {
			t.Errorf("job: %+v", rel)
		}
	})
}

// TestHeldRoundJoinedByAProducerThatDidNotKnowIt: another producer's event
// for a held round, forwarded but not started, joins it (SET NX GET finds
// it) and writes nothing else: one job runs, counting both events.
func TestHeldRoundJoinedByAProducerThatDidNotKnowIt(t *testing.T) {
	t.Parallel()
	pol := debounce.Policy{Type: "first", Mode: debounce.ModeDebounce, Window: 10 * time.Second, KeyFields: []string{"t"}}
	deferredBackends(t, func(t *testing.T, b backend) {
		f := heldFixture(t, b, pol)
		other := newHeldCoalescer(t, f, pol)
		ctx := context.Background()
		opened := f.submit(t, "first", `{"t":1,"i":0}`)
		f.clock.Advance(10 * time.Second)
		if rep := f.forward(t); rep.Published != 1 {
			t.Fatalf("forward: %+v", rep)
		}
		d, err := other.Submit(ctx, debounce.Event{Type: "first", Args: json.RawMessage(`{"t":1,"i":1}`)})
		if err != nil || d.Outcome != debounce.OutcomeCoalesced || d.Events != 2 || d.Round != opened.Round {
			t.Fatalf("join of a forwarded round: %+v, %v (opened %+v)", d, err, opened)
		}
		f.clock.Advance(10 * time.Second)
		if rep := f.forward(t); rep.Claimed != 0 {
			t.Errorf("the join listed the round again: %+v", rep)
		}
		jobs := f.pub.all()
		if len(jobs) != 1 {
			t.Fatalf("%d jobs, want 1", len(jobs))
		}
		if rel := f.start(t, jobs[0]); rel.Result != debounce.ReleaseReleased || rel.Summary.Events != 2 {
			t.Errorf("job: %+v", rel)
		}
	})
}

// TestHeldOpeningMeetsTheOtherLayout: a held round of the hash layout
// (the policy was payload last when it opened) is joined in its own layout
// when a producer with payload first tries to open it (SET NX GET meets
// WRONGTYPE); its one job runs with both events and the last payload.
func TestHeldOpeningMeetsTheOtherLayout(t *testing.T) {
	t.Parallel()
	last := debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: 10 * time.Second, Payload: debounce.PayloadLast, KeyFields: []string{"k"}}
	first := last
	first.Payload = debounce.PayloadFirst
	deferredBackends(t, func(t *testing.T, b backend) {
		f := heldFixture(t, b, last)
		newer := newHeldCoalescer(t, f, first)
		ctx := context.Background()
		opened := f.submit(t, "t", `{"k":1,"v":"old"}`)
		d, err := newer.Submit(ctx, debounce.Event{Type: "t", Args: json.RawMessage(`{"k":1,"v":"new"}`)})
		if err != nil || d.Outcome != debounce.OutcomeCoalesced || d.Events != 2 || d.Round != opened.Round {
			t.Fatalf("join across layouts: %+v, %v", d, err)
		}
		f.clock.Advance(10 * time.Second)
		if rep := f.forward(t); rep.Published != 1 {
			t.Fatalf("forward: %+v", rep)
		}
		rel := f.start(t, f.pub.all()[0])
		if rel.Result != debounce.ReleaseReleased || rel.Summary.Events != 2 {
			t.Fatalf("start: %+v", rel)
		}
		f.clock.Advance(10 * time.Second)
		if rep := f.forward(t); rep.Published != 0 {
			t.Errorf("a second forward published %+v", rep)
		}
	})
}

// TestJoinFirstKeepsEveryPayload: once most events of a type join rounds,
// joins go out without the opening's arguments (join_round.lua); a key
// with no round then still opens one (the second call), a last payload is
// the last event's, accumulated items fill a held round (due at once) and
// an extended round moves its due time, as through open_round.lua.
func TestJoinFirstKeepsEveryPayload(t *testing.T) {
	t.Parallel()
	policies := []debounce.Policy{
		{Type: "last", Mode: debounce.ModeDebounce, Window: 10 * time.Second, Payload: debounce.PayloadLast, KeyFields: []string{"k"}},
		{Type: "acc", Mode: debounce.ModeDebounce, Window: 10 * time.Second, Payload: debounce.PayloadAccumulate, ItemField: "i", MaxItems: 8, KeyFields: []string{"k"}},
		{Type: "ext", Mode: debounce.ModeDebounce, Window: 10 * time.Second, Extend: true, MaxWait: time.Minute, KeyFields: []string{"k"}},
	}
	deferredBackends(t, func(t *testing.T, b backend) {
		f := heldFixture(t, b, policies...)
		ctx := context.Background()
		submit := func(typ, args string) debounce.Decision {
			t.Helper()
			d, err := f.c.Submit(ctx, debounce.Event{Type: typ, Args: json.RawMessage(args)})
			if err != nil {
				t.Fatalf("%s %s: %v", typ, args, err)
			}
			return d
		}
		// Warm up: key 0 takes four events of each type.
		for _, typ := range []string{"last", "acc", "ext"} {
			for i := range 4 {
				submit(typ, fmt.Sprintf(`{"k":0,"i":%d}`, i))
			}
			if !debounce.JoinsFirst(f.c, typ) {
				t.Fatalf("%s: joins do not go first after 3 joins in 4 events", typ)
			}
		}
		// A new key opens, then joins.
		for _, typ := range []string{"last", "acc", "ext"} {
			if d := submit(typ, `{"k":1,"i":0}`); d.Outcome != debounce.OutcomeScheduled || d.Events != 1 {
				t.Errorf("%s: new key through join first: %+v", typ, d)
			}
		}
		f.clock.Advance(3 * time.Second)
		for i := 1; i < 8; i++ {
			d := submit("last", fmt.Sprintf(`{"k":1,"i":%d}`, i))
			if d.Outcome != debounce.OutcomeCoalesced || d.Events != i+1 {
				t.Errorf("last, event %d: %+v", i, d)
			}
		}
		for i := 1; i < 8; i++ { // the eighth item fills the round: due now
			d := submit("acc", fmt.Sprintf(`{"k":1,"i":%d}`, i))
			if d.Events != i+1 || (i == 7) != d.DueAt.Equal(f.clock.Now()) {
				t.Errorf("acc, item %d: %+v", i, d)
			}
		}
		if d := submit("ext", `{"k":1,"i":1}`); d.Outcome != debounce.OutcomeExtended || !d.DueAt.Equal(f.clock.Now().Add(10*time.Second)) {
			t.Errorf("ext: %+v", d)
		}
		// The filled round goes at once; the others when due.
		if rep := f.forward(t); rep.Published != 1 { // acc key 1, filled
			t.Errorf("forward now: %+v, want the filled round alone", rep)
		}
		f.clock.Advance(10 * time.Second)
		f.forward(t)
		got := map[string]debounce.Release{}
		for _, job := range f.pub.all() {
			var a struct{ K int }
			_ = json.Unmarshal(job.Args, &a)
			if a.K != 1 {
				continue
			}
			rel := f.start(t, job)
			if rel.Result == debounce.ReleaseReleased {
				got[job.Type] = rel
			}
		}
		if r := got["last"]; r.Summary.Events != 8 || string(r.Summary.Payload) != `{"k":1,"i":7}` {
			t.Errorf("last: %+v", r)
		}
		if r := got["acc"]; r.Summary.Events != 8 || len(r.Summary.Items) != 8 {
			t.Errorf("acc: %+v", r)
		}
		if r := got["ext"]; r.Summary.Events != 2 {
			t.Errorf("ext: %+v", r)
		}
	})
}

// TestHeldOpeningWhileItsKeyIsStillClaimed: a round forwarded, taken and
// followed by the next round of its key, all before the forwarder settles
// its claim (the window between its publish and its settling): the next
// round's listing survives the settling and the round is forwarded when
// due. With a ZADD NX in the opening (the plain-command opening tried in
// d58ed28) the key stayed listed at the claim's score and was unlisted by
// the settling: the round's job never ran (chaos 3, 4, 5, 7-9 and 13 with
// held rounds: "no job start of that round at all").
func TestHeldOpeningWhileItsKeyIsStillClaimed(t *testing.T) {
	t.Parallel()
	pol := debounce.Policy{Type: "first", Mode: debounce.ModeDebounce, Window: 10 * time.Second, KeyFields: []string{"t"}}
	deferredBackends(t, func(t *testing.T, b backend) {
		f := heldFixture(t, b, pol)
		worker := newHeldCoalescer(t, f, pol)
		ctx := context.Background()
		first := f.submit(t, "first", `{"t":1}`)
		f.clock.Advance(10 * time.Second)
		var next debounce.Decision
		var inPublish error
		pub := debounce.PublisherFunc(func(ctx context.Context, job debounce.Job) error {
			// Published; before the forwarder settles, the job starts and
			// the key's next event opens the next round.
			rel, err := worker.Start(ctx, job)
			if err != nil || rel.Result != debounce.ReleaseReleased {
				inPublish = fmt.Errorf("start of %s: %+v, %v", job.Token, rel, err)
				return nil
			}
			next, err = f.c.Submit(ctx, debounce.Event{Type: "first", Args: json.RawMessage(`{"t":1}`)})
			if err != nil || next.Outcome != debounce.OutcomeScheduled || next.Round == first.Round {
				inPublish = fmt.Errorf("the next event: %+v, %v", next, err)
			}
			return nil
		})
		if rep, err := f.c.NewForwarder(pub).Pass(ctx); err != nil || rep.Published != 1 {
			t.Fatalf("forward: %+v, %v", rep, err)
		}
		if inPublish != nil {
			t.Fatal(inPublish)
		}
		if n, err := f.c.DueCount(ctx, "first"); err != nil || n != 1 {
			t.Errorf("after the settling, %d rounds listed (%v), want the next one", n, err)
		}
		// Due: the next round is forwarded and runs.
		f.clock.Advance(10 * time.Second)
		for range 3 { // a pass may first find it listed early (not due), and list it at its due time
			f.forward(t)
		}
		jobs := f.pub.all()
		if len(jobs) != 1 || jobs[0].Token != next.Round {
			t.Fatalf("jobs published after the next round came due: %+v, want the next round's", jobs)
		}
		if rel := f.start(t, jobs[0]); rel.Result != debounce.ReleaseReleased || rel.Summary.Events != 1 {
			t.Errorf("the next round's job: %+v", rel)
		}
	})
}

// newHeldCoalescer is another producer on f's store and clock, its rounds
// held in Redis, local joins off.
func newHeldCoalescer(t *testing.T, f *fixture, policies ...debounce.Policy) *debounce.Coalescer {
	t.Helper()
	c, err := debounce.New(debounce.Config{Redis: f.b.rdb, Publisher: f.pub, Policies: policies, Prefix: f.prefix, Now: f.clock.Now,
		Schedules: debounce.SchedulesRedis, Forwarding: debounce.ForwardingOff, LocalJoins: debounce.LocalJoinsOff})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestHeldOpeningReplaysItsDecision: a held opening answers with its status
// alone (open_packed.lua, issue 25's third pass); sent again with its
// idempotency key, the event gets the same decision back (round, due time,
// count), from the record idempotent.lua wrote for the bare reply, counts
// nothing again, and the round's job runs once.
func TestHeldOpeningReplaysItsDecision(t *testing.T) {
	t.Parallel()
	pol := debounce.Policy{Type: "first", Mode: debounce.ModeDebounce, Window: 10 * time.Second, KeyFields: []string{"t"}}
	deferredBackends(t, func(t *testing.T, b backend) {
		f := heldFixture(t, b, pol)
		d1, err := f.submitKeyed(t, "first", `{"t":1}`, "k-1")
		if err != nil || d1.Replayed || d1.Outcome != debounce.OutcomeScheduled || d1.Events != 1 {
			t.Fatalf("opening: %+v %v", d1, err)
		}
		r1, err := f.submitKeyed(t, "first", `{"t":1}`, "k-1")
		if err != nil || !r1.Replayed {
			t.Fatalf("retry: %+v %v", r1, err)
		}
		r1.Replayed = false
		if r1 != d1 {
			t.Errorf("retry answered %+v, want the opening %+v", r1, d1)
		}
		if d := f.submit(t, "first", `{"t":1}`); d.Events != 2 || d.Round != d1.Round {
			t.Errorf("a plain event after the retry: %+v, want the second event of round %v", d, d1.Round)
		}
		f.clock.Advance(10 * time.Second)
		if rep := f.forward(t); rep.Published != 1 {
			t.Fatalf("forward: %+v", rep)
		}
		jobs := f.pub.all()
		if len(jobs) != 1 {
			t.Fatalf("%d jobs, want 1", len(jobs))
		}
		if rel := f.start(t, jobs[0]); rel.Result != debounce.ReleaseReleased || rel.Summary.Events != 2 {
			t.Errorf("job: %+v, want 2 events", rel)
		}
	})
}

// TestHeldOpeningsOfABatchShareOneCall: held openings that meet in one
// pipeline are decided by one script call per type (merge.go,
// open_held_many.lua), each event with the decision it would have had
// alone: new keys open, a second event of a key joins the round the first
// opened, each type's rounds are listed in its own due list, an event
// whose key holds a round of the other layout (a payload change with
// rounds pending) gets its WRONGTYPE alone and joins that round as it
// would alone, and every round's job runs once with its events.
func TestHeldOpeningsOfABatchShareOneCall(t *testing.T) {
	t.Parallel()
	polA := debounce.Policy{Type: "first", Mode: debounce.ModeDebounce, Window: 10 * time.Second, KeyFields: []string{"t"}}
	polB := polA
	polB.Type = "second"
	deferredBackends(t, func(t *testing.T, b backend) {
		f := heldFixture(t, b, polA, polB)
		ctx := context.Background()
		ev := func(typ string, n int) debounce.Event {
			return debounce.Event{Type: typ, Args: json.RawMessage(fmt.Sprintf(`{"t":%d}`, n))}
		}
		// A key that holds a hash: alone, its event takes it for a round
		// of the other layout and opens a hash round there (TestPayload-
		// ChangeWithRoundsPending); in the batch, the event joins it.
		bad := ev("first", 99)
		badKey, err := f.c.RoundKeyOf(bad)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.rdb.HSet(ctx, debounce.RoundRedisKey(f.c, debounce.Job{Type: "first", Key: badKey, Mode: debounce.ModeDebounce}), "x", "1").Err(); err != nil {
			t.Fatal(err)
		}
		alone, aloneErr := f.c.Submit(ctx, bad)

		events := []debounce.Event{ev("first", 1), ev("first", 2), ev("first", 3), ev("first", 1), ev("second", 1), ev("second", 2), bad}
		got, errs := f.submitBatch(t, events)
		if n := debounce.HeldMerged(f.c); n != int64(len(events)) {
			t.Errorf("%d held openings decided in a shared call, want %d", n, len(events))
		}
		due := f.clock.Now().Add(10 * time.Second)
		opened, joined := 0, 0
		for i, d := range got[:6] {
			if errs[i] != nil || !d.DueAt.Equal(due) {
				t.Fatalf("event %d: %+v %v, want due at %v", i, d, errs[i], due)
			}
			switch {
			case d.Outcome == debounce.OutcomeScheduled && d.Events == 1:
				opened++
			case d.Outcome == debounce.OutcomeCoalesced && d.Events == 2:
				joined++
			default:
				t.Errorf("event %d: %+v", i, d)
			}
		}
		if opened != 5 || joined != 1 || got[0].Round != got[3].Round {
			t.Errorf("%d opened, %d joined, the key's two events in rounds %v and %v; want 5, 1 and one round", opened, joined, got[0].Round, got[3].Round)
		}
		if aloneErr != nil || alone.Outcome != debounce.OutcomeScheduled {
			t.Fatalf("alone, the event on a hash key: %+v %v", alone, aloneErr)
		}
		if d, err := got[6], errs[6]; err != nil || d.Outcome != debounce.OutcomeCoalesced || d.Round != alone.Round || d.Events != 2 {
			t.Errorf("the event on a hash round: %+v %v in the batch, want it to join round %v", d, err, alone.Round)
		}
		// The other events' rounds are packed (a hash would mean their
		// events met the WRONGTYPE of another and took the other layout).
		for i, d := range got[:6] {
			rkey := debounce.RoundRedisKey(f.c, debounce.Job{Type: events[i].Type, Key: d.Key, Mode: debounce.ModeDebounce})
			if typ := b.rdb.Type(ctx, rkey).Val(); typ != "string" {
				t.Errorf("event %d's round is a %s, want a packed round (string)", i, typ)
			}
		}
		for typ, want := range map[string]int64{"first": 4, "second": 2} {
			if n := b.rdb.ZCard(ctx, f.prefix+"due:"+typ).Val(); n != want {
				t.Errorf("%s's due list holds %d rounds, want %d", typ, n, want)
			}
		}
		before := len(f.pub.all())
		f.clock.Advance(10 * time.Second)
		if rep := f.forward(t); rep.Published != 6 {
			t.Fatalf("forward: %+v, want 6 rounds published", rep)
		}
		events2 := map[string]int{}
		for _, job := range f.pub.all()[before:] {
			rel := f.start(t, job)
			if rel.Result != debounce.ReleaseReleased {
				t.Fatalf("job %+v: %+v", job, rel)
			}
			events2[job.Type] += rel.Summary.Events
		}
		if events2["first"] != 6 || events2["second"] != 2 {
			t.Errorf("the jobs ran with %v events, want first 6 and second 2", events2)
		}
	})
}
