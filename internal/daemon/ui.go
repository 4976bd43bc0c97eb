package daemon

import (
	"context"
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/coalesce-io/coalesce/dashboard"
	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/config"
)

// UIPath is where the daemon serves the web dashboard (http.ui).
const UIPath = "/ui/"

// NewDashboard builds the dashboard of a daemon: its pages call the API's
// /v1 routes (the daemon's, with its tokens), its charts sample the
// Prometheus counters the daemon keeps anyway, and its timelines read the
// rounds History the metrics' Decision hook records.
func NewDashboard(c *Conns, m *Metrics, cfg *config.Config) (*dashboard.Dashboard, error) {
	dc := dashboard.Config{Coalescer: c.Coalescer, Publisher: c.Publisher, JetStream: c.JetStream,
		Tokens: cfg.HTTP.Tokens, ReadTokens: cfg.HTTP.ReadTokens, Path: UIPath, APIBase: "/", History: m.History,
		Counters: m.DashboardCounters}
	if cfg.Outbox.Postgres != "" {
		dc.Outbox = m.outboxState
	}
	return dashboard.New(dc)
}

// uiRoutes registers the dashboard's JSON routes the daemon does not serve
// itself (overview, rounds of a type, a key's history, search, workers),
// with the daemon's auth, errors and metrics; and its pages at UIPath when
// the UI is on.
func (a *API) uiRoutes(mux *http.ServeMux, route func(pattern, name string, methods []string, h func(http.ResponseWriter, *http.Request) *apiError, auth bool)) {
	for _, rt := range a.cfg.Dashboard.Routes() {
		if rt.Core {
			continue
		}
		route(rt.Pattern, rt.Name, rt.Methods, func(w http.ResponseWriter, r *http.Request) *apiError {
			err := rt.Handle(w, r)
			if err == nil {
				return nil
			}
			var de *dashboard.Error
			if errors.As(err, &de) {
				return errf(de.Status, de.Code, de.Field, "%s", de.Message)
			}
			return errf(http.StatusInternalServerError, "internal", "", "%v", err)
		}, true)
	}
	if a.cfg.UI {
		a.routes = append(a.routes, Route{Pattern: UIPath, Methods: []string{http.MethodGet}})
		mux.Handle(UIPath, a.cfg.Dashboard.Handler())
	}
}

// DashboardCounters are the decided events and published jobs by type, read
// from coalesce_events_total.
func (m *Metrics) DashboardCounters() dashboard.Counters {
	out := dashboard.Counters{}
	ch := make(chan prometheus.Metric, 64)
	go func() { m.events.Collect(ch); close(ch) }()
	for metric := range ch {
		var pm dto.Metric
		if err := metric.Write(&pm); err != nil || pm.Counter == nil {
			continue
		}
		var typ, outcome string
		for _, l := range pm.Label {
			switch l.GetName() {
			case "type":
				typ = l.GetValue()
			case "outcome":
				outcome = l.GetValue()
			}
		}
		if outcome == "error" || outcome == "" {
			continue
		}
		c := out[typ]
		v := pm.Counter.GetValue()
		c.Events += v
		if dashboard.IsJob(debounce.Outcome(outcome)) {
			c.Jobs += v
		}
		out[typ] = c
	}
	return out
}

// outboxState reads the outbox relay's gauges, when it runs.
func (m *Metrics) outboxState(context.Context) (dashboard.OutboxState, error) {
	var st dashboard.OutboxState
	families, err := m.Registry.Gather()
	if err != nil {
		return st, err
	}
	found := false
	for _, f := range families {
		if len(f.Metric) == 0 || f.Metric[0].Gauge == nil {
			continue
		}
		switch f.GetName() {
		case "coalesce_outbox_backlog_rows":
			st.BacklogRows, found = int64(f.Metric[0].Gauge.GetValue()), true
		case "coalesce_outbox_oldest_row_seconds":
			st.OldestSeconds = f.Metric[0].Gauge.GetValue()
		}
	}
	if !found {
		return st, errors.New("the outbox relay has not reported its backlog yet")
	}
	return st, nil
}
