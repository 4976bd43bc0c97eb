package debounce_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// TestRoundOutlivesWorkerOutage: a round's data lives until its job starts,
// however long the workers are away (up to the stream's MaxAge), for every
// kind of round. The workers here come back two hours after the due time:
// past the five-minute grace and the one-hour dedup bound that used to end
// rounds, so an expired round would start `missing` with an empty summary.
func TestRoundOutlivesWorkerOutage(t *testing.T) {
	t.Parallel()
	policies := []debounce.Policy{
		{Type: "fixed", Mode: debounce.ModeDebounce, Window: 2 * time.Second, KeyFields: []string{"tenant"}},
		{Type: "extend", Mode: debounce.ModeDebounce, Window: 2 * time.Second, Extend: true, MaxWait: 10 * time.Second, KeyFields: []string{"tenant"}},
		{Type: "last", Mode: debounce.ModeDebounce, Window: 2 * time.Second, Payload: debounce.PayloadLast, KeyFields: []string{"tenant"}},
		{Type: "accum", Mode: debounce.ModeDebounce, Window: 2 * time.Second, Payload: debounce.PayloadAccumulate, ItemField: "id", KeyFields: []string{"tenant"}},
		{Type: "dedup", Mode: debounce.ModeDedup, KeyFields: []string{"tenant"}},
		{Type: "trailing", Mode: debounce.ModeThrottle, Window: 2 * time.Second, Trailing: true, KeyFields: []string{"tenant"}},
	}
	const tenants, perTenant = 5, 10
	eachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, policies...)
		first := f.clock.Now()
		for _, p := range policies {
			for tenant := range tenants {
				for i := range perTenant {
					f.submit(t, p.Type, fmt.Sprintf(`{"tenant":%d,"id":%d}`, tenant, tenant*100+i))
				}
			}
		}
		// Every round, throttle's leading jobs aside, is pending; each must
		// be kept at least MaxAge (default 7 days) past its latest due time.
		rounds := map[string]debounce.Job{} // by type/key: the round's latest job
		for _, j := range f.pub.all() {
			if j.Mode == debounce.ModeThrottle && j.Immediate() {
				continue
			}
			rounds[j.Type+"/"+j.Key.String()] = j
		}
		if len(rounds) != len(policies)*tenants {
			t.Fatalf("%d rounds pending, want %d", len(rounds), len(policies)*tenants)
		}
		latestDue := map[string]time.Duration{"fixed": 2 * time.Second, "extend": 10 * time.Second, "last": 2 * time.Second,
			"accum": 2 * time.Second, "dedup": 0, "trailing": 2 * time.Second}
		for _, j := range rounds {
			r, found, err := f.c.Inspect(context.Background(), j.Type, j.Key)
			if err != nil || !found {
				t.Fatalf("%s: round not found (%v)", j.Type, err)
			}
			if want := first.Add(latestDue[j.Type] + 7*24*time.Hour); r.ExpiresAt.Before(want) {
				t.Errorf("%s round expires at %v, before its latest due time plus MaxAge (%v)", j.Type, r.ExpiresAt, want)
			}
		}
		if b.mini == nil {
			return // the server's clock cannot be moved: the expiry above is the check
		}
		f.clock.Advance(2 * time.Hour)
		for _, j := range rounds {
			rel := f.start(t, j)
			want := perTenant
			if j.Type == "trailing" {
				want-- // the first event was the window's leading job
			}
			if rel.Result != debounce.ReleaseReleased || rel.Summary.Events != want {
				t.Errorf("%s: after two hours without workers Start found %s with %d events, want released with %d",
					j.Type, rel.Result, rel.Summary.Events, want)
				continue
			}
			switch j.Type {
			case "accum":
				if len(rel.Summary.Items) != perTenant {
					t.Errorf("accum: %d items, want %d", len(rel.Summary.Items), perTenant)
				}
			case "last":
				if len(rel.Summary.Payload) == 0 {
					t.Error("last: no payload")
				}
			}
		}
	})
}

// TestLastSeenAgreesWithGo: the scripts encode a packed round's last-seen
// time exactly as layout.go decodes it, from a millisecond to days after the
// round opened (the producer's clock is what counts, so a real server takes
// the jumps too).
func TestLastSeenAgreesWithGo(t *testing.T) {
	t.Parallel()
	offsets := []time.Duration{time.Millisecond, 3999 * time.Millisecond, 4097 * time.Millisecond,
		time.Minute + 7*time.Millisecond, time.Hour + 333*time.Millisecond, 3*24*time.Hour + 17*time.Millisecond}
	eachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b,
			debounce.Policy{Type: "fixed", Mode: debounce.ModeDebounce, Window: 10 * 24 * time.Hour},
			debounce.Policy{Type: "dedup", Mode: debounce.ModeDedup},
			debounce.Policy{Type: "window", Mode: debounce.ModeThrottle, Window: 10 * 24 * time.Hour})
		for _, typ := range []string{"fixed", "dedup", "window"} {
			start := f.clock.Now()
			first := f.submit(t, typ, `{"k":"`+typ+`"}`)
			moved := time.Duration(0)
			for _, off := range offsets {
				f.clock.Advance(off - moved)
				moved = off
				f.submit(t, typ, `{"k":"`+typ+`"}`)
				f.flush(t) // a local join's last-seen time is in Redis after its flush
				r, found, err := f.c.Inspect(context.Background(), typ, first.Key)
				if err != nil || !found {
					t.Fatalf("%s: inspect: %v %v", typ, found, err)
				}
				base := r.ExpiresAt.Add(-f.lifetime(typ))
				if typ == "window" {
					base = r.FirstSeen
				}
				want := base.Add(time.Duration(debounce.SeenRoundTrip((start.Add(off).Sub(base)).Milliseconds())) * time.Millisecond)
				if !r.LastSeen.Equal(want) {
					t.Errorf("%s, %v after opening: last seen %v, want %v (Go's encoding)", typ, off, r.LastSeen, want)
				}
			}
		}
	})
}

// lifetime is the Redis lifetime of a round of typ: its latest due time plus
// the Coalescer's MaxAge; a throttle window lives its window.
func (f *fixture) lifetime(typ string) time.Duration {
	p, _ := f.c.Policy(typ)
	switch p.Mode {
	case debounce.ModeThrottle:
		return p.Window
	case debounce.ModeDedup:
		return f.c.MaxAge()
	}
	return p.Window + f.c.MaxAge()
}
