package debounce_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/chaos"
	"github.com/coalesce-io/coalesce/internal/testenv"
)

// stalledFixture is a Coalescer on the shared redis-server through a proxy
// that can stall (a blackhole: connections stay open, nothing comes back),
// with a client read timeout of 10 s, and a count of the flush pipelines
// that went out.
type stalledFixture struct {
	*fixture
	proxy          *chaos.Proxy
	flushes, reads atomic.Int64
}

func newStalledFixture(t *testing.T, p debounce.Policy) *stalledFixture {
	t.Helper()
	proxy, err := chaos.NewProxy(testenv.SharedRedis(t).Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), DisableIdentity: true, MaxRetries: -1, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	sf := &stalledFixture{proxy: proxy}
	rdb.AddHook(countFlushes{&sf.flushes, &sf.reads})
	sf.fixture = newFixture(t, backend{name: "redis", rdb: rdb}, p)
	return sf
}

// countFlushes counts the pipelines of scripts as they start (in these
// tests, the flushes), and those that start with TYPE (Inspect's reads).
type countFlushes struct{ n, reads *atomic.Int64 }

func (countFlushes) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (countFlushes) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h countFlushes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "type" {
			h.reads.Add(1)
		}
		for _, cmd := range cmds {
			if strings.HasPrefix(cmd.Name(), "eval") {
				h.n.Add(1)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// stallDuringFlush stalls the proxy and answers one event locally, whose
// flush then waits on the blackhole; it returns once that flush went out.
func (sf *stalledFixture) stallDuringFlush(t *testing.T, typ, args string) {
	t.Helper()
	sf.flush(t) // the opening's own work is done
	before := sf.flushes.Load()
	sf.proxy.Stall(true)
	t.Cleanup(func() { sf.proxy.Heal() })
	joined := sf.c.LocalStats().Joined
	sf.submit(t, typ, args)
	if sf.c.LocalStats().Joined != joined+1 {
		t.Fatalf("the event was not answered locally: %+v", sf.c.LocalStats())
	}
	deadline := time.Now().Add(10 * time.Second)
	for sf.flushes.Load() == before {
		if time.Now().After(deadline) {
			t.Fatal("no flush went out within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLocalAnswersStopWhileAFlushWaits: while a flush waits on a
// blackholed Redis (no error until the read timeout), events are not
// answered locally: a crash would lose their counts, and they would reach
// Redis only after their round could be taken. On 47bb46e local answers
// went on until the flush failed, seconds later.
func TestLocalAnswersStopWhileAFlushWaits(t *testing.T) {
	t.Parallel()
	p := debounce.Policy{Type: "recompute", Mode: debounce.ModeDebounce, Window: time.Minute, Fail: debounce.FailClosed}
	sf := newStalledFixture(t, p)
	sf.submit(t, p.Type, `{"k":1}`)
	sf.stallDuringFlush(t, p.Type, `{"k":1}`)
	// Past the flush's allowance (50 ms): sleeping longer only makes it
	// more so.
	time.Sleep(200 * time.Millisecond)
	joined := sf.c.LocalStats().Joined
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	d, err := sf.c.Submit(ctx, debounce.Event{Type: p.Type, Args: json.RawMessage(`{"k":1}`)})
	if err == nil {
		t.Errorf("an event during the stalled flush was accepted: %+v", d)
	}
	if st := sf.c.LocalStats(); st.Joined != joined {
		t.Errorf("stats %+v: an event was answered locally while the flush waited", st)
	}
}

// TestFlushHonoursItsContext: Flush returns when its context ends, even
// while a flush waits on a blackholed Redis; what it could not send stays
// queued. On 47bb46e it waited out its own 5 s flush timeout, past the
// daemon's close budget.
func TestFlushHonoursItsContext(t *testing.T) {
	t.Parallel()
	p := debounce.Policy{Type: "recompute", Mode: debounce.ModeDebounce, Window: time.Minute}
	sf := newStalledFixture(t, p)
	d := sf.submit(t, p.Type, `{"k":1}`)
	sf.stallDuringFlush(t, p.Type, `{"k":1}`)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := sf.c.Flush(ctx)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Flush: %v, want the context's deadline", err)
	}
	// A bound far from both: 200 ms asked, 5 s before the fix.
	if took > 4*time.Second {
		t.Errorf("Flush took %v with a 200 ms context", took)
	}
	sf.proxy.Heal()
	if r := sf.inspect(t, sf.c, p.Type, d.Key); r.Events != 2 {
		t.Errorf("after healing: the round counts %d events, want 2", r.Events)
	}
}

// TestInspectChangesNothing: Inspect shows this process's local joins not
// yet flushed, and sends no flush: the round of events answered locally and
// then cancelled elsewhere is not found, and nothing is submitted again.
// On 47bb46e Inspect flushed, and the flush submitted the events again: it
// opened and published a round.
func TestInspectChangesNothing(t *testing.T) {
	t.Parallel()
	p := debounce.Policy{Type: "recompute", Mode: debounce.ModeDebounce, Window: time.Minute}
	eachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, p)
		release := debounce.HoldFlushes(f.c)
		defer release()
		d := f.submit(t, p.Type, `{"k":1}`)
		f.submit(t, p.Type, `{"k":1}`)
		f.submit(t, p.Type, `{"k":1}`)
		other := f.other(t, p)
		ctx := context.Background()
		if r, found, err := f.c.Inspect(ctx, p.Type, d.Key); err != nil || !found || r.Events != 3 {
			t.Fatalf("Inspect here: %+v %v %v, want 3 events (2 of them local joins)", r, found, err)
		}
		if r, found, err := other.Inspect(ctx, p.Type, d.Key); err != nil || !found || r.Events != 1 {
			t.Fatalf("Inspect elsewhere: %+v %v %v, want the 1 event in Redis: Inspect flushed", r, found, err)
		}
		if _, res, err := other.CancelRound(ctx, p.Type, d.Key, d.Round); err != nil || res != debounce.CancelCancelled {
			t.Fatalf("cancel: %s %v", res, err)
		}
		if r, found, err := f.c.Inspect(ctx, p.Type, d.Key); err != nil || found {
			t.Errorf("Inspect after the cancel: %+v %v %v, want nothing pending", r, found, err)
		}
		if _, err := f.c.Explain(ctx, debounce.Event{Type: p.Type, Args: json.RawMessage(`{"k":1}`)}); err != nil {
			t.Fatal(err)
		}
		if st := f.c.LocalStats(); st.Flushes != 0 || st.Resubmitted != 0 {
			t.Errorf("stats %+v: Inspect or Explain flushed", st)
		}
		if jobs := f.pub.distinct(); len(jobs) != 1 {
			t.Errorf("%d jobs published, want the cancelled round's only", len(jobs))
		}
	})
}

// TestLocalAnswersStopWhileAReadHoldsTheFlushes: Inspect holds the flush
// lock while it reads (so that no flush is in flight); waiting on a
// blackholed Redis, it holds the flushes back as a waiting flush does, and
// local answers stop the same way. On 3f732fe they went on for as long as
// the read waited (the client's read timeout), none of them flushed.
func TestLocalAnswersStopWhileAReadHoldsTheFlushes(t *testing.T) {
	t.Parallel()
	p := debounce.Policy{Type: "recompute", Mode: debounce.ModeDebounce, Window: time.Minute, Fail: debounce.FailClosed}
	sf := newStalledFixture(t, p)
	d := sf.submit(t, p.Type, `{"k":1}`)
	sf.submit(t, p.Type, `{"k":1}`)
	sf.flush(t)
	joined := sf.c.LocalStats().Joined
	if joined != 1 {
		t.Fatalf("stats %+v: the second event was not answered locally", sf.c.LocalStats())
	}
	sf.proxy.Stall(true)
	t.Cleanup(func() { sf.proxy.Heal() })
	reads := sf.reads.Load()
	read := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, _, err := sf.c.Inspect(ctx, p.Type, d.Key)
		read <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for sf.reads.Load() == reads {
		if time.Now().After(deadline) {
			t.Fatal("Inspect's read did not go out within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	// The read waits on the blackhole; past the flushes' allowance (50
	// ms), sleeping longer only makes it more so.
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if d, err := sf.c.Submit(ctx, debounce.Event{Type: p.Type, Args: json.RawMessage(`{"k":1}`)}); err == nil {
		t.Errorf("an event while Inspect waited on the blackhole was accepted: %+v", d)
	}
	if st := sf.c.LocalStats(); st.Joined != joined {
		t.Errorf("stats %+v: an event was answered locally while the flushes were held back", st)
	}
	sf.proxy.Heal()
	<-read
}
