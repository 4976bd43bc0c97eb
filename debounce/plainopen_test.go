package debounce_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// plainFixture is a fixture whose rounds wait in Redis, opening with plain
// commands (on) or through open_packed.lua (off), local joins off so every
// event goes to Redis.
func plainFixture(t *testing.T, b backend, on bool, policies ...debounce.Policy) *fixture {
	t.Helper()
	f := newFixtureWith(t, b, func(c *debounce.Config) {
		c.Schedules, c.Forwarding, c.LocalJoins = debounce.SchedulesRedis, debounce.ForwardingOff, debounce.LocalJoinsOff
	}, policies...)
	debounce.UsePlainOpenings(f.c, on)
	return f
}

// roundState is what Redis holds for a held packed round, its random bits
// left out: the round's count, published bit and seen field, its TTL, its
// score in the due list, its identity's fields and TTL.
type roundState struct {
	Count     int
	Published bool
	Seen      uint64
	TTL       time.Duration
	DueScore  float64
	Forwards  string
	Identity  map[string]any
	IDTTL     time.Duration
	RoundType string
}

func readRoundState(t *testing.T, f *fixture, d debounce.Decision) roundState {
	t.Helper()
	ctx := context.Background()
	rdb := f.b.rdb
	rkey := debounce.RoundRedisKey(f.c, debounce.Job{Type: d.Type, Key: d.Key, Mode: debounce.ModeDebounce})
	var s roundState
	s.RoundType = rdb.Type(ctx, rkey).Val()
	v, err := rdb.Get(ctx, rkey).Uint64()
	if err != nil {
		t.Fatalf("round %s: %v", rkey, err)
	}
	s.Count, s.Published, s.Seen = int(v>>16&(1<<22-1)), v&(1<<38) != 0, v&(1<<16-1)
	s.TTL = rdb.PTTL(ctx, rkey).Val().Round(time.Second)
	s.DueScore = rdb.ZScore(ctx, f.prefix+"due:"+d.Type, rkey).Val()
	id := rdb.HGetAll(ctx, rkey+"j").Val()
	if j, err := rdb.HGet(ctx, f.prefix+"dueids:"+d.Type, rkey).Result(); err == nil {
		// A plain opening's identity, kept in its type's hash until its
		// first forward: no identity key yet.
		if len(id) != 0 {
			t.Errorf("a plain opening wrote both an identity key %v and a field in its type's hash", id)
		}
		id = map[string]string{"j": j}
		s.IDTTL = s.TTL
	} else {
		s.IDTTL = rdb.PTTL(ctx, rkey+"j").Val().Round(time.Second)
	}
	s.Forwards = id["r"]
	if s.Forwards == "" {
		s.Forwards = "0" // absent until forwarded (plainopen.go)
	}
	if err := json.Unmarshal([]byte(id["j"]), &s.Identity); err != nil {
		t.Fatalf("identity of %s: %v (%q)", rkey, err, id["j"])
	}
	// The identity names the round's token and key, which differ between
	// two rounds; the rest must be the same.
	for _, k := range []string{"round", "fp", "key", "args"} {
		delete(s.Identity, k)
	}
	return s
}

// TestPlainOpeningStoresWhatTheScriptStores: a round opened with plain
// commands is the round open_packed.lua opens — value, TTL, due list
// entry, identity and its TTL — and its job runs the same way, on every
// backend where rounds are held in Redis.
func TestPlainOpeningStoresWhatTheScriptStores(t *testing.T) {
	t.Parallel()
	pol := debounce.Policy{Type: "first", Mode: debounce.ModeDebounce, Window: 10 * time.Second, KeyFields: []string{"t"}}
	deferredBackends(t, func(t *testing.T, b backend) {
		plain := plainFixture(t, b, true, pol)
		script := *plain // same store and clock, other keys
		script.c = newPlainCoalescer(t, plain, pol)
		debounce.UsePlainOpenings(script.c, false)
		dp := plain.submit(t, "first", `{"t":1}`)
		ds := script.submit(t, "first", `{"t":2}`)
		if got := debounce.PlainOpened(plain.c); got != 1 {
			t.Fatalf("plain openings: %d, want 1", got)
		}
		if got := debounce.PlainOpened(script.c); got != 0 {
			t.Fatalf("script fixture opened %d rounds plainly", got)
		}
		for _, d := range []debounce.Decision{dp, ds} {
			if d.Outcome != debounce.OutcomeScheduled || d.Events != 1 || d.Round == 0 || !d.DueAt.Equal(plain.clock.Now().Add(10*time.Second)) {
				t.Errorf("opening decision %+v", d)
			}
		}
		sp, ss := readRoundState(t, plain, dp), readRoundState(t, &script, ds)
		if sp.RoundType != "string" || sp.Count != 1 || !sp.Published || sp.Forwards != "0" || sp.DueScore == 0 {
			t.Errorf("plain round %+v", sp)
		}
		if got, want := jsonOf(t, sp), jsonOf(t, ss); got != want {
			t.Errorf("plain opening stored\n%s\nthe script stores\n%s", got, want)
		}
		// Both forwarded and run alike.
		plain.clock.Advance(10 * time.Second)
		if rep := plain.forward(t); rep.Published != 2 {
			t.Fatalf("forward: %+v, want 2 published", rep)
		}
		for _, job := range plain.pub.all() {
			if rel := plain.start(t, job); rel.Result != debounce.ReleaseReleased || rel.Summary.Events != 1 {
				t.Errorf("job %s: %+v", job.Args, rel)
			}
		}
	})
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPlainOpeningJoinsARoundItDidNotKnow: the plain opening's commands do
// nothing to a round that exists, and the event joins it by the script.
// The crash-free windows it opens: a round already forwarded (unlisted)
// is listed again by the joiner's ZADD NX; forwarded a second time, its
// second message is superseded at its start, and a round taken before is
// unlisted without a job. Either way one job runs, counting both events.
func TestPlainOpeningJoinsARoundItDidNotKnow(t *testing.T) {
	t.Parallel()
	pol := debounce.Policy{Type: "first", Mode: debounce.ModeDebounce, Window: 10 * time.Second, KeyFields: []string{"t"}}
	deferredBackends(t, func(t *testing.T, b backend) {
		for _, takenFirst := range []bool{false, true} {
			f := plainFixture(t, b, true, pol)
			other := *f // another producer, same store and clock
			other.c = newPlainCoalescer(t, f, pol)
			ctx := context.Background()
			opened := f.submit(t, "first", `{"t":1,"i":0}`)
			f.clock.Advance(10 * time.Second)
			if rep := f.forward(t); rep.Published != 1 {
				t.Fatalf("first forward: %+v", rep)
			}
			first := f.pub.all()[0]
			if takenFirst {
				if rel := f.start(t, first); rel.Result != debounce.ReleaseReleased || rel.Summary.Events != 1 {
					t.Fatalf("start: %+v", rel)
				}
				// The next event opens the next round, plainly.
				d, err := other.c.Submit(ctx, debounce.Event{Type: "first", Args: json.RawMessage(`{"t":1,"i":1}`)})
				if err != nil || d.Outcome != debounce.OutcomeScheduled || d.Round == opened.Round {
					t.Fatalf("after the take: %+v, %v", d, err)
				}
				continue
			}
			// Forwarded, not started: the other producer's event joins it.
			d, err := other.c.Submit(ctx, debounce.Event{Type: "first", Args: json.RawMessage(`{"t":1,"i":1}`)})
			if err != nil || d.Outcome != debounce.OutcomeCoalesced || d.Events != 2 || d.Round != opened.Round {
				t.Fatalf("join of a forwarded round: %+v, %v (opened %+v)", d, err, opened)
			}
			if got := debounce.PlainOpened(other.c); got != 0 {
				t.Errorf("the join counted as %d plain openings", got)
			}
			// Its listing again comes due: a second message, superseded.
			f.clock.Advance(10 * time.Second)
			rep := f.forward(t)
			jobs := f.pub.all()
			if rep.Published+rep.Gone != 1 || len(jobs) != 1+rep.Published {
				t.Fatalf("second forward: %+v, %d jobs", rep, len(jobs))
			}
			ran := 0
			for _, job := range jobs {
				rel := f.start(t, job)
				switch rel.Result {
				case debounce.ReleaseReleased:
					ran++
					if rel.Summary.Events != 2 {
						t.Errorf("the job counts %d events, want 2", rel.Summary.Events)
					}
				case debounce.ReleaseSuperseded, debounce.ReleaseDone:
				default:
					t.Errorf("job version %d: %+v", job.Version, rel)
				}
			}
			if ran != 1 {
				t.Errorf("%d jobs ran, want 1", ran)
			}
			f.clock.Advance(10 * time.Second)
			if rep := f.forward(t); rep.Published != 0 {
				t.Errorf("a third forward published %+v", rep)
			}
		}
	})
}

// newPlainCoalescer is another producer on f's store and clock, opening
// plainly, local joins off.
func newPlainCoalescer(t *testing.T, f *fixture, policies ...debounce.Policy) *debounce.Coalescer {
	t.Helper()
	c, err := debounce.New(debounce.Config{Redis: f.b.rdb, Publisher: f.pub, Policies: policies, Prefix: f.prefix, Now: f.clock.Now,
		Schedules: debounce.SchedulesRedis, Forwarding: debounce.ForwardingOff, LocalJoins: debounce.LocalJoinsOff})
	if err != nil {
		t.Fatal(err)
	}
	debounce.UsePlainOpenings(c, true)
	return c
}

// TestPlainOpeningMeetsTheOtherLayout: a held round of the hash layout
// (the policy was payload last when it opened) is joined in its own layout
// when a producer with payload first tries to open it plainly (the SET
// meets WRONGTYPE inside MULTI, the other commands harm nothing); its one
// job runs with both events and the last payload.
func TestPlainOpeningMeetsTheOtherLayout(t *testing.T) {
	t.Parallel()
	last := debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: 10 * time.Second, Payload: debounce.PayloadLast, KeyFields: []string{"k"}}
	first := last
	first.Payload = debounce.PayloadFirst
	deferredBackends(t, func(t *testing.T, b backend) {
		f := plainFixture(t, b, true, last)
		newer := newPlainCoalescer(t, f, first)
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
		f := plainFixture(t, b, true, policies...)
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
