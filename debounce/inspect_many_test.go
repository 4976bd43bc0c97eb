package debounce_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// TestInspectManyIsInspect: InspectMany's rounds are Inspect's, key by key,
// for every layout (packed fixed debounce, hash accumulate, throttle
// windows and trailing rounds, dedup), with keys that have nothing pending
// mixed in, on every backend (Cluster: keys on several nodes).
func TestInspectManyIsInspect(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b,
			debounce.Policy{Type: "fixed", Mode: debounce.ModeDebounce, Window: time.Minute, KeyFields: []string{"id"}, LocalJoins: debounce.LocalJoinsOff},
			debounce.Policy{Type: "acc", Mode: debounce.ModeDebounce, Window: time.Minute, KeyFields: []string{"id"}, Payload: debounce.PayloadAccumulate},
			debounce.Policy{Type: "thr", Mode: debounce.ModeThrottle, Window: time.Minute, Trailing: true, KeyFields: []string{"id"}},
			debounce.Policy{Type: "once", Mode: debounce.ModeDedup, KeyFields: []string{"id"}},
		)
		ctx := context.Background()
		for _, typ := range []string{"fixed", "acc", "thr", "once"} {
			var keys []debounce.RoundKey
			for id := range 12 {
				d := f.submit(t, typ, fmt.Sprintf(`{"id":%d,"x":1}`, id))
				if id%3 == 0 {
					f.submit(t, typ, fmt.Sprintf(`{"id":%d,"x":2}`, id)) // joins: count 2, an item more
				}
				if id%4 == 0 {
					keys = append(keys, debounce.RoundKey{byte(id), 0xee}) // nothing pending
				}
				keys = append(keys, d.Key)
			}
			rounds, found, err := f.c.InspectMany(ctx, typ, keys)
			if err != nil {
				t.Fatalf("%s: InspectMany: %v", typ, err)
			}
			n := 0
			for i, k := range keys {
				want, ok, err := f.c.Inspect(ctx, typ, k)
				if err != nil {
					t.Fatal(err)
				}
				if found[i] != ok || !reflect.DeepEqual(rounds[i], want) {
					t.Errorf("%s key %d: InspectMany %v %+v, Inspect %v %+v", typ, i, found[i], rounds[i], ok, want)
				}
				if ok {
					n++
				}
			}
			if n != 12 {
				t.Errorf("%s: %d rounds found, want 12", typ, n)
			}
		}
		if _, _, err := f.c.InspectMany(ctx, "nope", nil); err == nil {
			t.Error("InspectMany of a type without a policy: no error")
		}
	})
}
