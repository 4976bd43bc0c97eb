package debounce_test

import (
	"context"
	"testing"

	"github.com/coalesce-io/coalesce/debounce"
)

// The recorder's distinct drops what JetStream's message ids drop: the same
// round version published twice, not the rounds of two keys that share a
// token and version. Packed tokens are unique per key only (the expiry in
// ms and 14 random bits): two keys opened in the same millisecond share one
// about once in 16383, and a test that opens many keys at once (the
// promotion test: 20) then saw an accepted round "without a job".
func TestRecorderDistinctIsPerKey(t *testing.T) {
	ctx := context.Background()
	r := &recorder{}
	a := debounce.Job{Type: "cold", Key: debounce.ExplicitKey("cold", "a"), Token: 12345, Version: 0}
	b := a
	b.Key = debounce.ExplicitKey("cold", "b")
	for _, j := range []debounce.Job{a, b, a} {
		if err := r.Publish(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	got := r.distinct()
	if len(got) != 2 || got[0].Key != a.Key || got[1].Key != b.Key {
		t.Fatalf("distinct: %d jobs %+v, want one of key a and one of key b", len(got), got)
	}
}
