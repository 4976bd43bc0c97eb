package debounce_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
)

// Rounds held in Redis until due, with replica acks, survive a promotion:
// every opening and join accepted (many at once, so that concurrent
// decisions share script calls) is on the replica when Submit returns, so
// a forwarder on the promoted replica publishes each accepted round once,
// with every accepted item. With acks off and the link held back, the
// promoted replica lacks rounds whose openings were accepted (what the
// acks are for: the test can fail).
func TestDeferredSurvivesAPromotion(t *testing.T) {
	t.Parallel()
	for _, acks := range []int{debounce.ReplicationOff, 1} {
		t.Run(fmt.Sprintf("acks=%d", acks), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			r := newReplicated(t)
			prefix := testenv.Prefix(t)
			policies := []debounce.Policy{
				{Type: "cold", Mode: debounce.ModeDebounce, Window: time.Second, KeyFields: []string{"tenant"}, Fail: debounce.FailClosed},
				{Type: "acc", Mode: debounce.ModeDebounce, Window: time.Second, Payload: debounce.PayloadAccumulate, ItemField: "id",
					KeyFields: []string{"tenant"}, Fail: debounce.FailClosed, LocalJoins: debounce.LocalJoinsOff},
			}
			c, err := debounce.New(debounce.Config{Redis: r.rdb, Publisher: &recorder{}, Prefix: prefix, Policies: policies,
				Schedules: debounce.SchedulesRedis, Forwarding: debounce.ForwardingOff,
				Replication: debounce.Replication{Acks: acks, Timeout: 200 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			coldOK := map[string]bool{} // accepted cold openings, by round key
			var itemsOK []string        // accepted accumulate items
			submitAll := func(from, to int) {
				var wg sync.WaitGroup
				for i := from; i < to; i++ {
					wg.Go(func() {
						d, err := c.Submit(ctx, debounce.Event{Type: "cold", Args: json.RawMessage(fmt.Sprintf(`{"tenant":%d}`, i))})
						if err == nil {
							mu.Lock()
							coldOK[d.Key.String()] = true
							mu.Unlock()
						}
					})
					wg.Go(func() {
						_, err := c.Submit(ctx, debounce.Event{Type: "acc", Args: json.RawMessage(fmt.Sprintf(`{"tenant":1,"id":%d}`, i))})
						if err == nil {
							mu.Lock()
							itemsOK = append(itemsOK, fmt.Sprint(i))
							mu.Unlock()
						}
					})
				}
				wg.Wait()
			}
			submitAll(0, 20)
			r.primary.HoldReplicas(true)
			submitAll(20, 40)
			// The primary dies with what it held; the replica is promoted.
			r.primary.Front.DropAll()
			r.primary.Stop()
			if err := r.direct.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
				t.Fatal(err)
			}

			// A forwarder on the promoted replica publishes what it holds.
			pub := &recorder{}
			c2, err := debounce.New(debounce.Config{Redis: r.direct, Publisher: pub, Prefix: prefix, Policies: policies,
				Schedules: debounce.SchedulesRedis, Forwarding: debounce.ForwardingOff, Replication: debounce.Replication{Acks: debounce.ReplicationOff}})
			if err != nil {
				t.Fatal(err)
			}
			fwd := c2.NewForwarder(nil)
			deadline := time.Now().Add(30 * time.Second)
			for {
				if _, err := fwd.Pass(ctx); err != nil {
					t.Fatal(err)
				}
				n1, _ := c2.DueCount(ctx, "cold")
				n2, _ := c2.DueCount(ctx, "acc")
				if n1+n2 == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("rounds still listed after 30s: cold %d acc %d", n1, n2)
				}
				time.Sleep(100 * time.Millisecond)
			}
			perKey := map[string]int{}
			var accJobs []debounce.Job
			for _, j := range pub.distinct() {
				switch j.Type {
				case "cold":
					perKey[j.Key.String()]++
				case "acc":
					accJobs = append(accJobs, j)
				}
			}
			var lostCold []string
			for k := range coldOK {
				if perKey[k] == 0 {
					lostCold = append(lostCold, k)
				}
			}
			for k, n := range perKey {
				if n > 1 {
					t.Errorf("cold %s: %d jobs, want one", k, n)
				}
			}
			// The accumulate round: its job, started on the new primary,
			// carries the accepted items.
			var got []string
			for _, j := range accJobs {
				rel, err := c2.Start(ctx, j)
				if err != nil {
					t.Fatal(err)
				}
				for _, it := range rel.Summary.Items {
					got = append(got, string(it))
				}
			}
			have := map[string]bool{}
			for _, g := range got {
				have[g] = true
			}
			var lostItems []string
			for _, id := range itemsOK {
				if !have[id] {
					lostItems = append(lostItems, id)
				}
			}
			sort.Strings(lostItems)
			switch {
			case acks == debounce.ReplicationOff && len(lostCold)+len(lostItems) == 0:
				t.Fatalf("acks off: nothing lost (%d cold rounds, %d items accepted): the link was not held back, the test shows nothing", len(coldOK), len(itemsOK))
			case acks > 0 && (len(lostCold) > 0 || len(lostItems) > 0):
				t.Fatalf("acks on: accepted rounds without a job %v, accepted items missing %v", lostCold, lostItems)
			case acks > 0 && (len(coldOK) != 20 || len(itemsOK) != 20):
				t.Fatalf("acks on, link held: accepted %d cold openings and %d items, want the 20 and 20 before the hold", len(coldOK), len(itemsOK))
			case acks > 0 && len(accJobs) != 1:
				t.Fatalf("acks on: %d accumulate jobs, want 1", len(accJobs))
			}
		})
	}
}

// A forward whose version the replicas did not confirm is not published:
// a failover that lost the version would forward the round again under a
// version whose message already ran. It is tried again once the replica
// has it.
func TestDeferredForwardWaitsForTheReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newReplicated(t)
	pub := &recorder{}
	c, err := debounce.New(debounce.Config{Redis: r.rdb, Publisher: pub, Prefix: testenv.Prefix(t),
		Schedules: debounce.SchedulesRedis, Forwarding: debounce.ForwardingOff,
		Replication: debounce.Replication{Acks: 1, Timeout: 200 * time.Millisecond},
		Policies: []debounce.Policy{
			{Type: "packed", Mode: debounce.ModeDebounce, Window: time.Second},
			{Type: "hash", Mode: debounce.ModeDebounce, Window: time.Second, Payload: debounce.PayloadLast},
		}})
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"packed", "hash"} {
		if _, err := c.Submit(ctx, debounce.Event{Type: typ, Args: json.RawMessage(`{"a":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	fwd := c.NewForwarder(nil)
	fwd.Lease = time.Second
	deadline := time.Now().Add(20 * time.Second)
	for {
		n1, _ := c.DueCount(ctx, "packed")
		if n1 == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("rounds not listed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(1100 * time.Millisecond) // due (the outcome, not the speed, is checked below)
	r.primary.HoldReplicas(true)
	rep, _ := fwd.Pass(ctx)
	if rep.Published != 0 || len(pub.all()) != 0 {
		t.Fatalf("replica held back: %+v, %d published; want nothing published", rep, len(pub.all()))
	}
	if rep.Failed != 2 {
		t.Fatalf("replica held back: %+v, want both rounds tried again later", rep)
	}
	r.primary.HoldReplicas(false)
	for len(pub.all()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("not forwarded once the replica is back: %d published", len(pub.all()))
		}
		if _, err := fwd.Pass(ctx); err != nil {
			t.Logf("pass: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, j := range pub.all() {
		if rel, err := c.Start(ctx, j); err != nil || rel.Result != debounce.ReleaseReleased {
			t.Errorf("%s: start %+v %v", j.Type, rel, err)
		}
	}
}
