package daemon

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/coalesce-io/coalesce/api"
	"github.com/coalesce-io/coalesce/dashboard"
	"github.com/coalesce-io/coalesce/debounce"
)

// Operations: the OpenAPI document, the policies, readiness.

// getOpenAPI serves api/openapi.yaml as JSON.
func (a *API) getOpenAPI(w http.ResponseWriter, _ *http.Request) *apiError {
	b, err := api.JSON()
	if err != nil {
		return errf(http.StatusInternalServerError, "internal", "", "%v", err)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
	return nil
}

func (a *API) getPolicies(w http.ResponseWriter, _ *http.Request) *apiError {
	ps := a.cfg.Coalescer.Policies()
	slices.SortFunc(ps, func(x, y debounce.Policy) int { return strings.Compare(x.Type, y.Type) })
	views := make([]PolicyView, len(ps))
	for i, p := range ps {
		views[i] = ViewPolicy(p)
	}
	writeJSON(w, http.StatusOK, map[string]any{"policies": views})
	return nil
}

func (a *API) readyz(w http.ResponseWriter, r *http.Request) *apiError {
	checks := map[string]string{}
	ready := true
	if a.cfg.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		// A failing check's error names internal addresses: shown only to
		// a caller the API would serve (anyone, without tokens).
		details := a.authorized(r)
		for name, err := range a.cfg.Ready(ctx) {
			checks[name] = "ok"
			switch {
			case err != nil && details:
				checks[name], ready = err.Error(), false
			case err != nil:
				checks[name], ready = "failing", false
			}
		}
	}
	status := http.StatusOK
	state := "ready"
	if !ready {
		status, state = http.StatusServiceUnavailable, "not ready"
		setRetryAfter(w.Header(), status, 0)
	}
	writeJSON(w, status, map[string]any{"status": state, "checks": checks})
	return nil
}

// PolicyView is a policy as the API and the CLI show it: the YAML keys, and
// durations as text (the dashboard's, the same JSON).
type PolicyView = dashboard.PolicyView

// ViewPolicy converts a policy for display.
func ViewPolicy(p debounce.Policy) PolicyView { return dashboard.ViewPolicy(p) }
