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

func readAll(log string) ([]simulate.Event, error) {
	var out []simulate.Event
	for ev, err := range simulate.ReadLog(strings.NewReader(log)) {
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
	return out, nil
}

func TestReadLog(t *testing.T) {
	t.Parallel()
	good := `{"at":"2026-01-02T15:04:05.123Z","type":"r","args":{"tenant_id":1}}

{"at":1767366245200,"type":"r","args":{"tenant_id":2},"key":"k","outcome":"scheduled"}
{"at":"2026-01-02T15:04:05.100Z","type":"r","args":[1, 2]}
`
	evs, err := readAll(good)
	if err != nil {
		t.Fatal(err)
	}
	// Sorted by time: the third line is 23 ms before the first.
	if len(evs) != 3 || evs[0].Line != 4 || evs[1].Line != 1 || evs[2].Line != 3 || evs[2].Key != "k" ||
		!evs[2].At.Equal(time.UnixMilli(1767366245200)) || string(evs[0].Args) != "[1, 2]" {
		t.Fatalf("events %+v", evs)
	}
	for _, tc := range []struct{ log, want string }{
		{`{"at":"2026-01-02T15:04:05Z","type":"r","args":{}}` + "\n" + `{"at":"yesterday","type":"r","args":{}}`,
			`line 2: at: "yesterday" is not RFC 3339`},
		{`{"type":"r","args":{}}`, "line 1: at: missing"},
		{`{"at":1767366245,"type":"r","args":{}}`, "line 1: at: 1767366245 looks like unix seconds; give unix milliseconds (1767366245000)"},
		{`{"at":1.5e12,"type":"r","args":{}}` + "\n" + `{"at":-5,"type":"r","args":{}}`, "line 2: at: -5 is not a plausible time"},
		{`{"at":1767366245000.5,"type":"r","args":{}}`, "line 1: at: 1767366245000.5: unix milliseconds must be a whole number"},
		{`{"at":true,"type":"r","args":{}}`, "line 1: at: true is neither an RFC 3339 string nor unix milliseconds"},
		{`{"at":1767366245000,"args":{}}`, "line 1: type: missing"},
		{`{"at":1767366245000,"type":7,"args":{}}`, "line 1: type: must be a string, not a JSON number"},
		{`{"at":1767366245000,"type":"r"}`, "line 1: args: missing; use {} for a job without args"},
		{`{"at":1767366245000,"type":"r","args":null}`, "line 1: args: missing"},
		{`{"at":1767366245000,"type":"r","args":{},"key":""}`, "line 1: key: empty"},
		{`{"at":1767366245000,"type":"r","args":{},"key":5}`, "line 1: key: must be a string"},
		{`[1,2]`, "line 1: not a JSON object"},
		{`{"at":1767366245000,"type":"r","args":{`, "line 1: not valid JSON"},
		{`{"at":"2026-01-02T15:04:05Z","type":"r","args":{}}` + "\n" + `{"at":"2026-01-02T15:06:05Z","type":"r","args":{}}` + "\n" +
			`{"at":"2026-01-02T15:04:04Z","type":"r","args":{}}`, "line 3: at: 2026-01-02T15:04:04Z is 2m1s before line 2 (2026-01-02T15:06:05Z), more than the 1m0s the reader sorts by itself"},
		{`{"at":1767366245000,"type":"r","args":"` + strings.Repeat("x", simulate.MaxLineSize) + `"}`, "line 1: longer than 1048576 bytes"},
	} {
		_, err := readAll(tc.log)
		var le *simulate.LogError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &le) || !errors.Is(err, simulate.ErrLog) {
			t.Errorf("%.60s: error %v, want %q", tc.log, err, tc.want)
		}
	}
}

// TestWriteEventRoundTrips: what WriteEvent writes (coalesce serve
// --record) is what ReadLog reads.
func TestWriteEventRoundTrips(t *testing.T) {
	t.Parallel()
	in := []simulate.Event{
		{At: time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC), Type: "a.b:c-d", Args: []byte("{\n  \"x\": \"\u2028<\"\n}"), Key: "k\"ey\n"},
		{At: time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC), Type: "t", Args: []byte(`[]`)},
	}
	var b bytes.Buffer
	for _, ev := range in {
		if err := simulate.WriteEvent(&b, ev); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Count(b.String(), "\n") != 2 {
		t.Fatalf("not one line per event:\n%s", b.String())
	}
	out, err := readAll(b.String())
	if err != nil {
		t.Fatal(err)
	}
	for i := range in {
		if !out[i].At.Equal(in[i].At) || out[i].Type != in[i].Type || out[i].Key != in[i].Key {
			t.Errorf("event %d: %+v, want %+v", i, out[i], in[i])
		}
	}
	if string(out[0].Args) != `{"x":"`+"\u2028"+`<"}` {
		t.Errorf("args %s", out[0].Args)
	}
}

func TestParseGenSpec(t *testing.T) {
	t.Parallel()
	g, err := simulate.ParseGenSpec("type=a+b, tenants=7, rate=120/m, duration=1h, burst=50/2s, skew=1.5, items=9, seed=3, start=2026-05-01T00:00:00Z")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.Types, []string{"a", "b"}) || g.Tenants != 7 || g.Rate != 2 || g.Duration != time.Hour || g.BurstEvents != 50 ||
		g.BurstLength != 2*time.Second || g.BurstEvery != time.Minute || g.Skew != 1.5 || g.Items != 9 || g.Seed != 3 || g.Start.Month() != 5 {
		t.Fatalf("spec %+v", g)
	}
	for _, tc := range []struct{ spec, want string }{
		{"tenants=5", "type: required"},
		{"type=a,rate=5/d", `rate: "5/d": unit "d": use /s, /m or /h`},
		{"type=a,rate=0", "rate: must be above 0"},
		{"type=a,tenants=0", `tenants: "0": must be 1 to`},
		{"type=a,tenants=x", `tenants: "x": not a whole number`},
		{"type=a,duration=soon", `duration: "soon": not a duration`},
		{"type=a,skew=0.5", "skew: \"0.5\": 0 (uniform) or a Zipf exponent above 1"},
		{"type=a,burst=50", "burst: \"50\": give events/length"},
		{"type=a,every=1m", "every: only applies with burst"},
		{"type=a,burst=10/2m,every=1m", "burst: its length 2m0s is longer than every=1m0s"},
		{"type=a,colour=red", "colour: unknown key (keys: type, tenants"},
		{"type=a,type=b", "type: given twice"},
		{"type=a,tenants", `"tenants" is not key=value`},
		{"type=a b", `type: "a b": type:`},
		{"type=a,seed=", "seed: empty value"},
	} {
		_, err := simulate.ParseGenSpec(tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, simulate.ErrGenSpec) {
			t.Errorf("%q: %v, want %q", tc.spec, err, tc.want)
		}
	}
}

// TestGenerate: the log has the rate asked for (a Poisson process: within
// a few percent over a long log), the bursts, and is the same for a seed.
func TestGenerate(t *testing.T) {
	t.Parallel()
	g, _ := simulate.ParseGenSpec("type=a,tenants=10,rate=20/s,duration=30m,burst=100/1s,every=10m,items=5,seed=9")
	var evs []simulate.Event
	perTenantSecond := map[string]int{}
	for ev, err := range simulate.Generate(g) {
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) > 0 && ev.At.Before(evs[len(evs)-1].At) {
			t.Fatalf("event %d goes back in time", len(evs))
		}
		evs = append(evs, ev)
		perTenantSecond[string(ev.Args[:14])+ev.At.Truncate(time.Second).String()]++
	}
	want := 20*30*60 + 3*100
	if n := len(evs); n < want*97/100 || n > want*103/100 {
		t.Errorf("%d events, want about %d", n, want)
	}
	burst := 0
	for _, n := range perTenantSecond {
		burst = max(burst, n)
	}
	if burst < 80 {
		t.Errorf("the busiest tenant-second has %d events, want a burst of ~100", burst)
	}
	if !bytes.Contains(evs[0].Args, []byte(`"item":`)) || evs[0].Type != "a" || !evs[0].At.After(g.Start) {
		t.Errorf("first event %+v", evs[0])
	}
	var again []simulate.Event
	for ev := range simulate.Generate(g) {
		again = append(again, ev)
		if len(again) == 100 {
			break
		}
	}
	for i := range again {
		if !again[i].At.Equal(evs[i].At) || string(again[i].Args) != string(evs[i].Args) {
			t.Fatalf("event %d differs with the same seed", i)
		}
	}
	g.Events, g.Duration = 500, 0
	n := 0
	for range simulate.Generate(g) {
		n++
	}
	if n != 500 {
		t.Errorf("events=500 gave %d", n)
	}
}

func TestParseExpect(t *testing.T) {
	t.Parallel()
	es, err := simulate.ParseExpect("jobs<=1200, p99_latency<40s ,a.b.events_per_job>=10,max_wait==1m,dropped=0")
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 5 || es[0].Metric != "jobs" || es[0].Op != "<=" || es[0].Value != 1200 || es[1].Value != 40 ||
		es[2].Type != "a.b" || es[2].Metric != "events_per_job" || es[3].Value != 60 || es[4].Op != "==" {
		t.Fatalf("%+v", es)
	}
	for _, tc := range []struct{ spec, want string }{
		{"", "empty"},
		{"jobs", "no comparison"},
		{"jobs=>5", `"=>" is not a comparison`},
		{"jobs!=5", `"!=" is not a comparison`},
		{"<=5", "no metric"},
		{"jobz<=5", `unknown metric "jobz" (metrics: events, jobs`},
		{"p99_latency<=40", "p99_latency is a duration: give a unit, e.g. 40s"},
		{"p99_latency<=soon", `p99_latency: "soon" is not a duration`},
		{"jobs<=many", `jobs: "many" is not a number`},
		{"jobs<=", "no value"},
		{"jobs<=5<=6", "one comparison per budget"},
		{".jobs<=5", "empty job type"},
	} {
		_, err := simulate.ParseExpect(tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, simulate.ErrExpect) {
			t.Errorf("%q: %v, want %q", tc.spec, err, tc.want)
		}
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	r := &simulate.Result{
		Types: []simulate.TypeStats{{Type: "a", Jobs: 10, LatencyP99: 30 * time.Second}},
		Total: simulate.TypeStats{Jobs: 1500, LatencyP99: 45 * time.Second},
	}
	es, _ := simulate.ParseExpect("jobs<=1200,p99_latency<=40s,a.jobs<=10,a.p99_latency<=40s")
	fails, err := simulate.Check([]simulate.Named{{Name: "window=5s", Result: r}}, es)
	if err != nil {
		t.Fatal(err)
	}
	if len(fails) != 2 || fails[0].String() != "window=5s: jobs is 1500, budget jobs<=1200" || fails[1].String() != "window=5s: p99_latency is 45s, budget p99_latency<=40s" {
		t.Fatalf("failures %v", fails)
	}
	es, _ = simulate.ParseExpect("b.jobs<=1")
	if _, err := simulate.Check([]simulate.Named{{Result: r}}, es); err == nil || !strings.Contains(err.Error(), `no policy for job type "b"`) {
		t.Fatalf("unknown type: %v", err)
	}
}

func TestParseCompare(t *testing.T) {
	t.Parallel()
	base := simulate.Config{Policies: []debounce.Policy{
		debounce.Policy{Type: "deb", Mode: debounce.ModeDebounce, Window: 10 * time.Second, KeyFields: []string{"tenant_id"}}.WithDefaults(),
		debounce.Policy{Type: "thr", Mode: debounce.ModeThrottle, Window: 10 * time.Second}.WithDefaults(),
		debounce.Policy{Type: "ded", Mode: debounce.ModeDedup}.WithDefaults(),
	}}
	vs, err := simulate.ParseCompare(base, []string{"thr.window=5s,20s", "deb.extend=true", "deb.max_wait=1m", "deb.key_fields=tenant_id+region"})
	if err != nil {
		t.Fatal(err)
	}
	p := vs[1].Policies
	if len(vs) != 2 || vs[1].Name != "thr.window=20s deb.extend=true deb.max_wait=1m deb.key_fields=tenant_id+region" ||
		p[1].Window != 20*time.Second || p[1].TTL != 20*time.Second || !p[0].Extend || p[0].MaxWait != time.Minute ||
		!slices.Equal(p[0].KeyFields, []string{"tenant_id", "region"}) || base.Policies[1].Window != 10*time.Second {
		t.Fatalf("variants %+v", vs)
	}
	// Another mode derives its defaults afresh.
	vs, err = simulate.ParseCompare(base, []string{"ded.mode=throttle", "ded.window=3s"})
	if err != nil || vs[0].Policies[2].Mode != debounce.ModeThrottle || vs[0].Policies[2].Until != "" || vs[0].Policies[2].TTL != 3*time.Second {
		t.Fatalf("mode change: %+v %v", vs, err)
	}
	for _, tc := range []struct {
		specs []string
		want  string
	}{
		{[]string{"window"}, `"window": give field=value,value`},
		{[]string{"window="}, "window: no values"},
		{[]string{"nope.window=5s"}, `no policy for job type "nope" (types: deb, thr, ded)`},
		{[]string{"deb.colour=red"}, `"colour" cannot be compared (fields: mode, window`},
		{[]string{"deb.window=500ms"}, "policy deb: window: 500ms is shorter than 1s"},
		{[]string{"window=5s"}, "policy ded: window: dedup publishes at once and has no window; the dedup window is ttl (to change one policy only, prefix the field with its type: ded.window)"},
		{[]string{"deb.extend=maybe"}, `extend: "maybe" is not true or false`},
		{[]string{"deb.window=soon"}, "window: not a duration"},
		{[]string{"workers=0"}, "workers: a whole number, at least 1"},
		{[]string{"deb.workers=2"}, "workers is a setting of the simulation"},
		{[]string{"job_duration=-1s"}, "job_duration: not a duration"},
		{[]string{"deb.window=1s,2s,3s,4s,5s,6s", "workers=1,2,3,4,5,6"}, "more than 32 variants"},
	} {
		_, err := simulate.ParseCompare(base, tc.specs)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, simulate.ErrCompare) {
			t.Errorf("%q: %v, want %q", tc.specs, err, tc.want)
		}
	}
}
