package chaos

import (
	"fmt"
	"testing"
	"time"
)

// The checks must be able to fail: each case below plants one violation in
// otherwise clean logs.
func TestCheck(t *testing.T) {
	t.Parallel()
	const sec = int64(time.Second)
	t0 := int64(1_700_000_000) * sec
	ev := func(seq int, typ, key, outcome, round string, sent int64) EventRecord {
		return EventRecord{Seq: int64(seq), EID: fmt.Sprintf("e%d", seq), Type: typ, Key: key, Status: 200,
			Outcome: outcome, Round: round, Sent: sent, Done: sent + int64(time.Millisecond), Events: 1}
	}
	start := func(typ, key, round, release string, at int64, events int) JobStart {
		return JobStart{Type: typ, Key: key, Round: round, Release: release, At: at, Events: events, Attempt: 1}
	}
	// Clean: two rounds of one key, one after the other, and one bypass.
	clean := func() Input {
		return Input{
			Events: []EventRecord{
				ev(1, "fixed", "k1", "scheduled", "a1", t0),
				ev(2, "fixed", "k1", "coalesced", "a1", t0+sec/10),
				ev(3, "fixed", "k1", "scheduled", "a2", t0+2*sec),
				{Seq: 4, EID: "e4", Type: "fixed", Key: "k2", Status: 200, Outcome: "bypassed", Sent: t0, Done: t0 + 1},
				{Seq: 5, EID: "e5", Type: "fixed", Key: "k2", Status: 503, Sent: t0, Done: t0 + 1},
			},
			Starts: []JobStart{
				start("fixed", "k1", "a1", "released", t0+sec+sec/10, 2),
				start("fixed", "k1", "a2", "released", t0+3*sec, 1),
				{Type: "fixed", Key: "k2", Release: "skipped", At: t0 + sec, EID: "e4"},
			},
		}
	}
	cases := []struct {
		name                      string
		mutate                    func(in *Input)
		lost, dups, fence, unexpl int
	}{
		{"clean", func(*Input) {}, 0, 0, 0, 0},
		{"round never started", func(in *Input) { in.Starts = in.Starts[1:] }, 2, 1, 0, 0},
		{"start before the event", func(in *Input) { in.Starts[0].At = t0 + sec/20 }, 1, 0, 0, 0},
		{"bypass not run", func(in *Input) { in.Starts = in.Starts[:2] }, 1, 0, 0, 0},
		{"same token on another key does not cover", func(in *Input) { in.Starts[1].Key = "k9" }, 1, 0, 0, 0},
		{"released with fewer events", func(in *Input) { in.Starts[0].Events = 1 }, 0, 0, 1, 0},
		// A local join waits for its flush from its answer on: answered 0.1 s
		// before its producer's SIGKILL (asked 0.6 s before, a slow answer
		// under load), its count may be missing; answered 0.4 s before, not.
		{"fewer events, a local join answered just before its producer's kill", func(in *Input) {
			kill := in.Events[1].Sent + 600*int64(time.Millisecond)
			in.Events[1].Done = kill - 100*int64(time.Millisecond)
			in.ProducerKills = []Kill{{Producer: 0, At: kill}}
			in.Starts[0].Events = 1
		}, 0, 0, 0, 0},
		{"fewer events, a local join answered long before its producer's kill", func(in *Input) {
			kill := in.Events[1].Sent + 600*int64(time.Millisecond)
			in.Events[1].Done = kill - 400*int64(time.Millisecond)
			in.ProducerKills = []Kill{{Producer: 0, At: kill}}
			in.Starts[0].Events = 1
		}, 0, 0, 1, 0},
		{"second round while the first is pending, first found missing", func(in *Input) {
			in.Starts[0].At, in.Starts[0].Release = t0+4*sec, "missing"
		}, 0, 1, 0, 0},
		{"second round while the first is pending, first released intact: not a duplicate", func(in *Input) {
			in.Starts[0].At = t0 + 4*sec
		}, 0, 0, 0, 0},
		{"second round while the first is pending, first skipped: unexplained", func(in *Input) {
			in.Starts[0].At, in.Starts[0].Release = t0+4*sec, "skipped"
		}, 0, 1, 0, 1},
		{"second round after a redis restart", func(in *Input) {
			in.Starts[0].At, in.Starts[0].Release = t0+4*sec, "stale_token"
			in.RedisLoss = []Interval{{From: t0 + sec, To: t0 + sec + sec/10}}
		}, 0, 1, 0, 0},
		{"round held in Redis, Redis restarted empty before it was due: still lost without HeldInRedis", func(in *Input) {
			in.Starts = in.Starts[1:]
			in.Events[0].DueAt, in.Events[1].DueAt = t0/1e6+1000, t0/1e6+1000
			in.RedisLoss = []Interval{{From: t0 + sec/2, To: t0 + sec/2 + 1}}
		}, 2, 1, 0, 0},
		{"round held in Redis, Redis restarted empty before it was due: explained", func(in *Input) {
			in.Starts = in.Starts[1:]
			in.Events[0].DueAt, in.Events[1].DueAt = t0/1e6+1000, t0/1e6+1000
			in.RedisLoss = []Interval{{From: t0 + sec/2, To: t0 + sec/2 + 1}}
			in.HeldInRedis = true
		}, 0, 1, 0, 0},
		{"round held in Redis, restarted empty while it was open: a later local join's loss explained", func(in *Input) {
			in.Starts = in.Starts[1:]
			in.Events[0].DueAt, in.Events[1].DueAt = t0/1e6+1000, t0/1e6+1000
			in.Events[1].Sent = t0 + sec/2 + sec/10 // after the restart: answered locally
			in.RedisLoss = []Interval{{From: t0 + sec/4, To: t0 + sec/2}}
			in.HeldInRedis = true
		}, 0, 1, 0, 0},
		{"round held in Redis, opened while the replica lagged, failover without acks: explained", func(in *Input) {
			in.Starts = in.Starts[1:]
			in.Events[0].DueAt, in.Events[1].DueAt = t0/1e6+1000, t0/1e6+1000
			in.FailoverLoss = []Interval{{From: t0 - sec/2, To: t0 + sec/2}}
			in.HeldInRedis = true
		}, 0, 1, 0, 0},
		{"round held in Redis, opened before the replica lagged, failover without acks: lost", func(in *Input) {
			in.Starts = in.Starts[1:]
			in.Events[0].DueAt, in.Events[1].DueAt = t0/1e6+1000, t0/1e6+1000
			in.FailoverLoss = []Interval{{From: t0 + sec/10, To: t0 + sec/2}}
			in.HeldInRedis = true
		}, 1, 1, 0, 0}, // the opening: the replica had it; the join sent in the interval is explained as before
		{"round held in Redis, Redis restarted long after it was due: lost", func(in *Input) {
			in.Starts = in.Starts[1:]
			in.Events[0].DueAt, in.Events[1].DueAt = t0/1e6+1000, t0/1e6+1000
			in.RedisLoss = []Interval{{From: t0 + 60*sec, To: t0 + 60*sec + 1}}
			in.HeldInRedis = true
		}, 2, 1, 0, 0},
		{"throttle windows overlapping", func(in *Input) {
			in.Throttle = map[string]time.Duration{"throttle": 2 * time.Second}
			w1 := uint64(t0/1e6+2000)<<14 | 5
			w2 := uint64(t0/1e6+2500)<<14 | 7
			in.Events = append(in.Events,
				ev(10, "throttle", "k3", "published", fmt.Sprintf("%016x", w1), t0),
				ev(11, "throttle", "k3", "published", fmt.Sprintf("%016x", w2), t0+sec/2))
			in.Starts = append(in.Starts,
				start("throttle", "k3", fmt.Sprintf("%016x", w1), "skipped", t0+sec/100, 1),
				start("throttle", "k3", fmt.Sprintf("%016x", w2), "skipped", t0+sec/2+sec/100, 1))
		}, 0, 1, 0, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			in := clean()
			c.mutate(&in)
			r := Check(in)
			unexpl := r.DupCauses[CauseUnexplain] + r.DupCauses["throttle window: "+CauseUnexplain]
			if r.Lost != c.lost || r.Dups != c.dups || r.Fencing != c.fence || unexpl != c.unexpl {
				t.Errorf("lost %d dups %d (%v) fencing %d unexplained %d; want %d %d %d %d\n%v\n%v\n%v",
					r.Lost, r.Dups, r.DupCauses, r.Fencing, unexpl, c.lost, c.dups, c.fence, c.unexpl, r.LostDetail, r.DupDetail, r.FenceDtl)
			}
			if r.Accepted != len(in.Events)-1 {
				t.Errorf("accepted %d, want %d", r.Accepted, len(in.Events)-1)
			}
		})
	}
}

// TestCheckPayloads plants payload-level violations: an accumulate item in no
// job, a payload-last job carrying an event older than one accepted after
// it, and summary counts that match nothing; and checks the documented
// causes are counted apart.
func TestCheckPayloads(t *testing.T) {
	t.Parallel()
	const sec = int64(time.Second)
	t0 := int64(1_700_000_000) * sec
	ev := func(seq int, typ, outcome string, sent int64, id int) EventRecord {
		return EventRecord{Seq: int64(seq), EID: fmt.Sprintf("e%d", seq), Type: typ, Tenant: "t1", Key: "k-" + typ, Status: 200,
			Outcome: outcome, Round: "r-" + typ, Sent: sent, Done: sent + int64(time.Millisecond), ID: id, Events: 1}
	}
	clean := func() Input {
		return Input{
			Accumulate: map[string]bool{"accum": true}, Last: map[string]bool{"extend": true},
			Events: []EventRecord{
				ev(1, "accum", "scheduled", t0, 7),
				ev(2, "accum", "coalesced", t0+sec/10, 8),
				ev(3, "accum", "coalesced", t0+sec/5, 7),
				ev(4, "extend", "scheduled", t0, 0),
				ev(5, "extend", "extended", t0+sec/2, 0),
			},
			Starts: []JobStart{
				{Type: "accum", Key: "k-accum", Round: "r-accum", Release: "released", At: t0 + sec, Events: 3, ItemList: []string{"7", "8"}},
				{Type: "extend", Key: "k-extend", Round: "r-extend", Release: "released", At: t0 + 2*sec, Events: 2, PayloadEID: "e5"},
			},
		}
	}
	cases := []struct {
		name   string
		mutate func(in *Input)
		lost   int
		causes map[string]int
		off    int
	}{
		{"clean", func(*Input) {}, 0, nil, 0},
		{"item missing", func(in *Input) { in.Starts[0].ItemList = []string{"7"} }, 1, map[string]int{CauseUnexplain: 1}, 0},
		{"item missing after a redis restart", func(in *Input) {
			in.Starts[0].ItemList = []string{"7"}
			in.RedisLoss = []Interval{{From: t0 + sec/2, To: t0 + sec/2 + 1}}
		}, 1, map[string]int{CauseRedisLoss: 1}, 0},
		{"item missing, answered in the 2 s before a kill of a Redis holding writes outside its AOF", func(in *Input) {
			in.Starts[0].ItemList = []string{"7"}
			in.AOFLoss = []Interval{{From: t0 + sec/2 - 2*sec, To: t0 + sec/2}}
		}, 1, map[string]int{CauseAOFPostponed: 1}, 0},
		{"item missing, the AOF kill long after the round was taken", func(in *Input) {
			in.Starts[0].ItemList = []string{"7"}
			in.AOFLoss = []Interval{{From: t0 + 3*sec, To: t0 + 5*sec}}
		}, 1, map[string]int{CauseUnexplain: 1}, 0},
		{"item missing after an embedded kill", func(in *Input) {
			in.Starts[0].ItemList = []string{"7"}
			in.SnapshotLoss = []Interval{{From: t0, To: t0 + sec/2}}
		}, 1, map[string]int{CauseSnapshot: 1}, 0},
		{"item missing, answered before the killed daemon's snapshot was taken", func(in *Input) {
			in.Starts[0].ItemList = []string{"7"}
			in.SnapshotLoss = []Interval{{From: t0 + sec/5, To: t0 + sec/2}}
		}, 1, map[string]int{CauseUnexplain: 1}, 0},
		{"item missing, sent before the snapshot was taken and answered after", func(in *Input) {
			in.Starts[0].ItemList = []string{"7"}
			in.SnapshotLoss = []Interval{{From: t0 + sec/10 + 1, To: t0 + sec/2}}
		}, 1, map[string]int{CauseSnapshot: 1}, 0},
		{"stale last", func(in *Input) { in.Starts[1].PayloadEID = "e4" }, 1, map[string]int{CauseUnexplain: 1}, 0},
		{"last from another round", func(in *Input) { in.Starts[1].PayloadEID = "e2" }, 1, map[string]int{CauseUnexplain: 1}, 0},
		{"count too high", func(in *Input) { in.Starts[0].Events = 5 }, 0, nil, 1},
		{"count too high, explained by an unanswered request", func(in *Input) {
			in.Starts[0].Events = 4
			in.Events = append(in.Events, EventRecord{Seq: 9, EID: "e9", Type: "accum", Tenant: "t1", Sent: t0 + sec/3, Done: t0 + sec/3 + 1})
		}, 0, nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			in := clean()
			c.mutate(&in)
			r := Check(in)
			if r.PayloadLost != c.lost || r.CountOff != c.off || len(r.PayloadCauses) != len(c.causes) {
				t.Fatalf("payload lost %d (%v) counts off %d; want %d %v %d\n%v\n%v", r.PayloadLost, r.PayloadCauses, r.CountOff, c.lost, c.causes, c.off, r.PayloadDetail, r.CountDetail)
			}
			for k, v := range c.causes {
				if r.PayloadCauses[k] != v {
					t.Errorf("cause %q: %d, want %d (%v)", k, r.PayloadCauses[k], v, r.PayloadCauses)
				}
			}
			if c.name == "clean" && (r.PayloadItems != 3 || r.PayloadLast != 1 || r.CountExact != 2) {
				t.Errorf("clean: %d items reached, %d last rounds checked, %d exact counts; want 3, 1, 2", r.PayloadItems, r.PayloadLast, r.CountExact)
			}
		})
	}
}

// TestOverlaps: two jobs of an exclusive key whose handlers ran at once are
// an overlap, explained when the later one started within a Redis data loss
// (plus a lease); a job with no end line (its worker killed) and the jobs
// of other types are left out.
func TestOverlaps(t *testing.T) {
	const sec = int64(time.Second)
	job := func(w string, key string, at int64) JobStart {
		return JobStart{Worker: w, PID: 1, Type: "excl", Key: key, Round: w, Attempt: 1, At: at}
	}
	end := func(j JobStart, at int64) JobStart { j.End = at; return j }
	a, b, c := job("a", "k1", 0), job("b", "k1", 2*sec), job("c", "k1", 3*sec)
	d, e := job("d", "k2", 0), job("e", "k2", sec/2)
	killed := job("f", "k2", sec/4)
	other := JobStart{Worker: "g", PID: 1, Type: "fixed", Key: "k1", At: sec}
	starts := []JobStart{a, b, c, d, e, killed, other}
	ends := []JobStart{end(a, sec), end(b, 4*sec), end(c, 5*sec), end(d, sec), end(e, sec), end(other, 9*sec)}
	checked, un, ex, detail := Overlaps(starts, ends, map[string]bool{"excl": true}, nil, 2*time.Second)
	if checked != 5 || un != 2 || ex != 0 {
		t.Errorf("checked %d, unexplained %d, explained %d (%v); want 5, 2 (b-c, d-e), 0", checked, un, ex, detail)
	}
	_, un, ex, _ = Overlaps(starts, ends, map[string]bool{"excl": true}, []Interval{{From: 2 * sec, To: 2*sec + sec/2}}, 2*time.Second)
	if un != 1 || ex != 1 {
		t.Errorf("with a Redis loss at 2 s: unexplained %d, explained %d; want 1 (d-e) and 1 (b-c)", un, ex)
	}
}
