package debounce_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
)

// deferredBackends are the backends where rounds can wait in Redis: a
// single node (miniredis, redis-server).
func deferredBackends(t *testing.T, test func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends(t) {
		if b.name == "cluster" || b.name == "embedded" || b.name == "vredis" {
			// A Cluster cannot share a slot between a due list and its
			// rounds; the embedded store and the simulator's keep no
			// sorted sets (auto never holds rounds there).
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			test(t, b)
		})
	}
}

// newDeferred is a fixture whose debounce rounds wait in Redis, with no
// forwarder of its own: the test runs forwarder passes itself.
func newDeferred(t *testing.T, b backend, policies ...debounce.Policy) *fixture {
	t.Helper()
	return newFixtureWith(t, b, func(c *debounce.Config) {
		c.Schedules, c.Forwarding = debounce.SchedulesRedis, debounce.ForwardingOff
	}, policies...)
}

// forward runs one forwarder pass of f's Coalescer.
func (f *fixture) forward(t *testing.T) debounce.ForwardReport {
	t.Helper()
	rep, err := f.c.NewForwarder(nil).Pass(context.Background())
	if err != nil {
		t.Fatalf("forwarder pass: %v", err)
	}
	return rep
}

// An opening holds the round in Redis and publishes nothing; once due, a
// forwarder publishes its job, with everything a job published at the
// opening would carry, and the worker's Start finds the round's data: for
// every payload, fixed and extended.
func TestDeferredRoundsArePublishedWhenDue(t *testing.T) {
	t.Parallel()
	policies := []debounce.Policy{
		{Type: "first", Mode: debounce.ModeDebounce, Window: 10 * time.Second, KeyFields: []string{"tenant"}},
		{Type: "last", Mode: debounce.ModeDebounce, Window: 10 * time.Second, Payload: debounce.PayloadLast, KeyFields: []string{"tenant"}},
		{Type: "acc", Mode: debounce.ModeDebounce, Window: 10 * time.Second, Payload: debounce.PayloadAccumulate, ItemField: "id", KeyFields: []string{"tenant"}},
		{Type: "ext", Mode: debounce.ModeDebounce, Window: 10 * time.Second, Extend: true, MaxWait: time.Minute, KeyFields: []string{"tenant"}},
	}
	const trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	deferredBackends(t, func(t *testing.T, b backend) {
		f := newDeferred(t, b, policies...)
		ctx := context.Background()
		t0 := f.clock.Now()
		opened := map[string]debounce.Decision{}
		for _, p := range policies {
			for i := range 3 {
				d, err := f.c.Submit(ctx, debounce.Event{Type: p.Type, Args: json.RawMessage(fmt.Sprintf(`{"tenant":7, "id":%d}`, i)), TraceParent: trace})
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					if d.Outcome != debounce.OutcomeScheduled || !d.DueAt.Equal(t0.Add(10*time.Second)) {
						t.Fatalf("%s: opening %+v", p.Type, d)
					}
					opened[p.Type] = d
				}
			}
			if !f.c.Deferred(p.Type) || !f.c.HoldsInRedis(ctx, p.Type) {
				t.Errorf("%s: not held in Redis", p.Type)
			}
			if n, err := f.c.DueCount(ctx, p.Type); err != nil || n != 1 {
				t.Errorf("%s: DueCount %d %v, want 1", p.Type, n, err)
			}
		}
		if jobs := f.pub.all(); len(jobs) != 0 {
			t.Fatalf("published at the openings: %+v", jobs)
		}
		if rep := f.forward(t); rep.Claimed != 0 || len(f.pub.all()) != 0 {
			t.Fatalf("a pass before due: %+v", rep)
		}
		f.flush(t) // the local joins of "first" and "ext"
		f.clock.Advance(10 * time.Second)
		rep := f.forward(t)
		if rep.Published != 4 || rep.Claimed != 4 || rep.Failed != 0 {
			t.Fatalf("pass at due: %+v, want 4 published", rep)
		}
		for _, job := range f.pub.all() {
			d := opened[job.Type]
			p, _ := f.c.Policy(job.Type)
			if job.Token != d.Round || job.Key != d.Key || job.Fingerprint != d.Fingerprint || job.Version != 0 ||
				!job.OpenedAt.Equal(t0) || !job.DueAt.Equal(t0.Add(10*time.Second)) || job.Mode != debounce.ModeDebounce ||
				job.Payload != p.Payload || job.TraceParent != trace || string(job.Args) != `{"tenant":7, "id":0}` {
				t.Errorf("%s: forwarded job %+v, want the round %s opened at %v by the first event's args", job.Type, job, d.Round, t0)
			}
			rel := f.start(t, job)
			if rel.Result != debounce.ReleaseReleased || rel.Summary.Events != 3 {
				t.Errorf("%s: Start %+v", job.Type, rel)
			}
			switch job.Type {
			case "last":
				if string(rel.Summary.Payload) != `{"tenant":7, "id":2}` {
					t.Errorf("last: payload %s", rel.Summary.Payload)
				}
			case "acc":
				if got := itemSet(rel.Summary.Items); got != "0 1 2" {
					t.Errorf("acc: items %s", got)
				}
			}
			if n, _ := f.c.DueCount(ctx, job.Type); n != 0 {
				t.Errorf("%s: still listed after the forward", job.Type)
			}
		}
		if rep := f.forward(t); rep.Claimed != 0 || len(f.pub.all()) != 4 {
			t.Errorf("a pass after: %+v, %d jobs", rep, len(f.pub.all()))
		}
	})
}

// An extended round is listed at its first due time; claimed then, it is
// listed again at the later one and forwarded only when that comes. A
// filled round (max items) is due at once. A round cancelled before it is
// due is unlisted and never published.
func TestDeferredExtendFillAndCancel(t *testing.T) {
	t.Parallel()
	deferredBackends(t, func(t *testing.T, b backend) {
		f := newDeferred(t, b,
			debounce.Policy{Type: "ext", Mode: debounce.ModeDebounce, Window: 10 * time.Second, Extend: true, MaxWait: time.Minute, LocalJoins: debounce.LocalJoinsOff},
			debounce.Policy{Type: "fill", Mode: debounce.ModeDebounce, Window: time.Hour, Payload: debounce.PayloadAccumulate, ItemField: "id", MaxItems: 2, KeyFields: []string{"k"}},
			debounce.Policy{Type: "gone", Mode: debounce.ModeDebounce, Window: 10 * time.Second},
		)
		ctx := context.Background()
		t0 := f.clock.Now()
		f.submit(t, "ext", `{"x":1}`)
		f.clock.Advance(8 * time.Second)
		if d := f.submit(t, "ext", `{"x":1}`); d.Outcome != debounce.OutcomeExtended || !d.DueAt.Equal(t0.Add(18*time.Second)) {
			t.Fatalf("extend: %+v", d)
		}
		gone := f.submit(t, "gone", `{"g":1}`)
		if _, res, err := f.c.CancelRound(ctx, "gone", gone.Key, gone.Round); err != nil || res != debounce.CancelCancelled {
			t.Fatal(err)
		}
		f.submit(t, "fill", `{"k":1,"id":1}`)
		if d := f.submit(t, "fill", `{"k":1,"id":2}`); !d.DueAt.Equal(f.clock.Now()) {
			t.Fatalf("filling: due %v, want now %v", d.DueAt, f.clock.Now())
		}
		rep := f.forward(t)
		if rep.Published != 1 || len(f.pub.all()) != 1 || f.pub.all()[0].Type != "fill" || !f.pub.all()[0].DueAt.Equal(f.clock.Now()) {
			t.Fatalf("filled round: %+v %+v, want it forwarded at once", rep, f.pub.all())
		}
		f.clock.Advance(3 * time.Second) // t0+11s: ext listed at +10, due at +18; gone listed at +18-7...
		rep = f.forward(t)
		if rep.Waiting != 1 || rep.Published != 0 {
			t.Fatalf("pass at t0+11s: %+v, want the extended round listed again", rep)
		}
		f.clock.Advance(8 * time.Second) // t0+19s
		rep = f.forward(t)
		if rep.Published != 1 || rep.Gone != 1 {
			t.Fatalf("pass at t0+19s: %+v, want ext published, the cancelled round unlisted", rep)
		}
		jobs := f.pub.all()
		if job := jobs[len(jobs)-1]; job.Type != "ext" || !job.DueAt.Equal(t0.Add(18*time.Second)) || job.Version != 0 {
			t.Fatalf("extended job %+v", job)
		} else if rel := f.start(t, job); rel.Result != debounce.ReleaseReleased || rel.Summary.Events != 2 {
			t.Errorf("ext Start %+v", rel)
		}
	})
}

// Crash window: the producer dies right after the opening's write (its
// process gone, its own forwarder with it). Nothing is left to finish: any
// other process's forwarder publishes the job when due, with its payload.
func TestDeferredOpenerGoneAnotherProcessForwards(t *testing.T) {
	t.Parallel()
	deferredBackends(t, func(t *testing.T, b backend) {
		policies := []debounce.Policy{
			{Type: "last", Mode: debounce.ModeDebounce, Window: 5 * time.Second, Payload: debounce.PayloadLast, KeyFields: []string{"t"}},
			{Type: "acc", Mode: debounce.ModeDebounce, Window: 5 * time.Second, Payload: debounce.PayloadAccumulate, KeyFields: []string{"t"}},
			{Type: "first", Mode: debounce.ModeDebounce, Window: 5 * time.Second, KeyFields: []string{"t"}},
		}
		worker := newDeferred(t, b, policies...) // another process: a worker
		opener, err := debounce.New(debounce.Config{Redis: b.rdb, Publisher: debounce.PublisherFunc(func(context.Context, debounce.Job) error {
			return errors.New("the opener publishes nothing: it is dead")
		}), Policies: policies, Prefix: worker.prefix, Now: worker.clock.Now, Schedules: debounce.SchedulesRedis, Forwarding: debounce.ForwardingOff})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for _, p := range policies {
			for i := range 2 {
				if _, err := opener.Submit(ctx, debounce.Event{Type: p.Type, Args: json.RawMessage(fmt.Sprintf(`{"t":1,"i":%d}`, i))}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := opener.Flush(ctx); err != nil { // a killed opener's local joins are lost; this one only stops
			t.Fatal(err)
		}
		worker.clock.Advance(5 * time.Second)
		if rep := worker.forward(t); rep.Published != 3 {
			t.Fatalf("the worker's forwarder: %+v, want 3", rep)
		}
		for _, job := range worker.pub.all() {
			rel := worker.start(t, job)
			switch {
			case rel.Result != debounce.ReleaseReleased || rel.Summary.Events != 2:
				t.Errorf("%s: %+v", job.Type, rel)
			case job.Type == "last" && string(rel.Summary.Payload) != `{"t":1,"i":1}`,
				job.Type == "acc" && len(rel.Summary.Items) != 2,
				string(job.Args) != `{"t":1,"i":0}`:
				t.Errorf("%s: payload lost: args %s summary %+v", job.Type, job.Args, rel.Summary)
			}
		}
	})
}

// Crash windows of a forwarder: one that dies after its claim (before
// publishing) is taken over once its lease ends; one that dies after
// publishing, before unlisting, has its rounds forwarded again with a new
// version, and of the two messages only the first to start runs (the
// other is superseded).
func TestDeferredForwarderDiesMidway(t *testing.T) {
	t.Parallel()
	deferredBackends(t, func(t *testing.T, b backend) {
		f := newDeferred(t, b,
			debounce.Policy{Type: "packed", Mode: debounce.ModeDebounce, Window: time.Second},
			debounce.Policy{Type: "hash", Mode: debounce.ModeDebounce, Window: time.Second, Payload: debounce.PayloadLast},
		)
		ctx := context.Background()
		for _, typ := range []string{"packed", "hash"} {
			f.submit(t, typ, `{"a":1}`)
		}
		f.clock.Advance(time.Second)

		// Dies after its claim, in its first publish: its goroutine ends
		// there, nothing settled.
		dead := f.c.NewForwarder(debounce.PublisherFunc(func(context.Context, debounce.Job) error {
			runtime.Goexit()
			return nil
		}))
		dead.Lease = 5 * time.Second
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = dead.Pass(ctx)
		}()
		<-done
		rep := f.forward(t)
		if rep.Claimed != 1 || rep.Published != 1 {
			t.Fatalf("within the dead claim's lease: %+v, want only the round it did not claim", rep)
		}
		f.clock.Advance(6 * time.Second)
		rep = f.forward(t)
		if rep.Published != 1 || len(f.pub.all()) != 2 {
			t.Fatalf("after the lease: %+v, want the dead claim's round forwarded", rep)
		}
		first := f.pub.all()
		// Dies after publishing, before unlisting: the rounds are listed as
		// the claim left them (here: listed again by hand), and forwarded again.
		for _, j := range first {
			key := debounce.RoundRedisKey(f.c, j)
			if err := b.rdb.ZAdd(ctx, f.prefix+"due:"+j.Type, redis.Z{Score: 0, Member: key}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if rep := f.forward(t); rep.Published != 2 {
			t.Fatalf("forwarded again: %+v", rep)
		}
		all := f.pub.all()
		for _, j := range first {
			var again debounce.Job
			for _, a := range all[len(first):] {
				if a.Token == j.Token {
					again = a
				}
			}
			if again.Token != j.Token || again.Version == j.Version {
				t.Fatalf("%s: second forward %+v, want the same round with another version than %d", j.Type, again, j.Version)
			}
			if rel := f.start(t, again); rel.Result != debounce.ReleaseReleased {
				t.Errorf("%s: the later message, started first: %s", j.Type, rel.Result)
			}
			if rel := f.start(t, j); rel.Result != debounce.ReleaseSuperseded {
				t.Errorf("%s: the earlier message, started second: %s, want superseded (never two runs)", j.Type, rel.Result)
			}
		}
	})
}

// The reaper leaves a round listed in its due list alone however overdue
// (its forwarder's to publish); once forwarded, a round whose message the
// stream lost is repaired from the identity its opening kept (a packed
// round too, which otherwise keeps none).
func TestDeferredReaper(t *testing.T) {
	t.Parallel()
	deferredBackends(t, func(t *testing.T, b backend) {
		pub := &lostStream{}
		f := newFixtureWith(t, b, func(c *debounce.Config) {
			c.Schedules, c.Forwarding, c.Publisher = debounce.SchedulesRedis, debounce.ForwardingOff, pub
		},
			debounce.Policy{Type: "packed", Mode: debounce.ModeDebounce, Window: time.Second},
			debounce.Policy{Type: "hash", Mode: debounce.ModeDebounce, Window: time.Second, Payload: debounce.PayloadLast},
		)
		f.submit(t, "packed", `{"a":1}`)
		f.submit(t, "hash", `{"a":1}`)
		f.clock.Advance(time.Hour)
		r := f.c.NewReaper()
		r.RepairAfter = time.Minute
		rep, err := r.Pass(context.Background())
		if err != nil || rep.Lookups != 0 || rep.Repaired != 0 || len(pub.all()) != 0 {
			t.Fatalf("listed rounds: %+v %v, %d published; want them left to the forwarder", rep, err, len(pub.all()))
		}
		if rep := f.forward(t); rep.Published != 2 {
			t.Fatalf("forward: %+v", rep)
		}
		// The stream loses both messages (lostStream finds none).
		f.clock.Advance(2 * time.Minute)
		rep, err = r.Pass(context.Background())
		if err != nil || rep.Repaired != 2 {
			t.Fatalf("reaper after the loss: %+v %v, want 2 repaired", rep, err)
		}
		jobs := pub.all()
		for _, j := range jobs[2:] {
			if rel := f.start(t, j); rel.Result != debounce.ReleaseReleased || rel.Summary.Events != 1 {
				t.Errorf("%s: the repaired job: %+v", j.Type, rel)
			}
		}
	})
}

// lostStream is a recorder whose stream has lost every message: a Locator
// that finds none.
type lostStream struct{ recorder }

func (l *lostStream) Pending(context.Context, debounce.Job) (bool, error) { return false, nil }

// A Coalescer forwards the rounds it held in Redis itself (no worker, no
// daemon): its own forwarder runs while rounds wait, on real time.
func TestDeferredOwnForwarder(t *testing.T) {
	t.Parallel()
	rdb := testenv.SharedRedis(t).Client(t)
	pub := &recorder{}
	c, err := debounce.New(debounce.Config{Redis: rdb, Publisher: pub, Prefix: testenv.Prefix(t), Schedules: debounce.SchedulesRedis,
		Policies: []debounce.Policy{{Type: "t", Mode: debounce.ModeDebounce, Window: time.Second, Payload: debounce.PayloadLast}}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Submit(context.Background(), debounce.Event{Type: "t", Args: json.RawMessage(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if len(pub.all()) != 0 {
		t.Fatal("published at the opening")
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(pub.all()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the Coalescer's own forwarder did not publish the round in 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if j := pub.all()[0]; j.Token != d.Round || j.DueAt.Before(d.DueAt) {
		t.Fatalf("published %+v for round %s due %v", j, d.Round, d.DueAt)
	}
	if got := time.Now(); got.Before(d.DueAt) {
		t.Fatalf("published at %v, before its due time %v", got, d.DueAt)
	}
}

// Auto holds rounds in Redis where Redis keeps its data (an append-only
// file), and gives each a JetStream schedule elsewhere (no AOF, miniredis),
// reading the due lists of a single node either way.
func TestDeferredAutoFollowsPersistence(t *testing.T) {
	t.Parallel()
	policy := debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: time.Minute}
	_, mini := testenv.Miniredis(t)
	for _, tc := range []struct {
		name string
		rdb  *redis.Client
		want bool
	}{
		{"aof", testenv.NewRedisWith(t, "--appendonly", "yes").Client(t), true},
		{"none", testenv.SharedRedis(t).Client(t), false},
		{"miniredis", mini, false},
	} {
		pub := &recorder{}
		c, err := debounce.New(debounce.Config{Redis: tc.rdb, Publisher: pub, Prefix: testenv.Prefix(t), Policies: []debounce.Policy{policy}, Forwarding: debounce.ForwardingOff})
		if err != nil {
			t.Fatal(err)
		}
		if !c.Deferred("t") {
			t.Errorf("%s: a single node's due list is not read", tc.name)
		}
		if got := c.HoldsInRedis(context.Background(), "t"); got != tc.want {
			t.Errorf("%s: HoldsInRedis %v, want %v", tc.name, got, tc.want)
		}
		if _, err := c.Submit(context.Background(), debounce.Event{Type: "t", Args: json.RawMessage(`{"a":1}`)}); err != nil {
			t.Fatal(err)
		}
		if published := len(pub.all()) == 1; published == tc.want {
			t.Errorf("%s: published at the opening %v, want %v", tc.name, published, !tc.want)
		}
	}
}

// Schedules "redis" needs a single node; values are checked.
func TestDeferredConfig(t *testing.T) {
	t.Parallel()
	cluster := testenv.SharedCluster(t).Client(t)
	if _, err := debounce.New(debounce.Config{Redis: cluster, Schedules: debounce.SchedulesRedis}); !errors.Is(err, debounce.ErrInvalidConfig) || !strings.Contains(err.Error(), "jetstream") {
		t.Errorf("redis schedules on a Cluster: %v", err)
	}
	c, err := debounce.New(debounce.Config{Redis: cluster, Policies: []debounce.Policy{{Type: "t", Mode: debounce.ModeDebounce, Window: time.Second}}})
	if err != nil || c.Deferred("t") || c.HoldsInRedis(context.Background(), "t") {
		t.Errorf("auto on a Cluster: %v, deferred %v; want JetStream schedules", err, c != nil && c.Deferred("t"))
	}
	_, mc := testenv.Miniredis(t)
	for _, bad := range []debounce.Config{{Redis: mc, Schedules: "nats"}, {Redis: mc, Forwarding: "never"}} {
		if _, err := debounce.New(bad); !errors.Is(err, debounce.ErrInvalidConfig) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	c, err = debounce.New(debounce.Config{Redis: mc, Policies: []debounce.Policy{
		{Type: "d", Mode: debounce.ModeDebounce, Window: time.Second}, {Type: "x", Mode: debounce.ModeDedup}}})
	if err != nil || !c.Deferred("d") || c.Deferred("x") {
		t.Errorf("auto on a single node: %v; want debounce's due list read, dedup's not", err)
	}
}

// With replication acks, a round held in Redis is on the replica when its
// opening answers: the round, its due list entry and (packed) its identity,
// all a forwarder needs after a failover.
func TestDeferredOpeningIsReplicated(t *testing.T) {
	t.Parallel()
	r := newReplicated(t)
	ctx := context.Background()
	prefix := testenv.Prefix(t)
	c, err := debounce.New(debounce.Config{Redis: r.rdb, Publisher: &recorder{}, Prefix: prefix, Schedules: debounce.SchedulesRedis, Forwarding: debounce.ForwardingOff,
		Policies: []debounce.Policy{
			{Type: "packed", Mode: debounce.ModeDebounce, Window: time.Minute, Fail: debounce.FailClosed},
			{Type: "hash", Mode: debounce.ModeDebounce, Window: time.Minute, Payload: debounce.PayloadLast, Fail: debounce.FailClosed},
		}})
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"packed", "hash"} {
		d, err := c.Submit(ctx, debounce.Event{Type: typ, Args: json.RawMessage(`{"n":1}`)})
		if err != nil || d.Outcome != debounce.OutcomeScheduled {
			t.Fatalf("%s: %+v %v", typ, d, err)
		}
		key := debounce.RoundRedisKey(c, debounce.Job{Type: typ, Key: d.Key, Mode: debounce.ModeDebounce, DueAt: d.DueAt})
		if !r.onReplica(t, key, "") {
			t.Errorf("%s: the round is not on the replica when Submit returns", typ)
		}
		if _, err := r.direct.ZScore(ctx, prefix+"due:"+typ, key).Result(); err != nil {
			t.Errorf("%s: its due list entry is not on the replica: %v", typ, err)
		}
		// Packed: its identity, in its identity key (open_packed.lua) or,
		// until its first forward, in its type's hash (idsKey).
		if typ == "packed" && !r.onReplica(t, key+"j", "j") && !r.onReplica(t, prefix+"dueids:"+typ, key) {
			t.Errorf("packed: its identity is not on the replica")
		}
	}
}

// A Coalescer that no longer holds rounds in Redis (auto, after the Redis
// lost its append-only file) still fills a round held earlier: the filling
// event moves it to now in the due list, publishes nothing itself (the
// round is held: its opener published nothing either), and a forwarder
// publishes it with every item.
func TestDeferredFilledByACoalescerThatNoLongerHolds(t *testing.T) {
	t.Parallel()
	rdb := testenv.SharedRedis(t).Client(t) // no append-only file: auto does not hold
	ctx := context.Background()
	prefix := testenv.Prefix(t)
	policy := debounce.Policy{Type: "fill", Mode: debounce.ModeDebounce, Window: time.Hour, Payload: debounce.PayloadAccumulate,
		ItemField: "id", MaxItems: 2, KeyFields: []string{"k"}, LocalJoins: debounce.LocalJoinsOff}
	held := &recorder{}
	a, err := debounce.New(debounce.Config{Redis: rdb, Publisher: held, Prefix: prefix, Policies: []debounce.Policy{policy},
		Schedules: debounce.SchedulesRedis, Forwarding: debounce.ForwardingOff})
	if err != nil {
		t.Fatal(err)
	}
	pub := &recorder{}
	b, err := debounce.New(debounce.Config{Redis: rdb, Publisher: pub, Prefix: prefix, Policies: []debounce.Policy{policy}, Forwarding: debounce.ForwardingOff})
	if err != nil {
		t.Fatal(err)
	}
	if b.HoldsInRedis(ctx, "fill") || !b.Deferred("fill") {
		t.Fatal("auto: want JetStream schedules, its due list still read")
	}
	if _, err := a.Submit(ctx, debounce.Event{Type: "fill", Args: json.RawMessage(`{"k":1,"id":1}`)}); err != nil {
		t.Fatal(err)
	}
	d, err := b.Submit(ctx, debounce.Event{Type: "fill", Args: json.RawMessage(`{"k":1,"id":2}`)})
	if err != nil {
		t.Fatal(err)
	}
	if len(pub.all())+len(held.all()) != 0 {
		t.Fatalf("the filling event published %+v: a held round is its forwarder's", pub.all())
	}
	if due := time.Until(d.DueAt); due > time.Minute {
		t.Fatalf("filled: due in %v, want now", due)
	}
	rep, err := b.NewForwarder(pub).Pass(ctx)
	if err != nil || rep.Published != 1 {
		t.Fatalf("forwarder: %+v %v, want the filled round published", rep, err)
	}
	rel, err := b.Start(ctx, pub.all()[0])
	if err != nil || rel.Result != debounce.ReleaseReleased || len(rel.Summary.Items) != 2 {
		t.Fatalf("start: %+v %v, want both items", rel, err)
	}
}
