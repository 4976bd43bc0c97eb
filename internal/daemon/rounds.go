package daemon

import (
	"net/http"

	"github.com/coalesce-io/coalesce/debounce"
)

// round serves GET /v1/rounds/{type}/{key} (the pending round) and DELETE
// (cancel the round named by ?round=, fenced).
func (a *API) round(w http.ResponseWriter, r *http.Request) *apiError {
	jobType := r.PathValue("type")
	key, err := debounce.ParseRoundKey(r.PathValue("key"))
	if err != nil {
		return errf(http.StatusBadRequest, "invalid_key", "key", "%s: the round key is the 64 hex digits a decision returns as key", r.PathValue("key"))
	}
	if _, ok := a.cfg.Coalescer.Policy(jobType); !ok {
		return errf(http.StatusNotFound, "no_policy", "type", "no policy for job type %q", jobType)
	}
	if r.Method == http.MethodGet {
		round, found, err := a.cfg.Coalescer.Inspect(r.Context(), jobType, key)
		if err != nil {
			return submitError(err)
		}
		if !found {
			return errf(http.StatusNotFound, "not_found", "", "no round pending for %s %s", jobType, key)
		}
		writeJSON(w, http.StatusOK, round)
		return nil
	}
	raw := r.URL.Query().Get("round")
	if raw == "" {
		return errf(http.StatusBadRequest, "invalid_round", "round", "required: ?round=<16 hex digits>, the round to cancel (a decision's round, or GET this path): a cancel names its round, so that a replayed one never cancels the next")
	}
	token, err := debounce.ParseToken(raw)
	if err != nil || token == 0 {
		return errf(http.StatusBadRequest, "invalid_round", "round", "%q is not a round token (16 hex digits)", raw)
	}
	round, res, err := a.cfg.Coalescer.CancelRound(r.Context(), jobType, key, token)
	if err != nil {
		return submitError(err)
	}
	switch res {
	case debounce.CancelNotFound:
		return errf(http.StatusNotFound, "not_found", "", "no round %s of %s %s", token, jobType, key)
	case debounce.CancelOtherRound:
		return errf(http.StatusConflict, "other_round", "round", "round %s of %s %s is no longer pending; round %s is, and was not cancelled", token, jobType, key, round.Token)
	case debounce.CancelStarted:
		return errf(http.StatusConflict, "already_started", "round", "round %s of %s %s has started (or finished): too late to cancel", token, jobType, key)
	case debounce.CancelAlreadyCancelled:
		return errf(http.StatusConflict, "already_cancelled", "round", "round %s of %s %s was cancelled already; nothing changed", token, jobType, key)
	}
	var purged uint64
	if a.cfg.Publisher != nil {
		if purged, err = a.cfg.Publisher.Cancel(r.Context(), jobType, key, token); err != nil {
			return errf(http.StatusServiceUnavailable, "publish_unavailable", "", "the round was cancelled in Redis but its messages could not be purged (%v); its job will start, find the round cancelled and not run", err)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"cancelled": round, "purged": purged})
	return nil
}
