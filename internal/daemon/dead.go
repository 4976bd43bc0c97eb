package daemon

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/coalesce-io/coalesce/internal/admin"
)

// Dead-letter routes (README, "Dead letters"):
//
//	GET    /v1/dead?type=T[&round=R][&code=C][&limit=N]   list, oldest first, and how many match
//	GET    /v1/dead/{seq}                                 one, with headers and args
//	POST   /v1/dead/{seq}/replay                          run it once more
//	POST   /v1/dead:replay?type=T[&round=R][&code=C]      run every matching one once more
//	DELETE /v1/dead/{seq}                                 purge one
//	DELETE /v1/dead?type=T[&round=R][&code=C]             purge every matching one
func (a *API) deadRoutes(route func(pattern, name string, methods []string, h func(http.ResponseWriter, *http.Request) *apiError, auth bool)) {
	d := a.cfg.Dead
	route("/v1/dead", "dead", []string{http.MethodGet, http.MethodDelete}, func(w http.ResponseWriter, r *http.Request) *apiError {
		q := r.URL.Query()
		f, e := deadFilter(q)
		if e != nil {
			return e
		}
		if r.Method == http.MethodDelete {
			if f.Type == "" {
				return errf(http.StatusBadRequest, "invalid_request", "type", "purging dead letters needs ?type= (and optionally &round=, &code=), or DELETE /v1/dead/{seq}")
			}
			n, err := d.PurgeMatching(r.Context(), f)
			if err != nil {
				return errf(http.StatusServiceUnavailable, "stream_unavailable", "", "purge: %v", err)
			}
			a.countDead("purged", n)
			writeJSON(w, http.StatusOK, map[string]int{"purged": n})
			return nil
		}
		limit := 100
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 10000 {
				return errf(http.StatusBadRequest, "invalid_request", "limit", "limit %q: want 1 to 10000", v)
			}
			limit = n
		}
		letters, matching, codes, err := d.Match(r.Context(), f, limit)
		if err != nil {
			return errf(http.StatusServiceUnavailable, "stream_unavailable", "", "list: %v", err)
		}
		if letters == nil {
			letters = []admin.DeadLetter{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"dead_letters": letters, "matching": matching, "codes": codes})
		return nil
	}, true)
	route("/v1/dead:replay", "dead_replay_all", []string{http.MethodPost}, func(w http.ResponseWriter, r *http.Request) *apiError {
		f, e := deadFilter(r.URL.Query())
		if e != nil {
			return e
		}
		n, err := d.ReplayMatching(r.Context(), f)
		a.countDead("replayed", n)
		if err != nil {
			return errf(http.StatusServiceUnavailable, "stream_unavailable", "", "replayed %d, then: %v", n, err)
		}
		writeJSON(w, http.StatusOK, map[string]int{"replayed": n})
		return nil
	}, true)
	one := func(w http.ResponseWriter, r *http.Request) *apiError {
		seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
		if err != nil || seq == 0 {
			return errf(http.StatusBadRequest, "invalid_request", "seq", "%q is not a dead letter's sequence (a whole number from the list)", r.PathValue("seq"))
		}
		var out any
		switch {
		case r.Method == http.MethodGet:
			out, err = d.Show(r.Context(), seq)
		case r.Method == http.MethodDelete:
			_, err = d.Purge(r.Context(), "", "", seq)
			out = map[string]int{"purged": 1}
			if err == nil {
				a.countDead("purged", 1)
			}
		default: // POST .../replay
			var rep admin.Replayed
			rep, err = d.Replay(r.Context(), seq)
			out = rep
			if err == nil && !rep.Deduplicated {
				a.countDead("replayed", 1)
			}
		}
		if errors.Is(err, admin.ErrNoDeadLetter) {
			return errf(http.StatusNotFound, "not_found", "seq", "%v", err)
		}
		if errors.Is(err, admin.ErrUnreplayable) {
			return errf(http.StatusUnprocessableEntity, "unreplayable", "seq", "%v", err)
		}
		if err != nil {
			return errf(http.StatusServiceUnavailable, "stream_unavailable", "", "%v", err)
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	route("/v1/dead/{seq}", "dead_one", []string{http.MethodGet, http.MethodDelete}, one, true)
	route("/v1/dead/{seq}/replay", "dead_replay", []string{http.MethodPost}, one, true)
}

// deadFilter reads a dead-letter filter from a query: its type must be a
// job type (a wildcard would reach every type's letters).
func deadFilter(q url.Values) (admin.DeadFilter, *apiError) {
	f := admin.DeadFilter{Type: q.Get("type"), Round: q.Get("round"), Code: q.Get("code")}
	if f.Type != "" {
		if err := admin.CheckType(f.Type); err != nil {
			return f, errf(http.StatusBadRequest, "invalid_request", "type", "%v", err)
		}
	}
	return f, nil
}

func (a *API) countDead(action string, n int) {
	if a.cfg.Metrics != nil {
		a.cfg.Metrics.dead.WithLabelValues(action).Add(float64(n))
	}
}
