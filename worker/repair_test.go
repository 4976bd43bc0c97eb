package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/worker"
)

// repairPolicies: one of each kind of round a job releases. The tests give
// the reaper a one-second RepairAfter, so rounds are overdue quickly.
var repairPolicies = []debounce.Policy{
	{Type: "fixed", Mode: debounce.ModeDebounce, Window: time.Second, KeyFields: []string{"tenant"}},
	{Type: "accum", Mode: debounce.ModeDebounce, Window: time.Second, Payload: debounce.PayloadAccumulate, ItemField: "id", KeyFields: []string{"tenant"}},
	{Type: "dedup", Mode: debounce.ModeDedup, KeyFields: []string{"tenant"}},
	{Type: "trailing", Mode: debounce.ModeThrottle, Window: time.Second, Trailing: true, KeyFields: []string{"tenant"}},
}

func repairTypes() []string {
	var out []string
	for _, p := range repairPolicies {
		out = append(out, p.Type)
	}
	return out
}

// redisBackends are the real servers the repair tests run on: a node and a
// Cluster (identity keys share their round's hash tag).
func redisBackends(t *testing.T) map[string]redis.UniversalClient {
	return map[string]redis.UniversalClient{
		"redis":   testenv.SharedRedis(t).Client(t),
		"cluster": testenv.SharedCluster(t).Client(t),
	}
}

// TestReaperRepairsRoundsTheStreamLost: the stream loses the jobs of pending
// rounds (a purge, as an operator's `nats stream purge` or a lost store
// would). Those rounds must not take in events for a job that never runs:
// the reaper finds them overdue with no message, publishes their jobs again,
// and the jobs carry every accepted event and item. A packed round needs an
// event after it went overdue to have its identity kept; one that got none
// cannot be rebuilt (its args were in the lost message only) and is left.
func TestReaperRepairsRoundsTheStreamLost(t *testing.T) {
	t.Parallel()
	for name, rdb := range redisBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newStackWith(t, testenv.NATS(t), rdb, jetStreamSchedules, repairPolicies...)
			for _, typ := range repairTypes() {
				for i := range 3 {
					s.submit(t, typ, fmt.Sprintf(`{"tenant":"a","id":%d}`, i))
				}
			}
			s.submit(t, "fixed", `{"tenant":"nobody-joins","id":9}`)
			// The schedules fire (due after 1 s) and the stream then loses
			// every job before a worker takes one.
			time.Sleep(1500 * time.Millisecond)
			stream, err := s.js.Stream(context.Background(), s.pub.Stream())
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, 5*time.Second, "the schedules to fire", func() bool {
				info, err := stream.Info(context.Background(), jetstream.WithSubjectFilter("co.sched.>"))
				return err == nil && len(info.State.Subjects) == 0
			})
			if err := stream.Purge(context.Background()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // RepairAfter past the due times
			// One more event per packed round: it finds the round overdue and
			// keeps its identity (for throttle, both events join the trailing
			// round: the window stays closed until its trailing job starts).
			// The accumulate round has kept its own since it opened.
			for _, typ := range []string{"fixed", "dedup", "trailing", "trailing"} {
				s.submit(t, typ, `{"tenant":"a","id":3}`)
			}
			r := s.co.NewReaper()
			r.RepairAfter = time.Second
			first, err := r.Pass(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if first.Missing != 4 || first.Repaired != 4 {
				t.Fatalf("first pass %+v: want the 4 rounds found missing and repaired", first)
			}
			var got started
			s.run(t, got.handler, worker.Config{Types: repairTypes(), Concurrency: 8})
			count := func() int { j, _ := got.snapshot(); return len(j) }
			waitFor(t, 10*time.Second, "the 4 repaired jobs", func() bool { return count() >= 4 })
			quiet(t, time.Second, "jobs", count)
			jobs, _ := got.snapshot()
			want := map[string]int{"fixed": 4, "accum": 3, "dedup": 4, "trailing": 4} // trailing: events 1, 2 and the two late joins
			for _, j := range jobs {
				if j.Type == "trailing" && j.Immediate() {
					t.Errorf("a leading job ran while the window's trailing job had not started")
					continue
				}
				if j.Release != debounce.ReleaseReleased || j.Summary.Events != want[j.Type] {
					t.Errorf("%s: repaired job started with %s, %d events; want released with %d", j.Type, j.Release, j.Summary.Events, want[j.Type])
				}
				if j.Type == "accum" && len(j.Summary.Items) != 3 {
					t.Errorf("accum: %d items, want 3 (%s)", len(j.Summary.Items), j.Summary.Items)
				}
				if j.Version < 1 {
					t.Errorf("%s: repaired job has version %d, want a new one", j.Type, j.Version)
				}
				delete(want, j.Type)
			}
			if len(want) != 0 {
				t.Errorf("no repaired job for %v", want)
			}
			// Nothing joined the other round since its message was lost: it
			// has no identity and stays (documented), so no job for it.
			if third, err := r.Pass(context.Background()); err != nil || third.Repaired != 0 {
				t.Errorf("third pass %+v %v: nothing left to repair", third, err)
			}
		})
	}
}

// TestReaperLeavesQueuedJobsAlone: with the workers away, every round goes
// overdue while its job waits in the stream. The reaper looks and leaves
// them: when the workers come back, each round runs once, with all its data.
func TestReaperLeavesQueuedJobsAlone(t *testing.T) {
	t.Parallel()
	s := newStackWith(t, testenv.NATS(t), testenv.SharedRedis(t).Client(t), jetStreamSchedules, repairPolicies...)
	for _, typ := range repairTypes() {
		for i := range 3 {
			s.submit(t, typ, fmt.Sprintf(`{"tenant":"b","id":%d}`, i))
		}
	}
	time.Sleep(2500 * time.Millisecond) // due, fired, and RepairAfter past
	for _, typ := range append(repairTypes(), "trailing") {
		s.submit(t, typ, `{"tenant":"b","id":3}`) // overdue joins: identities kept (throttle: both join the trailing round)
	}
	r := s.co.NewReaper()
	r.RepairAfter = time.Second
	for pass := range 3 {
		rep, err := r.Pass(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if rep.Repaired != 0 || rep.Missing != 0 {
			t.Fatalf("pass %d: %+v: a queued job was taken for lost", pass, rep)
		}
		if pass == 0 && (rep.Overdue != 4 || rep.Lookups != 4) {
			t.Fatalf("pass 0: %+v: want the 4 overdue rounds looked up", rep)
		}
	}
	var got started
	s.run(t, got.handler, worker.Config{Types: repairTypes(), Concurrency: 8})
	count := func() int { j, _ := got.snapshot(); return len(j) }
	waitFor(t, 10*time.Second, "4 jobs and the leading one", func() bool { return count() >= 5 })
	quiet(t, 1500*time.Millisecond, "jobs", count)
	jobs, _ := got.snapshot()
	// The trailing round took both late events: its window stays closed
	// until its job starts, so neither ran a leading job.
	want := map[string]int{"fixed": 4, "accum": 4, "dedup": 4, "trailing": 4}
	for _, j := range jobs {
		if j.Type == "trailing" && j.Immediate() {
			continue // the window's leading job
		}
		if j.Summary.Events != want[j.Type] || j.Release != debounce.ReleaseReleased {
			t.Errorf("%s: %s with %d events, want released with %d", j.Type, j.Release, j.Summary.Events, want[j.Type])
		}
		if j.Type == "accum" && len(j.Summary.Items) != 4 {
			t.Errorf("accum: %d items, want 4", len(j.Summary.Items))
		}
		delete(want, j.Type)
	}
	if len(want) != 0 {
		t.Errorf("no job for %v", want)
	}
}

// unmark clears the published mark of every round under prefix, as a
// producer that published a round and could not mark it leaves it.
func unmark(t *testing.T, rdb redis.UniversalClient, prefix string) int {
	t.Helper()
	ctx := context.Background()
	var n atomic.Int64 // ForEachMaster scans the masters concurrently
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, prefix+"{*", 100).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			if strings.HasSuffix(k, "j") || strings.Contains(k[len(prefix):], "}x") || strings.Contains(k[len(prefix):], "}tx") {
				continue
			}
			switch c.Type(ctx, k).Val() {
			case "string":
				v, _ := c.Get(ctx, k).Uint64()
				if v&(1<<38) != 0 {
					c.DecrBy(ctx, k, 1<<38)
					n.Add(1)
				}
			case "hash":
				if c.HGet(ctx, k, "p").Val() == "1" {
					c.HSet(ctx, k, "p", 0)
					n.Add(1)
				}
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return scan(ctx, m) })
	} else {
		err = scan(ctx, rdb)
	}
	if err != nil {
		t.Fatal(err)
	}
	return int(n.Load())
}

// TestReaperMarksPublishedRounds: a producer that published a round and
// died (or lost Redis) before marking it leaves it unpublished in Redis with
// its job in the stream. The reaper must not release it as stranded (its job
// would start 'missing' and the next event open a second round): it finds
// the message, by identity for a hash round and by type and token for a
// packed one, and marks it published.
func TestReaperMarksPublishedRounds(t *testing.T) {
	t.Parallel()
	for name, rdb := range redisBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			prefix := testenv.Prefix(t)
			s := newStackWith(t, testenv.NATS(t), rdb, func(c *debounce.Config) { c.Prefix, c.Schedules = prefix, debounce.SchedulesJetStream }, repairPolicies...)
			for _, typ := range repairTypes() {
				for i := range 2 {
					s.submit(t, typ, fmt.Sprintf(`{"tenant":"m","id":%d}`, i))
				}
			}
			// A locally joined second event reaches its round in a flush
			// that could land between the two passes (a loaded machine):
			// its count changes the round, which the second pass then sees
			// as changed, not unchanged. Flush first.
			if err := s.co.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := unmark(t, rdb, prefix); n != 5 {
				t.Fatalf("unmarked %d keys, want the 4 rounds and the throttle window", n)
			}
			r := s.co.NewReaper()
			r.UnpublishedAfter = 0
			rep, err := r.Pass(context.Background())
			if err != nil || rep.Candidates != 5 {
				t.Fatalf("first pass %+v %v: want 5 candidates", rep, err)
			}
			if rep, err = r.Pass(context.Background()); err != nil || rep.Marked != 5 || rep.Released != 0 {
				t.Fatalf("second pass %+v %v: want the 5 marked published, none released", rep, err)
			}
			var got started
			s.run(t, got.handler, worker.Config{Types: repairTypes(), Concurrency: 8})
			count := func() int { j, _ := got.snapshot(); return len(j) }
			waitFor(t, 10*time.Second, "4 jobs and the leading one", func() bool { return count() >= 5 })
			quiet(t, time.Second, "jobs", count)
			jobs, _ := got.snapshot()
			for _, j := range jobs {
				if j.Type == "trailing" && j.Immediate() {
					continue
				}
				want := 2
				if j.Type == "trailing" {
					want = 1
				}
				if j.Release != debounce.ReleaseReleased || j.Summary.Events != want {
					t.Errorf("%s: %s with %d events; want released with %d (the reaper released a published round)", j.Type, j.Release, j.Summary.Events, want)
				}
			}
		})
	}
}

// jetStreamSchedules gives rounds a JetStream schedule each: the reaper's
// repairs of lost schedules and jobs are about them (a round held in Redis
// is forwarded when due: debounce's deferred tests).
func jetStreamSchedules(c *debounce.Config) { c.Schedules = debounce.SchedulesJetStream }
