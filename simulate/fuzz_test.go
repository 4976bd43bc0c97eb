package simulate_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/simulate"
)

// FuzzReadLog: any input reads without a panic; an error names its line;
// the events come in time order and write back to what reads the same.
func FuzzReadLog(f *testing.F) {
	for _, s := range []string{
		`{"at":"2026-01-02T15:04:05.123Z","type":"r","args":{"tenant_id":1}}`,
		`{"at":1767366245200,"type":"r","args":[1],"key":"k"}` + "\n" + `{"at":1767366245100,"type":"r","args":{}}`,
		`{"at":"x"}`, "\n\n", `{"at":1e12,"type":"","args":{}}`, `{"type":"r","args":{},"at":"2026-01-02T15:04:05+01:00"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, log string) {
		var evs []simulate.Event
		for ev, err := range simulate.ReadLog(strings.NewReader(log)) {
			if err != nil {
				var le *simulate.LogError
				if !errors.As(err, &le) || le.Line < 1 || !strings.HasPrefix(err.Error(), "line ") {
					t.Fatalf("error without its line: %v", err)
				}
				return
			}
			if len(evs) > 0 && ev.At.Before(evs[len(evs)-1].At) {
				t.Fatalf("event at %v after one at %v", ev.At, evs[len(evs)-1].At)
			}
			evs = append(evs, ev)
		}
		var b bytes.Buffer
		for _, ev := range evs {
			_ = simulate.WriteEvent(&b, ev)
		}
		n := 0
		for ev, err := range simulate.ReadLog(&b) {
			if err != nil {
				t.Fatalf("what WriteEvent wrote does not read: %v\n%s", err, b.String())
			}
			if !ev.At.Equal(evs[n].At) || ev.Type != evs[n].Type || ev.Key != evs[n].Key {
				t.Fatalf("event %d wrote and read back as %+v, was %+v", n, ev, evs[n])
			}
			n++
		}
		if n != len(evs) {
			t.Fatalf("%d events read back of %d", n, len(evs))
		}
	})
}

// FuzzParseExpect: no panic; a budget accepted has a known comparison.
func FuzzParseExpect(f *testing.F) {
	for _, s := range []string{"jobs<=1200,p99_latency<=40s", "a.b.max_wait==1m", "x", "=<", "events_per_job>2.5,dropped=0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		es, err := simulate.ParseExpect(spec)
		if err != nil {
			if !errors.Is(err, simulate.ErrExpect) {
				t.Fatalf("error %v does not match ErrExpect", err)
			}
			return
		}
		for _, e := range es {
			if !slices.Contains([]string{"<=", "<", ">=", ">", "=="}, e.Op) || e.Metric == "" {
				t.Fatalf("accepted %+v", e)
			}
		}
	})
}

// FuzzParseCompare: no panic; every variant accepted has valid policies.
func FuzzParseCompare(f *testing.F) {
	base := simulate.Config{Policies: []debounce.Policy{
		debounce.Policy{Type: "deb", Mode: debounce.ModeDebounce, Window: 10 * time.Second}.WithDefaults(),
		debounce.Policy{Type: "ded", Mode: debounce.ModeDedup}.WithDefaults(),
	}}
	for _, s := range []string{"deb.window=5s,10s", "workers=1,2", "ded.mode=throttle|ded.window=2s", "deb.key_fields=a+b", "deb.extend=true|deb.max_wait=1m", "lateness=0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, specs string) {
		vs, err := simulate.ParseCompare(base, strings.Split(specs, "|"))
		if err != nil {
			if !errors.Is(err, simulate.ErrCompare) {
				t.Fatalf("error %v does not match ErrCompare", err)
			}
			return
		}
		if len(vs) == 0 || len(vs) > simulate.MaxVariants {
			t.Fatalf("%d variants", len(vs))
		}
		for _, v := range vs {
			for _, p := range v.Policies {
				if err := p.Validate(); err != nil {
					t.Fatalf("variant %q has an invalid policy: %v", v.Name, err)
				}
			}
		}
	})
}

// FuzzParseGenSpec: no panic; a spec accepted generates events in order.
func FuzzParseGenSpec(f *testing.F) {
	for _, s := range []string{"type=a,tenants=100,rate=50/s,burst=10/1s", "type=a+b,skew=1.2,events=10", "rate=1/h", "type=a,start=2026-01-01T00:00:00Z,every=1m"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		g, err := simulate.ParseGenSpec(spec)
		if err != nil {
			if !errors.Is(err, simulate.ErrGenSpec) {
				t.Fatalf("error %v does not match ErrGenSpec", err)
			}
			return
		}
		var last time.Time
		n := 0
		for ev, err := range simulate.Generate(g) {
			if err != nil {
				t.Fatal(err)
			}
			if ev.At.Before(last) || !slices.Contains(g.Types, ev.Type) {
				t.Fatalf("event %+v after %v", ev, last)
			}
			last = ev.At
			if n++; n == 50 {
				break
			}
		}
	})
}
