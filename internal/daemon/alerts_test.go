package daemon_test

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/coalesce-io/coalesce/internal/daemon"
	"github.com/coalesce-io/coalesce/internal/testenv"
)

// promtool finds Prometheus's rule checker, or skips (fails when servers are
// required, as in CI, which installs the prometheus package).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv(testenv.RequireEnv) != "" {
			t.Fatal("promtool is required for the alert rules' test: apt-get install prometheus")
		}
		t.Skip("no promtool (apt-get install prometheus)")
	}
	return p
}

// TestAlertRules: deploy/alerts.yml is valid for Prometheus (promtool check
// rules), each alert fires and stays quiet as deploy/alerts_test.yml says
// (promtool test rules), deploy/prometheus.yml is a valid configuration
// loading them (promtool check config), every alert has a case where it fires, and every
// coalesce series an alert queries is one the binary exports, so a renamed
// metric breaks this test, not a user's alerting.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	tool := promtool(t)
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}, {"check", "config", "prometheus.yml"}} {
		cmd := exec.Command(tool, args...)
		cmd.Dir = "../../deploy"
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	var cases struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		}
	}
	for path, into := range map[string]any{"../../deploy/alerts.yml": &rules, "../../deploy/alerts_test.yml": &cases} {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(raw, into); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	fires := map[string]bool{}
	for _, tc := range cases.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	exported := daemon.ExportedMetricNames()
	if !exported["coalesce_events_total"] || !exported["coalesce_outbox_oldest_row_seconds"] {
		t.Fatalf("the exported names are not read: %v", exported)
	}
	name := regexp.MustCompile(`coalesce_[a-z_]+`)
	used := map[string]bool{}
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			if !fires[r.Alert] {
				t.Errorf("alert %s has no case in alerts_test.yml where it fires", r.Alert)
			}
			for _, m := range name.FindAllString(r.Expr, -1) {
				base := m
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(m, suffix); ok && exported[b] {
						base = b
					}
				}
				if !exported[base] {
					t.Errorf("alert %s queries %s, which the binary does not export", r.Alert, m)
				}
				used[base] = true
			}
		}
	}
	// What issue 29 asked alerts for: overdue rounds, dead letters, outbox
	// lag, the store unavailable, replication doubts.
	for _, want := range []string{"coalesce_reaper_actions_total", "coalesce_jobs_total", "coalesce_outbox_oldest_row_seconds",
		"coalesce_store_errors_total", "coalesce_replication_doubts_total"} {
		if !used[want] {
			t.Errorf("no alert on %s", want)
		}
	}
	t.Logf("%d alerts over %d series", alerts, len(used))
}

// TestMetricsListedInTheDocs: the metric list of docs/operations.md names
// every coalesce series the binary exports, and nothing it does not (the
// local joins' series, registered with a Coalescer, aside).
func TestMetricsListedInTheDocs(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "\n## Metrics\n")
	if start < 0 {
		t.Fatal(`docs/operations.md has no "## Metrics" section`)
	}
	section := doc[start+1:]
	if end := strings.Index(section, "\n**Scrape"); end > 0 {
		section = section[:end]
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z_]+)(\\{[a-z,]*\\})?`").FindAllStringSubmatch(section, -1) {
		listed["coalesce_"+m[1]] = true
	}
	exported := daemon.ExportedMetricNames()
	for name := range exported {
		if !listed[name] {
			t.Errorf("docs/operations.md, Metrics, does not list %s", strings.TrimPrefix(name, "coalesce_"))
		}
	}
	for name := range listed {
		if !exported[name] && !strings.HasPrefix(name, "coalesce_local_") && regexp.MustCompile(`_(total|seconds|rows|events)$`).MatchString(name) {
			t.Errorf("docs/operations.md, Metrics, lists %s, which the binary does not export", strings.TrimPrefix(name, "coalesce_"))
		}
	}
}
