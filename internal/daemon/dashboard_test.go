package daemon_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/coalesce-io/coalesce/internal/daemon"
)

// TestDashboardQueriesExportedMetrics: every query of the Grafana dashboard
// in deploy/grafana names only series the binary registers, so a renamed or
// removed metric breaks this test, not a user's dashboard.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/grafana/coalesce.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	exported := daemon.MetricNames(daemon.AllMetrics())
	if !exported["coalesce_events_total"] || !exported["coalesce_decision_seconds"] {
		t.Fatalf("the registered names are not read: %v", exported)
	}
	name := regexp.MustCompile(`coalesce_[a-z_]+`)
	used, queries := map[string]bool{}, 0
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			queries++
			for _, m := range name.FindAllString(q.Expr, -1) {
				base := m
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(m, suffix); ok && exported[b] {
						base = b
					}
				}
				if !exported[base] {
					t.Errorf("panel %q queries %s, which the binary does not export", p.Title, m)
				}
				used[base] = true
			}
		}
	}
	for _, want := range []string{"coalesce_events_total", "coalesce_jobs_total", "coalesce_decision_seconds", "coalesce_round_age_seconds",
		"coalesce_releases_total", "coalesce_store_errors_total", "coalesce_cron_ticks_total", "coalesce_ingest_total",
		// The outbox, local joins, the worker protocol and dead letters.
		"coalesce_outbox_rows_total", "coalesce_outbox_backlog_rows", "coalesce_outbox_oldest_row_seconds", "coalesce_outbox_lag_seconds",
		"coalesce_local_joins_total", "coalesce_local_flushes_total", "coalesce_local_resubmitted_total", "coalesce_local_rounds",
		"coalesce_protocol_total", "coalesce_dead_letters_total"} {
		if !used[want] {
			t.Errorf("the dashboard has no panel on %s", want)
		}
	}
	t.Logf("%d panels, %d queries over %d series", len(dash.Panels), queries, len(used))
}
