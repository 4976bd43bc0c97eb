package debounce_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
)

// withRing adds a Ring client (one shard, the shared redis-server) to the
// backends: local joins group a Ring's flush by hash tag.
func withRing(t *testing.T) []backend {
	t.Helper()
	ring := redis.NewRing(&redis.RingOptions{
		Addrs:           map[string]string{"s1": testenv.SharedRedis(t).Addr},
		DisableIdentity: true, MaxRetries: -1,
	})
	t.Cleanup(func() { _ = ring.Close() })
	return append(backends(t), backend{name: "ring", rdb: ring})
}

// defaultGuard is how long before a round's due time local answers stop
// with the default settings.
const defaultGuard = debounce.DefaultDueSlack + debounce.DefaultClockSkew + debounce.DefaultFlushInterval + 50*time.Millisecond

// TestRoundLearnedNearItsEndIsNeverAnsweredLocally: a process whose first
// event of a round reaches Redis inside the round's guard keeps an entry
// that sends later events to Redis. An event that compares an earlier clock
// reading with it (a clock stepped back here; a goroutine preempted between
// its clock read and the table in production) must not be answered from
// it. Found by review: on 47bb46e it was answered with outcome "" and no
// due time from the half-filled entry, and queued for a flush on Redis key
// "": a Cluster refused that flush (CROSSSLOT) on every resend, and a Ring
// client panicked in the flusher.
func TestRoundLearnedNearItsEndIsNeverAnsweredLocally(t *testing.T) {
	t.Parallel()
	p := debounce.Policy{Type: "recompute", Mode: debounce.ModeDebounce, Window: 10 * time.Second}
	for _, b := range withRing(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, b, p)
			d1, err := f.other(t, p).Submit(context.Background(), debounce.Event{Type: p.Type, Args: json.RawMessage(`{"t":1}`)})
			if err != nil || d1.Outcome != debounce.OutcomeScheduled {
				t.Fatalf("the other process's opening: %+v %v", d1, err)
			}
			// Inside the guard: this process's first event goes to Redis
			// and learns the round too near its end to answer for it.
			f.clock.Advance(p.Window - defaultGuard/2)
			if d := f.submit(t, p.Type, `{"t":1}`); d.Outcome != debounce.OutcomeCoalesced || d.Round != d1.Round {
				t.Fatalf("the event inside the guard: %+v", d)
			}
			// The clock steps back out of the guard.
			f.clock.Advance(-defaultGuard)
			d := f.submit(t, p.Type, `{"t":1}`)
			want := d1
			if b.mini != nil {
				// miniredis keeps TTLs relative to its clock: stepped back,
				// the round's expiry (half of its token) moved with it.
				r := f.inspect(t, f.c, p.Type, d1.Key)
				want.Round, want.DueAt = r.Token, r.DueAt
			}
			if d.Outcome != debounce.OutcomeCoalesced || d.Round != want.Round || !d.DueAt.Equal(want.DueAt) || d.Events != 3 {
				t.Errorf("an event after the clock stepped back: %+v; want coalesced into %s, due %v, 3 events", d, want.Round, want.DueAt)
			}
			if st := f.c.LocalStats(); st.Joined != 0 {
				t.Errorf("local stats %+v: answered locally from a round learned near its end", st)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := f.c.Flush(ctx); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			if r := f.inspect(t, f.c, p.Type, d1.Key); r.Token != want.Round || r.Events != 3 {
				t.Errorf("the round %+v, want %s with 3 events", r, want.Round)
			}
			if st := f.c.LocalStats(); st.FlushErrors != 0 || st.Resubmitted != 0 {
				t.Errorf("local stats %+v: want no flush error and nothing submitted again", st)
			}
			// Local joins still work for a new round of another key.
			f.submit(t, p.Type, `{"t":2}`)
			f.submit(t, p.Type, `{"t":2}`)
			if st := f.c.LocalStats(); st.Joined != 1 {
				t.Errorf("local stats %+v: a new round is not joined locally afterwards", st)
			}
		})
	}
}

// gatedClock is the fixture's clock that can make one reading wait: the
// caller gets the time as it was when it read it, after the test moved the
// clock on — a goroutine preempted between reading the clock and acting on
// it.
type gatedClock struct {
	inner   func() time.Time
	armed   atomic.Bool
	read    chan struct{} // closed when the armed reading was taken
	release chan struct{} // closed to let it return
}

func (g *gatedClock) Now() time.Time {
	now := g.inner()
	if g.armed.CompareAndSwap(true, false) {
		close(g.read)
		<-g.release
	}
	return now
}

// TestLocalAnswerReadsTheClockAtTheTable: an event whose clock reading was
// before its round's local time ended, but which reaches the local table
// after it, goes to Redis: the answer is given against the time it is
// given at. On 47bb46e it was answered locally after the guard (after the
// round may have been taken), so a crash before the flush lost it.
func TestLocalAnswerReadsTheClockAtTheTable(t *testing.T) {
	t.Parallel()
	p := debounce.Policy{Type: "recompute", Mode: debounce.ModeDebounce, Window: 10 * time.Second}
	eachBackend(t, func(t *testing.T, b backend) {
		g := &gatedClock{read: make(chan struct{}), release: make(chan struct{})}
		f := newFixtureWith(t, b, func(c *debounce.Config) {
			g.inner = c.Now
			c.Now = g.Now
		}, p)
		d1 := f.submit(t, p.Type, `{"t":1}`)
		f.submit(t, p.Type, `{"t":1}`)
		if st := f.c.LocalStats(); st.Joined != 1 {
			t.Fatalf("local stats %+v: the second event was not joined locally", st)
		}
		g.armed.Store(true)
		var wg sync.WaitGroup
		var d debounce.Decision
		var err error
		wg.Go(func() {
			d, err = f.c.Submit(context.Background(), debounce.Event{Type: p.Type, Args: json.RawMessage(`{"t":1}`)})
		})
		<-g.read
		// While that event waits with its reading, time passes into the
		// guard before the round's due time.
		f.clock.Advance(p.Window - defaultGuard/2)
		close(g.release)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if st := f.c.LocalStats(); st.Joined != 1 {
			t.Errorf("local stats %+v: the event was answered locally inside the guard", st)
		}
		if d.Round != d1.Round || d.Outcome != debounce.OutcomeCoalesced {
			t.Errorf("decision %+v, want coalesced into %s", d, d1.Round)
		}
		f.clock.Advance(defaultGuard)
		if r := f.start(t, f.pub.distinct()[0]); r.Summary.Events != 3 {
			t.Errorf("Start: %+v, want 3 events", r)
		}
	})
}

// lostFlushReply sets a fixture up on b with loseReply armed for the next
// flush: the events of one round answered locally, flushed, applied by
// Redis, and the reply lost. It returns the round's first decision.
func lostFlushReply(t *testing.T, b backend, edit func(*debounce.Config), p debounce.Policy) (*fixture, debounce.Decision) {
	t.Helper()
	var armed atomic.Bool
	down := &flushesDown{}
	b.rdb.AddHook(down) // outside loseReply: it sees the lost reply's error
	b.rdb.AddHook(loseReply{&armed})
	f := newFixtureWith(t, b, edit, p)
	release := debounce.HoldFlushes(f.c)
	t.Cleanup(release)
	// Load the flush script first: a NOSCRIPT reply applies nothing.
	f.submit(t, p.Type, `{"warm":1}`)
	f.submit(t, p.Type, `{"warm":1}`)
	f.flush(t)
	d := f.submit(t, p.Type, `{"a":1}`)
	for range 4 {
		f.submit(t, p.Type, `{"a":1}`)
	}
	armed.Store(true)
	// The reply is lost, then Redis is out of reach: the resends fail.
	down.lostFirst.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := f.c.Flush(ctx); err == nil {
		t.Fatal("Flush: no error for the lost reply")
	}
	if armed.Load() {
		t.Fatal("the flush never went out")
	}
	down.on.Store(false)
	return f, d
}

// flushesDown, once lostFirst is set and a flush has lost its reply (the
// loseReply hook added after it), or once on is set, fails every later
// flush (every pipeline; a lone decision passes) without sending it: Redis
// out of reach, until on is cleared.
type flushesDown struct{ lostFirst, on atomic.Bool }

func (*flushesDown) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*flushesDown) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *flushesDown) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.on.Load() {
			for _, cmd := range cmds {
				cmd.SetErr(fmt.Errorf("dial tcp: connection refused (test: Redis out of reach)"))
			}
			return cmds[0].Err()
		}
		err := next(ctx, cmds)
		if err != nil && h.lostFirst.CompareAndSwap(true, false) {
			h.on.Store(true)
		}
		return err
	}
}

// TestFlushResentLateAppliesOnce: a flush applied by Redis whose reply was
// lost is sent again after more than 30 s without Redis (a partition, a
// slow failover) and still counts its events once: its marker lives as
// long as its round can take a flush. On 47bb46e the marker lived 30 s and
// the late resend counted the four local joins again (9 events, not 5).
func TestFlushResentLateAppliesOnce(t *testing.T) {
	t.Parallel()
	for _, p := range []debounce.Policy{
		{Type: "fixed", Mode: debounce.ModeDebounce, Window: 10 * time.Minute},
		{Type: "extend", Mode: debounce.ModeDebounce, Window: 10 * time.Minute, Extend: true, MaxWait: time.Hour},
	} {
		t.Run(p.Type, func(t *testing.T) {
			t.Parallel()
			m, mc := testenv.Miniredis(t)
			f, d := lostFlushReply(t, backend{name: "miniredis", rdb: mc, mini: m}, nil, p)
			f.clock.Advance(31 * time.Second) // miniredis: TTLs run down by as much
			f.flush(t)
			if r := f.inspect(t, f.c, p.Type, d.Key); r.Events != 5 {
				t.Errorf("the round counts %d events, want 5", r.Events)
			}
			if st := f.c.LocalStats(); st.Resubmitted != 0 || st.Uncertain != 0 {
				t.Errorf("stats %+v: want nothing submitted again", st)
			}
		})
	}
}

// TestFlushMarkerOutlivesItsRound: on a real redis-server, the marker of a
// flush whose reply was lost lives until after its round's expiry (the
// time no resend can apply to the round any more). On 47bb46e it lived
// 30 s, against a round living a week.
func TestFlushMarkerOutlivesItsRound(t *testing.T) {
	t.Parallel()
	p := debounce.Policy{Type: "fixed", Mode: debounce.ModeDebounce, Window: time.Minute}
	rdb := testenv.SharedRedis(t).Client(t)
	f, d := lostFlushReply(t, backend{name: "redis", rdb: rdb}, nil, p)
	ctx := context.Background()
	markers, err := rdb.Keys(ctx, f.prefix+"*~f*").Result()
	if err != nil || len(markers) != 1 {
		t.Fatalf("markers %v, %v: want the lost flush's one", markers, err)
	}
	markerExp := time.UnixMilli(int64(rdb.PExpireTime(ctx, markers[0]).Val() / time.Millisecond))
	r := f.inspect(t, f.c, p.Type, d.Key)
	if !markerExp.After(r.ExpiresAt) {
		t.Errorf("the marker expires at %v, before its round (%v): a later resend would apply twice", markerExp, r.ExpiresAt)
	}
}

// TestFlushResentPastItsRoundsLifeIsCounted: a flush whose reply was lost,
// sent again only after its round expired, finds the round gone: its
// events are submitted again (nothing is lost) and counted as uncertain
// (an earlier send may have added them to the round).
func TestFlushResentPastItsRoundsLifeIsCounted(t *testing.T) {
	t.Parallel()
	p := debounce.Policy{Type: "fixed", Mode: debounce.ModeDebounce, Window: 10 * time.Second}
	m, mc := testenv.Miniredis(t)
	f, d := lostFlushReply(t, backend{name: "miniredis", rdb: mc, mini: m},
		func(c *debounce.Config) { c.MaxAge = time.Minute }, p)
	f.clock.Advance(time.Minute + 10*time.Second + debounce.DefaultDueSlack + 2*time.Minute)
	f.flush(t)
	if st := f.c.LocalStats(); st.Resubmitted != 4 || st.Uncertain != 4 {
		t.Errorf("stats %+v: want the 4 local joins submitted again, counted uncertain", st)
	}
	if r := f.inspect(t, f.c, p.Type, d.Key); r.Events != 4 || r.Token == d.Round {
		t.Errorf("the round now %+v: want a new one with the 4 events submitted again", r)
	}
}
