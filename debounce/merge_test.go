package debounce_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
)

// submitBatch submits the events at once, held in f's batch queue until
// every one waits there (HoldBatch): they go to Redis in one pipeline.
func (f *fixture) submitBatch(t *testing.T, events []debounce.Event) ([]debounce.Decision, []error) {
	t.Helper()
	queued, release := debounce.HoldBatch(f.c)
	got := make([]debounce.Decision, len(events))
	errs := make([]error, len(events))
	var wg sync.WaitGroup
	for i, e := range events {
		wg.Go(func() { got[i], errs[i] = f.c.Submit(context.Background(), e) })
	}
	if !queued(len(events)) {
		release()
		wg.Wait()
		t.Fatal("the events never all waited in the batch queue")
	}
	release()
	wg.Wait()
	return got, errs
}

// TestJoinsOfABatchShareOneCall: hash-layout joins (payload last and
// accumulate) that meet in one pipeline are decided by one script call per
// policy (merge.go, join_many.lua), each with the decision it would have
// had alone, in the order they came: counts go up one by one, a key with
// no round is opened by its own second call, and each job runs with the
// args of its round's latest event or every distinct item. With rounds held
// in Redis and with JetStream schedules.
func TestJoinsOfABatchShareOneCall(t *testing.T) {
	t.Parallel()
	last := debounce.Policy{Type: "last", Mode: debounce.ModeDebounce, Window: 10 * time.Second, Payload: debounce.PayloadLast, KeyFields: []string{"t"}, LocalJoins: debounce.LocalJoinsOff}
	acc := debounce.Policy{Type: "acc", Mode: debounce.ModeDebounce, Window: 10 * time.Second, Payload: debounce.PayloadAccumulate, ItemField: "i", KeyFields: []string{"t"}, LocalJoins: debounce.LocalJoinsOff}
	for _, held := range []bool{true, false} {
		t.Run(fmt.Sprintf("held=%v", held), func(t *testing.T) {
			t.Parallel()
			backends := deferredBackends
			if !held {
				backends = eachBackend // the embedded store's and the simulator's too
			}
			backends(t, func(t *testing.T, b backend) {
				f := newFixture(t, b, last, acc)
				if held {
					f = heldFixture(t, b, last, acc)
				}
				ctx := context.Background()
				ev := func(typ string, k, i int) debounce.Event {
					return debounce.Event{Type: typ, Args: json.RawMessage(fmt.Sprintf(`{"t":%d,"i":%d}`, k, i))}
				}
				// Open keys 1 and 2 of each type, and join them until joins
				// go first (join_round.lua; a new type's first events open).
				for i := 0; !debounce.JoinsFirst(f.c, "last") || !debounce.JoinsFirst(f.c, "acc"); i++ {
					if i == 50 {
						t.Fatal("joins never went first")
					}
					for _, typ := range []string{"last", "acc"} {
						f.submit(t, typ, fmt.Sprintf(`{"t":%d,"i":%d}`, 1+i%2, 100+i))
					}
				}
				before := map[string]map[int]int{}
				for _, typ := range []string{"last", "acc"} {
					before[typ] = map[int]int{}
					for k := 1; k <= 2; k++ {
						key, _ := f.c.RoundKeyOf(ev(typ, k, 0))
						r, found, err := f.c.Inspect(ctx, typ, key)
						if err != nil || !found {
							t.Fatalf("inspect %s %d: %v %v", typ, k, found, err)
						}
						before[typ][k] = r.Events
					}
				}
				events := []debounce.Event{
					ev("last", 1, 1), ev("last", 1, 2), ev("last", 2, 3), ev("last", 3, 4),
					ev("acc", 1, 5), ev("acc", 1, 6), ev("acc", 2, 7), ev("acc", 3, 8),
				}
				got, errs := f.submitBatch(t, events)
				want := int64(len(events))
				if _, single := b.rdb.(*redis.Client); !single {
					want = 0 // a Cluster: one call each (its keys would cross slots)
				}
				if n := debounce.JoinsMerged(f.c); n != want {
					t.Errorf("%d joins decided in a shared call, want %d", n, want)
				}
				for i := range got {
					if errs[i] != nil {
						t.Fatalf("event %d: %v", i, errs[i])
					}
				}
				for _, typ := range []string{"last", "acc"} {
					o := 0
					if typ == "acc" {
						o = 4
					}
					a, b2 := got[o], got[o+1]
					if a.Round != b2.Round || !slices.Equal([]int{min(a.Events, b2.Events), max(a.Events, b2.Events)}, []int{before[typ][1] + 1, before[typ][1] + 2}) {
						t.Errorf("%s: key 1's events: %+v, %+v; want the counts %d and %d in one round", typ, a, b2, before[typ][1]+1, before[typ][1]+2)
					}
					if d := got[o+2]; d.Outcome != debounce.OutcomeCoalesced || d.Events != before[typ][2]+1 {
						t.Errorf("%s: key 2's event: %+v, want its round's event %d", typ, d, before[typ][2]+1)
					}
					if d := got[o+3]; d.Outcome != debounce.OutcomeScheduled || d.Events != 1 {
						t.Errorf("%s: key 3's event: %+v, want its round opened", typ, d)
					}
				}
				// The jobs: last runs with key 1's later event's args.
				f.clock.Advance(10 * time.Second)
				if held {
					f.forward(t)
				}
				lastOf1 := events[0]
				if got[1].Events > got[0].Events {
					lastOf1 = events[1]
				}
				ran := 0
				for _, job := range f.pub.distinct() {
					rel, err := f.c.Start(ctx, job)
					if err != nil || rel.Result != debounce.ReleaseReleased {
						continue // an earlier publish of a round taken already
					}
					ran++
					key1, _ := f.c.RoundKeyOf(ev(job.Type, 1, 0))
					switch {
					case job.Type == "last" && job.Key == key1:
						if string(rel.Summary.Payload) != string(lastOf1.Args) {
							t.Errorf("last, key 1: the job runs with %s, want %s", rel.Summary.Payload, lastOf1.Args)
						}
					case job.Type == "acc" && job.Key == key1:
						var items []string
						for _, it := range rel.Summary.Items {
							items = append(items, string(it))
						}
						if !slices.Contains(items, "5") || !slices.Contains(items, "6") {
							t.Errorf("acc, key 1: items %v, want 5 and 6 among them", items)
						}
					}
				}
				if ran != 6 {
					t.Errorf("%d jobs ran, want 6 (3 keys of 2 types)", ran)
				}
			})
		})
	}
}
