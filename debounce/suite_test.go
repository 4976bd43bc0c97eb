package debounce_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/fingerprint"
	"github.com/coalesce-io/coalesce/internal/devservers"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/internal/vredis"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// backend is one Redis the behaviour suite runs against.
type backend struct {
	name string
	rdb  redis.UniversalClient
	mini *miniredis.Miniredis // nil for a real server
}

// backends returns miniredis, the shared real redis-server, the shared
// three-node Redis Cluster, the embedded default's store (miniredis driven
// by internal/devservers: journaled, real-time expiry) and the simulator's
// in-process Redis (vredis, on real time: it must behave as a real server
// does).
func backends(t *testing.T) []backend {
	t.Helper()
	m, mc := testenv.Miniredis(t)
	v := vredis.New(time.Now)
	t.Cleanup(v.Close)
	return []backend{
		{name: "miniredis", rdb: mc, mini: m},
		{name: "redis", rdb: testenv.SharedRedis(t).Client(t)},
		{name: "cluster", rdb: testenv.SharedCluster(t).Client(t)},
		{name: "embedded", rdb: embeddedRedis(t)},
		{name: "vredis", rdb: v.Client()},
	}
}

// embeddedRedis is the store `coalesce serve` runs with no Redis
// configured, journaling into a folder of the test's.
func embeddedRedis(t *testing.T) *redis.Client {
	t.Helper()
	s, err := devservers.Start(devservers.Options{NATSListen: "127.0.0.1:0", NoNATS: true, RedisListen: "127.0.0.1:0",
		DataDir: t.TempDir(), RedisDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	rdb := redis.NewClient(&redis.Options{Addr: s.RedisAddr, DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// fakeClock is the injected clock. On miniredis it also moves the server's
// time, so PXAT and PEXPIRETIME agree with it; on a real server it runs
// ahead of the server (reservations then just live a little longer).
type fakeClock struct {
	mu   sync.Mutex
	now  time.Time
	mini *miniredis.Miniredis
}

func newClock(b backend) *fakeClock {
	c := &fakeClock{now: time.Now().Truncate(time.Millisecond), mini: b.mini}
	if b.mini != nil {
		b.mini.SetTime(c.now)
		b.mini.ClockTTL(true) // TTLs follow SetTime, coherent with PXAT and PEXPIRETIME
	}
	return c
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Sync sets a real server's clock to real time after a test waited on a
// real TTL; the fake clock otherwise stands still.
func (c *fakeClock) Sync() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now().Truncate(time.Millisecond); c.mini == nil && now.After(c.now) {
		c.now = now
	}
}

// Advance moves the clock; on miniredis TTLs run down by as much.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	if c.mini != nil {
		c.mini.SetTime(c.now)
	}
}

// recorder is a Publisher that keeps what it is given; fail makes it refuse.
type recorder struct {
	mu   sync.Mutex
	jobs []debounce.Job
	fail error
}

func (r *recorder) Publish(_ context.Context, job debounce.Job) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.jobs = append(r.jobs, job)
	return nil
}

func (r *recorder) setFail(err error) {
	r.mu.Lock()
	r.fail = err
	r.mu.Unlock()
}

func (r *recorder) all() []debounce.Job {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]debounce.Job(nil), r.jobs...)
}

// distinct returns the published jobs with one entry per (key, token,
// version): a publisher that deduplicates by message id (JetStream) sees
// just these. The key is part of the id (publisher.Message): a token is
// unique per key only (a packed token is the expiry in ms and 14 random
// bits, so two keys opened in the same millisecond share one about once in
// 16383), and two rounds of different keys are two jobs.
func (r *recorder) distinct() []debounce.Job {
	seen := map[string]bool{}
	var out []debounce.Job
	for _, j := range r.all() {
		id := fmt.Sprintf("%s-%s-%d", j.Key, j.Token, j.Version)
		if j.Token == 0 || !seen[id] {
			seen[id] = true
			out = append(out, j)
		}
	}
	return out
}

type fixture struct {
	prefix string
	c      *debounce.Coalescer
	pub    *recorder
	clock  *fakeClock
	b      backend
}

func newFixture(t *testing.T, b backend, policies ...debounce.Policy) *fixture {
	t.Helper()
	return newFixtureWith(t, b, nil, policies...)
}

// newFixtureWith lets a test change the Coalescer's config (say MaxAge).
func newFixtureWith(t *testing.T, b backend, edit func(*debounce.Config), policies ...debounce.Policy) *fixture {
	t.Helper()
	f := &fixture{pub: &recorder{}, clock: newClock(b), b: b, prefix: testenv.Prefix(t)}
	cfg := debounce.Config{
		Schedules: debounce.SchedulesJetStream, // the deferred path has its own tests (deferred_test.go)
		Redis:     b.rdb,
		Publisher: f.pub,
		Policies:  policies,
		Prefix:    f.prefix,
		Now:       f.clock.Now,
	}
	if edit != nil {
		edit(&cfg)
	}
	c, err := debounce.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
	return f
}

func (f *fixture) submit(t *testing.T, typ, args string) debounce.Decision {
	t.Helper()
	d, err := f.c.Submit(context.Background(), debounce.Event{Type: typ, Args: json.RawMessage(args)})
	if err != nil {
		t.Fatalf("Submit(%s %s): %v", typ, args, err)
	}
	return d
}

func (f *fixture) start(t *testing.T, job debounce.Job) debounce.Release {
	t.Helper()
	f.flush(t)
	rel, err := f.c.Start(context.Background(), job)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return rel
}

// flush adds the events answered locally to their rounds in Redis, as the
// flush does within milliseconds (the fake clock stands still, the flush
// does not wait for it).
func (f *fixture) flush(t *testing.T) {
	t.Helper()
	if err := f.c.Flush(context.Background()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

func expectOutcomes(t *testing.T, got []debounce.Decision, want ...debounce.Outcome) {
	t.Helper()
	for i, d := range got {
		if d.Outcome != want[i] {
			t.Errorf("event %d: outcome %s, want %s (decision %+v)", i, d.Outcome, want[i], d)
		}
	}
}

// eachBackend runs a behaviour test against every backend, in parallel.
func eachBackend(t *testing.T, test func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			test(t, b)
		})
	}
}

func TestDebounceFixedWindow(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, debounce.Policy{Type: "recompute", Mode: debounce.ModeDebounce, Window: 30 * time.Second, KeyFields: []string{"tenant_id"}})
		first := f.clock.Now()
		d1 := f.submit(t, "recompute", `{"tenant_id":42,"order":1}`)
		f.clock.Advance(5 * time.Second)
		d2 := f.submit(t, "recompute", `{"tenant_id":42,"order":2}`)
		f.clock.Advance(7 * time.Second)
		d3 := f.submit(t, "recompute", `{"order":3,"tenant_id":42.0}`)
		other := f.submit(t, "recompute", `{"tenant_id":43}`)
		expectOutcomes(t, []debounce.Decision{d1, d2, d3, other},
			debounce.OutcomeScheduled, debounce.OutcomeCoalesced, debounce.OutcomeCoalesced, debounce.OutcomeScheduled)
		wantDue := first.Add(30 * time.Second)
		for i, d := range []debounce.Decision{d1, d2, d3} {
			if !d.DueAt.Equal(wantDue) || d.Round != d1.Round || d.Key != d1.Key || d.Events != i+1 {
				t.Errorf("event %d: due %v round %s key %s events %d; want due %v round %s events %d",
					i, d.DueAt, d.Round, d.Key, d.Events, wantDue, d1.Round, i+1)
			}
		}
		if other.Key == d1.Key || other.Round == d1.Round {
			t.Error("tenant 43 joined tenant 42's round")
		}
		jobs := f.pub.distinct()
		if len(jobs) != 2 {
			t.Fatalf("published %d rounds, want 2: %+v", len(jobs), jobs)
		}
		job := jobs[0]
		if job.Token != d1.Round || !job.DueAt.Equal(wantDue) || !job.OpenedAt.Equal(first) || string(job.Args) != `{"tenant_id":42,"order":1}` {
			t.Errorf("published job %+v", job)
		}
		if early := f.start(t, job); early.Result != debounce.ReleaseNotDue || !early.DueAt.Equal(wantDue) || early.Version != 0 {
			t.Errorf("Start 18 s before due: %+v, want not due until %v", early, wantDue)
		}
		f.clock.Advance(18 * time.Second)
		rel := f.start(t, job)
		if rel.Result != debounce.ReleaseReleased || rel.Starts != 1 || rel.Summary.Events != 3 || !rel.Summary.FirstSeen.Equal(first) {
			t.Fatalf("Start: %+v", rel)
		}
		if lag := first.Add(12 * time.Second).Sub(rel.Summary.LastSeen); lag < 0 || lag > 20*time.Millisecond {
			t.Errorf("last seen %v, want %v", rel.Summary.LastSeen, first.Add(12*time.Second))
		}
		// Released: the next event opens the next round.
		d4 := f.submit(t, "recompute", `{"tenant_id":42}`)
		if d4.Outcome != debounce.OutcomeScheduled || d4.Round == d1.Round || d4.Events != 1 {
			t.Errorf("after release: %+v", d4)
		}
		// A redelivery of the first job (its handler failed) gets the same
		// summary back, and changes nothing in the new round.
		if again := f.start(t, job); again.Result != debounce.ReleaseRetry || again.Starts != 2 || !reflect.DeepEqual(again.Summary, rel.Summary) {
			t.Errorf("second Start of the old job: %+v, want retry 2 with %+v", again, rel.Summary)
		}
		if again := f.start(t, job); again.Starts != 3 {
			t.Errorf("third Start of the old job counts %d starts, want 3", again.Starts)
		}
		if fin, err := f.c.Finish(context.Background(), job, true, false); err != nil || fin.Result != debounce.ReleaseSkipped {
			t.Errorf("Finish: %+v %v", fin, err)
		}
		// Finished: a stray delivery (an ack lost) is told the job is done.
		if rel := f.start(t, job); rel.Result != debounce.ReleaseDone {
			t.Errorf("Start after Finish: %s, want done", rel.Result)
		}
		if _, found, _ := f.c.Inspect(context.Background(), "recompute", d4.Key); !found {
			t.Error("the stale release removed the new round")
		}
	})
}

func TestConcurrentEventsOpenOneRound(t *testing.T) {
	t.Parallel()
	policies := []debounce.Policy{
		{Type: "fixed", Mode: debounce.ModeDebounce, Window: 10 * time.Second},
		{Type: "extend", Mode: debounce.ModeDebounce, Window: 10 * time.Second, Extend: true, MaxWait: time.Minute},
		{Type: "last", Mode: debounce.ModeDebounce, Window: 10 * time.Second, Payload: debounce.PayloadLast},
		{Type: "dedup", Mode: debounce.ModeDedup},
		{Type: "throttle", Mode: debounce.ModeThrottle, Window: 10 * time.Second, Trailing: true},
	}
	eachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, policies...)
		for _, p := range policies {
			const n = 64
			var wg sync.WaitGroup
			decisions := make([]debounce.Decision, n)
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() {
					decisions[i], errs[i] = f.c.Submit(context.Background(), debounce.Event{Type: p.Type, Args: json.RawMessage(`{"id":1}`)})
				})
			}
			wg.Wait()
			counts := map[debounce.Outcome]int{}
			maxEvents := 0
			for i, d := range decisions {
				if errs[i] != nil {
					t.Fatalf("%s: %v", p.Type, errs[i])
				}
				counts[d.Outcome]++
				maxEvents = max(maxEvents, d.Events)
			}
			opened := counts[debounce.OutcomeScheduled] + counts[debounce.OutcomePublished]
			if p.Mode == debounce.ModeThrottle {
				// One leading job and one trailing round.
				if counts[debounce.OutcomePublished] != 1 || counts[debounce.OutcomeScheduled] != 1 {
					t.Errorf("%s: outcomes %v, want 1 published and 1 scheduled", p.Type, counts)
				}
			} else if opened != 1 {
				t.Errorf("%s: %d events opened a round, want 1 (outcomes %v)", p.Type, opened, counts)
			}
			if p.Mode != debounce.ModeThrottle {
				// The round's count, once this process's local joins are
				// flushed: a decision's own count leaves out the local
				// joins not flushed yet when it went to Redis (a flush
				// held up more than 50 ms on a loaded machine sends the
				// events there).
				if r := f.inspect(t, f.c, p.Type, decisions[0].Key); r.Events != n || maxEvents > n {
					t.Errorf("%s: the round counts %d events (decisions up to %d), want %d", p.Type, r.Events, maxEvents, n)
				}
			}
		}
		perType := map[string]int{}
		for _, j := range f.pub.distinct() {
			perType[j.Type]++
		}
		for _, p := range policies {
			want := 1
			if p.Mode == debounce.ModeThrottle {
				want = 2
			}
			if perType[p.Type] != want {
				t.Errorf("%s: %d distinct jobs published, want %d", p.Type, perType[p.Type], want)
			}
		}
	})
}

func TestDedup(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b,
			debounce.Policy{Type: "start", Mode: debounce.ModeDedup},
			debounce.Policy{Type: "success", Mode: debounce.ModeDedup, Until: debounce.UntilSuccess},
			debounce.Policy{Type: "expiry", Mode: debounce.ModeDedup, Until: debounce.UntilExpiry, TTL: 24 * time.Hour},
		)
		ctx := context.Background()
		for _, typ := range []string{"start", "success", "expiry"} {
			d1 := f.submit(t, typ, `{"comment":7,"user":1}`)
			d2 := f.submit(t, typ, `{"user":1,"comment":7}`)
			expectOutcomes(t, []debounce.Decision{d1, d2}, debounce.OutcomePublished, debounce.OutcomeDuplicate)
			if !d1.DueAt.IsZero() || d2.Events != 2 || d2.Round != d1.Round {
				t.Errorf("%s: %+v %+v", typ, d1, d2)
			}
			jobs := f.pub.distinct()
			job := jobs[len(jobs)-1]
			if job.Type != typ || !job.Immediate() || job.Token != d1.Round {
				t.Fatalf("%s: published %+v", typ, job)
			}
			rel := f.start(t, job)
			switch typ {
			case "start":
				if rel.Result != debounce.ReleaseReleased || rel.Summary.Events != 2 {
					t.Errorf("start: Start = %+v", rel)
				}
				if d := f.submit(t, typ, `{"comment":7,"user":1}`); d.Outcome != debounce.OutcomePublished {
					t.Errorf("start: after release %s, want published", d.Outcome)
				}
			case "success":
				if rel.Result != debounce.ReleaseSkipped {
					t.Errorf("success: Start = %s, want skipped", rel.Result)
				}
				if d := f.submit(t, typ, `{"comment":7,"user":1}`); d.Outcome != debounce.OutcomeDuplicate {
					t.Errorf("success: during the run %s, want duplicate", d.Outcome)
				}
				if rel, _ := f.c.Finish(ctx, job, false, false); rel.Result != debounce.ReleaseSkipped {
					t.Errorf("success: Finish(failed, retrying) = %s, want skipped", rel.Result)
				}
				rel, err := f.c.Finish(ctx, job, true, false)
				if err != nil || rel.Result != debounce.ReleaseReleased || rel.Summary.Events != 3 {
					t.Errorf("success: Finish(ok) = %+v, %v", rel, err)
				}
				if d := f.submit(t, typ, `{"comment":7,"user":1}`); d.Outcome != debounce.OutcomePublished {
					t.Errorf("success: after success %s, want published", d.Outcome)
				}
			case "expiry":
				if rel.Result != debounce.ReleaseSkipped {
					t.Errorf("expiry: Start = %s, want skipped", rel.Result)
				}
				if rel, _ := f.c.Finish(ctx, job, true, false); rel.Result != debounce.ReleaseSkipped {
					t.Errorf("expiry: Finish = %s, want skipped", rel.Result)
				}
				if d := f.submit(t, typ, `{"comment":7,"user":1}`); d.Outcome != debounce.OutcomeDuplicate {
					t.Errorf("expiry: after the job %s, want duplicate until the TTL ends", d.Outcome)
				}
			}
		}
	})
}

func TestThrottle(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b,
			debounce.Policy{Type: "plain", Mode: debounce.ModeThrottle, Window: 10 * time.Second},
			debounce.Policy{Type: "trailing", Mode: debounce.ModeThrottle, Window: 10 * time.Second, Trailing: true, Payload: debounce.PayloadLast, KeyFields: []string{"k"}},
		)
		start, realStart := f.clock.Now(), time.Now()
		var plain, trailing []debounce.Decision
		for i := range 4 {
			plain = append(plain, f.submit(t, "plain", `{"k":1}`))
			trailing = append(trailing, f.submit(t, "trailing", fmt.Sprintf(`{"k":1,"i":%d}`, i)))
			f.clock.Advance(time.Second)
		}
		expectOutcomes(t, plain, debounce.OutcomePublished, debounce.OutcomeThrottled, debounce.OutcomeThrottled, debounce.OutcomeThrottled)
		expectOutcomes(t, trailing, debounce.OutcomePublished, debounce.OutcomeScheduled, debounce.OutcomeCoalesced, debounce.OutcomeCoalesced)
		if plain[3].Events != 4 || plain[3].Round != plain[0].Round {
			t.Errorf("throttled events counted in the window: %+v", plain[3])
		}
		// The window is timed by Redis from the moment it opens: on miniredis
		// by the fake clock, on a real server by its own.
		windowEnd := start.Add(10 * time.Second)
		tolerance := time.Duration(0)
		if b.mini == nil {
			windowEnd, tolerance = realStart.Add(10*time.Second), time.Second
		}
		if trailing[1].DueAt.Sub(windowEnd).Abs() > tolerance || !trailing[3].DueAt.Equal(trailing[1].DueAt) {
			t.Errorf("trailing round due %v, want the window end %v", trailing[1].DueAt, windowEnd)
		}
		var trailingJob debounce.Job
		leading := 0
		for _, j := range f.pub.distinct() {
			if j.Immediate() {
				leading++
				if rel := f.start(t, j); rel.Result != debounce.ReleaseSkipped || rel.Starts != 1 {
					t.Errorf("leading job Start = %s with %d starts, want skipped (the window ends by itself), 1", rel.Result, rel.Starts)
				}
				// Its attempts count all the same, until Finish.
				if rel := f.start(t, j); rel.Starts != 2 {
					t.Errorf("leading job's second Start counts %d starts, want 2", rel.Starts)
				}
				if _, err := f.c.Finish(context.Background(), j, true, false); err != nil {
					t.Fatal(err)
				}
				if rel := f.start(t, j); rel.Result != debounce.ReleaseDone {
					t.Errorf("leading job's Start after Finish: %+v, want done (a late delivery does not run again)", rel)
				}
			} else {
				trailingJob = j
			}
		}
		if leading != 2 || trailingJob.Type != "trailing" {
			t.Fatalf("published %+v", f.pub.distinct())
		}
		f.clock.Advance(7 * time.Second) // past the window end
		rel := f.start(t, trailingJob)
		if rel.Result != debounce.ReleaseReleased || rel.Summary.Events != 3 || string(rel.Summary.Payload) != `{"k":1,"i":3}` {
			t.Errorf("trailing Start = %+v", rel)
		}
		if b.mini != nil {
			// The window has ended: the next event is a new leading edge.
			if d := f.submit(t, "plain", `{"k":1}`); d.Outcome != debounce.OutcomePublished {
				t.Errorf("after the window: %s, want published", d.Outcome)
			}
		}
	})
}

func TestExtendCappedByMaxWait(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, debounce.Policy{Type: "sync", Mode: debounce.ModeDebounce, Window: 10 * time.Second, Extend: true, MaxWait: 30 * time.Second})
		t0 := f.clock.Now()
		var ds []debounce.Decision
		for _, at := range []time.Duration{0, 5 * time.Second, 25 * time.Second, 29 * time.Second} {
			f.clock.Advance(at - f.clock.Now().Sub(t0))
			ds = append(ds, f.submit(t, "sync", `{"doc":1}`))
		}
		expectOutcomes(t, ds, debounce.OutcomeScheduled, debounce.OutcomeExtended, debounce.OutcomeExtended, debounce.OutcomeCoalesced)
		for i, want := range []time.Duration{10 * time.Second, 15 * time.Second, 30 * time.Second, 30 * time.Second} {
			if !ds[i].DueAt.Equal(t0.Add(want)) {
				t.Errorf("event %d due %v, want first+%v", i, ds[i].DueAt.Sub(t0), want)
			}
		}
		job := f.pub.distinct()[0]
		if !job.DueAt.Equal(t0.Add(10 * time.Second)) {
			t.Fatalf("first schedule due %v", job.DueAt.Sub(t0))
		}
		// The first schedule fires at t0+10s (the clock is already later here,
		// but the round is due at t0+30s): not due, publish again.
		f.clock.Advance(-f.clock.Now().Sub(t0) + 10*time.Second)
		rel := f.start(t, job)
		if rel.Result != debounce.ReleaseNotDue || !rel.DueAt.Equal(t0.Add(30*time.Second)) || rel.Version != 1 {
			t.Fatalf("Start before due = %+v", rel)
		}
		f.clock.Advance(20 * time.Second)
		job.Version, job.DueAt = rel.Version, rel.DueAt
		rel = f.start(t, job)
		if rel.Result != debounce.ReleaseReleased || rel.Summary.Events != 4 || !rel.Summary.LastSeen.Equal(t0.Add(29*time.Second)) {
			t.Errorf("Start at due = %+v", rel)
		}
	})
}

func TestPayloads(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b,
			debounce.Policy{Type: "last", Mode: debounce.ModeDebounce, Window: 5 * time.Second, Payload: debounce.PayloadLast, KeyFields: []string{"tenant"}},
			debounce.Policy{Type: "acc", Mode: debounce.ModeDebounce, Window: 5 * time.Second, Payload: debounce.PayloadAccumulate, KeyFields: []string{"tenant"}},
			debounce.Policy{Type: "ids", Mode: debounce.ModeDebounce, Window: 5 * time.Second, Payload: debounce.PayloadAccumulate, ItemField: "id", KeyFields: []string{"tenant"}, MaxItems: 3},
		)
		for i, id := range []int{1, 2, 2, 1, 3} {
			f.submit(t, "last", fmt.Sprintf(`{"tenant":1,"id":%d,"seq":%d}`, id, i))
			f.submit(t, "acc", fmt.Sprintf(`{"tenant":1,"id":%d}`, id))
		}
		ids := []debounce.Decision{
			f.submit(t, "ids", `{"tenant":1,"id":1}`),
			f.submit(t, "ids", `{"tenant":1,"id":2}`),
			f.submit(t, "ids", `{"tenant":1,"id":2.0}`),
			f.submit(t, "ids", `{"id":"x","tenant":1}`), // third distinct item: fires now
			f.submit(t, "ids", `{"tenant":1,"id":4}`),   // rides along until the job starts
		}
		expectOutcomes(t, ids, debounce.OutcomeScheduled, debounce.OutcomeCoalesced, debounce.OutcomeCoalesced, debounce.OutcomeCoalesced, debounce.OutcomeCoalesced)
		if now := f.clock.Now(); !ids[3].DueAt.Equal(now) {
			t.Errorf("filling the round: due %v, want now %v", ids[3].DueAt, now)
		}
		byType := map[string][]debounce.Job{}
		for _, j := range f.pub.distinct() {
			byType[j.Type] = append(byType[j.Type], j)
		}
		if n := len(byType["ids"]); n != 2 || byType["ids"][1].Version != 1 || !byType["ids"][1].DueAt.Equal(f.clock.Now()) {
			t.Fatalf("ids: published %+v, want the round and its reschedule to now (version 1)", byType["ids"])
		}
		f.clock.Advance(6 * time.Second) // past the due time
		rel := f.start(t, byType["last"][0])
		if rel.Summary.Events != 5 || string(rel.Summary.Payload) != `{"tenant":1,"id":3,"seq":4}` {
			t.Errorf("last: %+v", rel)
		}
		rel = f.start(t, byType["acc"][0])
		if got := itemSet(rel.Summary.Items); rel.Summary.Events != 5 || got != `{"id":1,"tenant":1} {"id":2,"tenant":1} {"id":3,"tenant":1}` {
			t.Errorf("accumulate: events %d items %s", rel.Summary.Events, got)
		}
		rel = f.start(t, byType["ids"][1])
		if got := itemSet(rel.Summary.Items); got != `"x" 1 2 4` {
			t.Errorf("accumulate id: items %s", got)
		}
	})
}

func itemSet(items []json.RawMessage) string {
	s := make([]string, len(items))
	for i, it := range items {
		s[i] = string(it)
	}
	slices.Sort(s)
	out := ""
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}

func TestFencingAfterExpiry(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		// A short MaxAge lets the rounds expire: window + MaxAge = 1.3 s.
		f := newFixtureWith(t, b, func(c *debounce.Config) { c.MaxAge = 300 * time.Millisecond },
			debounce.Policy{Type: "packed", Mode: debounce.ModeDebounce, Window: time.Second},
			debounce.Policy{Type: "hash", Mode: debounce.ModeDebounce, Window: time.Second, Payload: debounce.PayloadLast},
		)
		for _, typ := range []string{"packed", "hash"} {
			old := f.submit(t, typ, `{"x":1}`)
			expire(t, f, typ, old.Key, 1300*time.Millisecond)
			fresh := f.submit(t, typ, `{"x":1}`)
			if fresh.Outcome == debounce.OutcomeCoalesced || fresh.Outcome == debounce.OutcomeDuplicate || fresh.Round == old.Round {
				t.Fatalf("%s: after expiry %+v, want a new round", typ, fresh)
			}
			var oldJob, newJob debounce.Job
			for _, j := range f.pub.distinct() {
				switch j.Token {
				case old.Round:
					oldJob = j
				case fresh.Round:
					newJob = j
				}
			}
			f.clock.Advance(1100 * time.Millisecond) // past the new round's 1s window
			if rel := f.start(t, oldJob); rel.Result != debounce.ReleaseStaleToken {
				t.Errorf("%s: old token released %s, want stale_token", typ, rel.Result)
			}
			if rel := f.start(t, newJob); rel.Result != debounce.ReleaseReleased {
				t.Errorf("%s: new token: %s, want released", typ, rel.Result)
			}
		}
	})
}

// expire waits until the round's reservation has expired: on miniredis by
// moving time, on a real server by polling until Redis drops the key.
func expire(t *testing.T, f *fixture, typ string, key debounce.RoundKey, ttl time.Duration) {
	t.Helper()
	if f.b.mini != nil {
		f.clock.Advance(ttl + time.Millisecond)
	}
	deadline := time.Now().Add(ttl + 5*time.Second)
	for {
		_, found, err := f.c.Inspect(context.Background(), typ, key)
		if err != nil {
			t.Fatal(err)
		}
		if !found {
			f.clock.Sync()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: reservation still there %v after its TTL", typ, ttl)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPublishFailureBacksOut(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b,
			debounce.Policy{Type: "packed", Mode: debounce.ModeDebounce, Window: 5 * time.Second},
			debounce.Policy{Type: "hash", Mode: debounce.ModeDebounce, Window: 5 * time.Second, Payload: debounce.PayloadLast},
			debounce.Policy{Type: "lead", Mode: debounce.ModeThrottle, Window: 5 * time.Second},
		)
		for _, typ := range []string{"packed", "hash", "lead"} {
			f.pub.setFail(errors.New("nats: no responders"))
			_, err := f.c.Submit(context.Background(), debounce.Event{Type: typ, Args: json.RawMessage(`{"a":1}`)})
			if !errors.Is(err, debounce.ErrPublish) {
				t.Fatalf("%s: Submit with NATS down: %v, want ErrPublish", typ, err)
			}
			key := debounce.RoundKey(mustFP(t, typ, `{"a":1}`))
			if r, found, _ := f.c.Inspect(context.Background(), typ, key); found {
				t.Fatalf("%s: reservation left after a failed publish: %+v", typ, r)
			}
			f.pub.setFail(nil)
			if d := f.submit(t, typ, `{"a":1}`); d.Outcome != debounce.OutcomeScheduled && d.Outcome != debounce.OutcomePublished {
				t.Errorf("%s: retry %s, want a new round", typ, d.Outcome)
			}
		}
	})
}

// TestJoinerPublishesUnpublishedRound: a producer that reserved a round and
// died before publishing it must not strand the events that join it.
func TestJoinerPublishesUnpublishedRound(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b,
			debounce.Policy{Type: "packed", Mode: debounce.ModeDebounce, Window: 5 * time.Second},
			debounce.Policy{Type: "hash", Mode: debounce.ModeDebounce, Window: 5 * time.Second, Payload: debounce.PayloadAccumulate},
			debounce.Policy{Type: "dedup", Mode: debounce.ModeDedup},
		)
		for _, typ := range []string{"packed", "hash", "dedup"} {
			// The opener "dies": its publish never returns before its context ends,
			// and the back-out with that dead context cannot run either.
			ctx, cancel := context.WithCancel(context.Background())
			dying := debounce.PublisherFunc(func(ctx context.Context, _ debounce.Job) error {
				cancel()
				<-ctx.Done()
				return ctx.Err()
			})
			opener, err := debounce.New(debounce.Config{Schedules: debounce.SchedulesJetStream, Redis: b.rdb, Publisher: dying, Policies: f.c.Policies(), Prefix: f.prefix, Now: f.clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := opener.Submit(ctx, debounce.Event{Type: typ, Args: json.RawMessage(`{"a":1}`)}); err == nil {
				t.Fatalf("%s: the dying opener's Submit succeeded", typ)
			}
			before := len(f.pub.all())
			d := f.submit(t, typ, `{"a":1}`)
			if d.Outcome == debounce.OutcomeScheduled || d.Outcome == debounce.OutcomePublished || d.Events != 2 {
				t.Fatalf("%s: joiner %+v, want it to join the stranded round", typ, d)
			}
			jobs := f.pub.all()[before:]
			if len(jobs) != 1 || jobs[0].Token != d.Round || jobs[0].Version != 0 {
				t.Fatalf("%s: the joiner published %+v, want the stranded round (token %s, version 0)", typ, jobs, d.Round)
			}
			r, _, _ := f.c.Inspect(context.Background(), typ, d.Key)
			if !r.Published {
				t.Errorf("%s: round not marked published after the joiner's publish", typ)
			}
			// Now marked: the next joiner does not publish again.
			f.submit(t, typ, `{"a":1}`)
			if n := len(f.pub.all()) - before; n != 1 {
				t.Errorf("%s: %d publishes after the round was marked, want 1", typ, n)
			}
		}
	})
}

func mustFP(t *testing.T, typ, args string) fingerprint.Fingerprint {
	t.Helper()
	fp, err := fingerprint.FromJSON(typ, []byte(args))
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// TestReaperReleasesStrandedRounds: a producer died between reserving a
// round and publishing it, and nobody joined: the reaper releases it after a
// full period, and leaves published and recently changed rounds alone.
func TestReaperReleasesStrandedRounds(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b,
			debounce.Policy{Type: "packed", Mode: debounce.ModeDebounce, Window: 5 * time.Second},
			debounce.Policy{Type: "hash", Mode: debounce.ModeDebounce, Window: 5 * time.Second, Payload: debounce.PayloadLast},
			debounce.Policy{Type: "throttle", Mode: debounce.ModeThrottle, Window: time.Minute},
		)
		ctx := context.Background()
		var stranded []debounce.RoundKey
		for _, typ := range []string{"packed", "hash", "throttle"} {
			// The opener "dies" during its publish: the context ends, so the
			// back-out fails too and the round stays, unpublished.
			cctx, cancel := context.WithCancel(ctx)
			dying := debounce.PublisherFunc(func(ctx context.Context, _ debounce.Job) error { cancel(); return ctx.Err() })
			opener, err := debounce.New(debounce.Config{Schedules: debounce.SchedulesJetStream, Redis: b.rdb, Publisher: dying, Policies: f.c.Policies(), Prefix: f.prefix, Now: f.clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			_, _ = opener.Submit(cctx, debounce.Event{Type: typ, Args: json.RawMessage(`{"stranded":1}`)})
			stranded = append(stranded, debounce.RoundKey(mustFP(t, typ, `{"stranded":1}`)))
			f.submit(t, typ, `{"healthy":1}`) // published normally
		}
		reaper := f.c.NewReaper()
		rep, err := reaper.Pass(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Candidates != 3 || rep.Released != 0 {
			t.Fatalf("first pass: %+v, want 3 candidates", rep)
		}
		// One stranded round gets an event meanwhile: its joiner publishes it.
		f.submit(t, "hash", `{"stranded":1}`)
		// Unchanged, but not yet for UnpublishedAfter: a publish may still
		// be under way (it retries for up to about 25 s).
		rep, err = reaper.Pass(ctx)
		if err != nil || rep.Released != 0 || rep.Candidates != 2 {
			t.Fatalf("second pass, right after: %+v %v, want 2 candidates kept, none released", rep, err)
		}
		f.clock.Advance(debounce.DefaultUnpublishedAfter)
		rep, err = reaper.Pass(ctx)
		if err != nil || rep.Released != 2 {
			t.Fatalf("third pass: %+v %v, want 2 released", rep, err)
		}
		types := []string{"packed", "hash", "throttle"}
		for i, key := range stranded {
			_, found, _ := f.c.Inspect(ctx, types[i], key)
			if found != (types[i] == "hash") {
				t.Errorf("%s: stranded round found=%v after reaping", types[i], found)
			}
			if _, found, _ := f.c.Inspect(ctx, types[i], debounce.RoundKey(mustFP(t, types[i], `{"healthy":1}`))); !found {
				t.Errorf("%s: the published round was reaped", types[i])
			}
		}
	})
}

// A job taken by a version that kept its summary as a plain string (no start
// count) still retries with that summary after an upgrade.
func TestRetryOfARoundTakenBeforeStartCounts(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, debounce.Policy{Type: "recompute", Mode: debounce.ModeDebounce, Window: 30 * time.Second})
		f.submit(t, "recompute", `{"n":1}`)
		f.submit(t, "recompute", `{"n":1}`)
		job := f.pub.distinct()[0]
		f.clock.Advance(30 * time.Second)
		rel := f.start(t, job)
		ctx := context.Background()
		var (
			mu   sync.Mutex
			keys []string
		)
		each := func(ctx context.Context, c *redis.Client) error {
			k, err := c.Keys(ctx, f.prefix+"*x"+job.Token.String()).Result()
			mu.Lock()
			keys = append(keys, k...)
			mu.Unlock()
			return err
		}
		var err error
		if cc, ok := b.rdb.(*redis.ClusterClient); ok {
			err = cc.ForEachMaster(ctx, each)
		} else {
			err = each(ctx, b.rdb.(*redis.Client))
		}
		if err != nil || len(keys) != 1 {
			t.Fatalf("taken copy: %v %v", keys, err)
		}
		v, err := b.rdb.HGet(ctx, keys[0], "v").Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := b.rdb.Del(ctx, keys[0]).Err(); err != nil {
			t.Fatal(err)
		}
		if err := b.rdb.Set(ctx, keys[0], v, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		again := f.start(t, job)
		if again.Result != debounce.ReleaseRetry || again.Starts != 0 || again.Summary.Events != 2 || again.Summary.Events != rel.Summary.Events {
			t.Errorf("retry of an old taken copy: %+v, want retry, 0 starts (uncounted), 2 events", again)
		}
	})
}
