package debounce

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
)

// BenchmarkMerge: the producer's cost of grouping a pipeline's calls
// (merge.go), here twelve joins of one policy and four held openings of
// one type, as a payload-last storm at 50 in flight sends them.
func BenchmarkMerge(b *testing.B) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // merge never sends
	defer rdb.Close()
	bt := &batcher{rdb: rdb}
	var extend, maxWait, payload, maxItems any = "0", "0", "last", "0"
	calls := make([]*scriptCall, 0, 16)
	for i := range 12 {
		calls = append(calls, &scriptCall{script: joinRoundScript, keys: []string{fmt.Sprintf("r%d", i), "due"},
			args: []any{int64(i), extend, maxWait, payload, []byte("{}"), maxItems}})
	}
	for i := range 4 {
		calls = append(calls, &scriptCall{script: openPackedScript, keys: []string{fmt.Sprintf("p%d", i), "due", "ids"},
			args: []any{"1", "2", "3", "4", "5", "{}"}})
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		send, _ := bt.merge(ctx, calls)
		if len(send) != 2 {
			b.Fatalf("%d calls sent, want 2 shared", len(send))
		}
	}
}

// TestMergeGroupsByName: calls share a call only with calls of their kind
// and name (the same due list and identity hash, or the same due list and
// policy arguments), in the order they came, however many calls and
// groups a pipeline holds; a name met once goes out alone.
func TestMergeGroupsByName(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // merge never sends
	defer rdb.Close()
	bt := &batcher{rdb: rdb}
	join := func(key, list string, payload any) *scriptCall {
		keys := []string{key}
		if list != "" {
			keys = append(keys, list)
		}
		return &scriptCall{script: joinRoundScript, keys: keys, args: []any{int64(1), "0", "0", payload, []byte("{}"), "0"}}
	}
	held := func(key, list, ids string) *scriptCall {
		return &scriptCall{script: openPackedScript, keys: []string{key, list, ids}, args: []any{"1", "2", "3", "4", "5", "{}"}}
	}
	for _, groups := range []int{1, 3, 20} { // 20: more names than merge keeps room for
		for _, per := range []int{1, 2, 5} { // 5 * 2 kinds * 20 = 200 calls: more than its room too
			var calls []*scriptCall
			for i := range per {
				for g := range groups {
					calls = append(calls,
						join(fmt.Sprintf("j%d-%d", g, i), fmt.Sprintf("due%d", g), "last"),
						held(fmt.Sprintf("h%d-%d", g, i), fmt.Sprintf("due%d", g), fmt.Sprintf("ids%d", g)))
				}
			}
			// Never shared: a join of another payload, an opening with
			// another identity hash, a call of another script.
			lone := []*scriptCall{join("x", "due0", "accumulate"), held("y", "due0", "other"),
				{script: openRoundScript, keys: []string{"z"}}}
			calls = append(calls, lone...)
			send, split := bt.merge(context.Background(), calls)
			if per == 1 {
				if len(send) != len(calls) {
					t.Fatalf("%d groups of 1: %d calls sent for %d", groups, len(send), len(calls))
				}
				continue
			}
			if len(send) != 2*groups+len(lone) {
				t.Fatalf("%d groups of %d: %d calls sent, want %d", groups, per, len(send), 2*groups+len(lone))
			}
			for k, sc := range send[:2*groups] {
				g, kind := k/2, k%2
				want := []string{fmt.Sprintf("due%d", g)} // join_many: the due list, then the rounds
				if kind == 1 {
					want = append(want, fmt.Sprintf("ids%d", g)) // open_held_many: the due list, the hash
				}
				for i := range per {
					want = append(want, fmt.Sprintf("%c%d-%d", "jh"[kind], g, i))
				}
				if fmt.Sprint(sc.keys) != fmt.Sprint(want) {
					t.Fatalf("%d groups of %d: shared call %d's keys %v, want %v", groups, per, k, sc.keys, want)
				}
			}
			for i, sc := range lone {
				if send[2*groups+i] != sc {
					t.Fatalf("%d groups of %d: lone call %d was not sent as itself", groups, per, i)
				}
			}
			split() // no replies: every member gets the shared call's error
			for _, sc := range calls[:len(calls)-len(lone)] {
				if sc.cmd == nil || sc.cmd.Err() == nil {
					t.Fatalf("%d groups of %d: a member of a shared call not sent has no error", groups, per)
				}
			}
		}
	}
}
