package daemon

import (
	"net/http"

	"github.com/coalesce-io/coalesce/debounce"
)

// postExplain serves POST /v1/explain: what an event would do, deciding
// nothing.
func (a *API) postExplain(w http.ResponseWriter, r *http.Request) *apiError {
	if e := a.admit(); e != nil {
		return e
	}
	defer a.inFlight.Add(-1)
	ev, e := a.readEvent(w, r)
	if e != nil {
		return e
	}
	ex, err := a.cfg.Coalescer.Explain(r.Context(), ev)
	if err != nil {
		return submitError(err)
	}
	p, _ := a.cfg.Coalescer.Policy(ev.Type)
	writeJSON(w, http.StatusOK, struct {
		debounce.Explanation
		Policy PolicyView `json:"policy"`
	}{ex, ViewPolicy(p)})
	return nil
}
