package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	exampleConfig = "../../examples/simulate/coalesce.yaml"
	exampleEvents = "../../examples/simulate/events.ndjson"
)

// TestSimulateCommand runs coalesce simulate on the shipped example log:
// the table, --json, --compare, --config-b, --expect, --svg, --trace,
// --generate with --save-log, and its refusals.
func TestSimulateCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	code, table, stderr := runBin(t, "", "simulate", "--config", exampleConfig, "--events", exampleEvents, "--keys", "2")
	if code != 0 || !strings.Contains(stderr, "simulate: as configured: 837 events from 2026-03-02T09:00:00Z") {
		t.Fatalf("exit %d\n%s\n%s", code, table, stderr)
	}
	for _, want := range []string{"recompute_financials\n  events                      405", "reindex_products\n  events                      432",
		"  cap                         20s", "busiest keys (as configured):", "max_jobs_per_key"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}

	// --json: the same figures.
	code, out, _ := runBin(t, "", "simulate", "--config", exampleConfig, "--events", exampleEvents, "--json")
	var doc struct {
		Variants []struct {
			Name  string `json:"name"`
			Types []struct {
				Type   string `json:"type"`
				Events int    `json:"events"`
				Jobs   int    `json:"jobs"`
			} `json:"types"`
		} `json:"variants"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || len(doc.Variants) != 1 || doc.Variants[0].Types[1].Events != 432 ||
		!strings.Contains(table, "  jobs                        "+itoa(doc.Variants[0].Types[0].Jobs)) {
		t.Fatalf("--json: exit %d, %v: %s", code, err, out)
	}

	// --compare: one column per value; a longer window, fewer jobs.
	code, out, stderr = runBin(t, "", "simulate", "--config", exampleConfig, "--events", exampleEvents, "--compare", "recompute_financials.window=5s,30s")
	if code != 0 || !strings.Contains(out, "recompute_financials.window=5s  recompute_financials.window=30s") {
		t.Fatalf("--compare: exit %d\n%s\n%s", code, out, stderr)
	}
	// docs/simulate.md's table is this command's output.
	code, out, _ = runBin(t, "", "simulate", "--config", exampleConfig, "--events", exampleEvents,
		"--compare", "recompute_financials.window=5s,10s,30s", "--type", "recompute_financials")
	if readme := string(mustRead(t, "../../docs/simulate.md")); code != 0 || !strings.Contains(readme, "```\n"+out+"```") {
		t.Errorf("docs/simulate.md's table is not the output of its command (exit %d):\n%s", code, out)
	}
	// --config-b: two files side by side.
	other := filepath.Join(dir, "b.yaml")
	raw, _ := os.ReadFile(exampleConfig)
	if err := os.WriteFile(other, bytes.Replace(raw, []byte("window: 10s"), []byte("window: 1m"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runBin(t, "", "simulate", "--config", exampleConfig, "--config-b", other, "--events", exampleEvents)
	if code != 0 || !strings.Contains(out, "A coalesce.yaml  B b.yaml") {
		t.Fatalf("--config-b: exit %d\n%s\n%s", code, out, stderr)
	}

	// --expect: a broken budget exits 1 and says which.
	code, _, stderr = runBin(t, "", "simulate", "--config", exampleConfig, "--events", exampleEvents, "--compare", "recompute_financials.window=5s,30s",
		"--expect", "recompute_financials.jobs<=100,p99_latency<=1m")
	if code != 1 || !strings.Contains(stderr, "simulate: over budget: recompute_financials.window=5s: recompute_financials.jobs is ") ||
		strings.Contains(stderr, "window=30s: recompute_financials.jobs") {
		t.Fatalf("--expect: exit %d\n%s", code, stderr)
	}
	code, _, _ = runBin(t, "", "simulate", "--config", exampleConfig, "--events", exampleEvents, "--expect", "jobs<=100000")
	if code != 0 {
		t.Fatalf("--expect within budget: exit %d", code)
	}

	// --svg of the busiest keys, --trace of every event and job.
	svg, trace := filepath.Join(dir, "t.svg"), filepath.Join(dir, "trace.ndjson")
	code, _, stderr = runBin(t, "", "simulate", "--config", exampleConfig, "--events", exampleEvents, "--svg", svg, "--svg-keys", "2", "--trace", trace)
	if code != 0 {
		t.Fatalf("--svg: exit %d\n%s", code, stderr)
	}
	pic, _ := os.ReadFile(svg)
	if err := wellFormed(pic); err != nil || !bytes.Contains(pic, []byte("tenant_id=2")) || bytes.Count(pic, []byte("<title>round:")) < 10 {
		t.Fatalf("--svg: %v\n%.500s", err, pic)
	}
	lines := strings.Split(strings.TrimSpace(string(mustRead(t, trace))), "\n")
	events := 0
	for _, l := range lines {
		if strings.HasPrefix(l, `{"event":`) {
			events++
		}
	}
	if events != 837 || len(lines) <= 837 {
		t.Fatalf("--trace: %d events in %d lines", events, len(lines))
	}

	// --generate and --save-log: the saved log simulates the same.
	saved := filepath.Join(dir, "gen.ndjson")
	spec := "type=recompute_financials+reindex_products,tenants=5,rate=5/s,duration=2m,items=9,seed=3"
	code, gen, stderr := runBin(t, "", "simulate", "--config", exampleConfig, "--generate", spec, "--save-log", saved)
	if code != 0 {
		t.Fatalf("--generate: exit %d\n%s", code, stderr)
	}
	code, again, _ := runBin(t, "", "simulate", "--config", exampleConfig, "--events", saved)
	if code != 0 || again != gen {
		t.Fatalf("the saved log simulates otherwise:\n%s\n%s", gen, again)
	}
	// And from stdin, with a comparison (two passes over it).
	code, _, stderr = runBin(t, string(mustRead(t, saved)), "simulate", "--config", exampleConfig, "--events", "-", "--compare", "workers=1,2")
	if code != 0 {
		t.Fatalf("stdin with --compare: exit %d\n%s", code, stderr)
	}

	// Refusals.
	bad := filepath.Join(dir, "bad.ndjson")
	_ = os.WriteFile(bad, []byte(`{"at":"2026-01-01T00:00:00Z","type":"recompute_financials","args":{"tenant_id":1}}`+"\n"+
		`{"at":"soon","type":"recompute_financials","args":{}}`+"\n"), 0o644)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--events", bad}, 1, `bad.ndjson: line 2: at: "soon" is not RFC 3339`},
		{[]string{"--events", exampleEvents, "--expect", "jobz<=1"}, 2, `unknown metric "jobz"`},
		{[]string{"--events", exampleEvents, "--compare", "window=30s"}, 2, "policy reindex_products: max_wait: 20s is shorter than the window 30s"},
		{[]string{"--generate", "type=x,rate=fast"}, 2, `--generate: simulate: generator spec: rate: "fast": not a number`},
		{[]string{}, 2, "give one of --events LOG and --generate SPEC"},
		{[]string{"--events", exampleEvents, "--config-b", other, "--compare", "workers=1"}, 2, "give --compare or --config-b, not both"},
		{[]string{"--events", exampleEvents, "--compare", "workers=1,2", "--trace", trace}, 2, "--trace writes one simulation's"},
	} {
		code, _, stderr := runBin(t, "", append([]string{"simulate", "--config", exampleConfig}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, want %d; stderr %q, want %q", tc.args, code, tc.code, stderr, tc.want)
		}
	}
	if code, _, stderr := runBin(t, "", "simulate", "--events", exampleEvents); code != 2 || !strings.Contains(stderr, "--config is required") {
		t.Errorf("no config: exit %d %q", code, stderr)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wellFormed checks that b is well-formed XML.
func wellFormed(b []byte) error {
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		if _, err := d.Token(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
