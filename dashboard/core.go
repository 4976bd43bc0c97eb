package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/admin"
)

// The core routes: the daemon serves its own versions of these (same paths
// and shapes); a dashboard mounted by a Go program serves these.

func (d *Dashboard) round(w http.ResponseWriter, r *http.Request) error {
	typ := r.PathValue("type")
	key, err := roundKeyOf(r)
	if err != nil {
		return err
	}
	if _, err := d.policyOf(typ); err != nil {
		return err
	}
	if r.Method == http.MethodGet {
		round, found, err := d.cfg.Coalescer.Inspect(r.Context(), typ, key)
		if err != nil {
			return errf(http.StatusServiceUnavailable, "store_unavailable", "", "%v", err)
		}
		if !found {
			return errf(http.StatusNotFound, "not_found", "", "no round pending for %s %s", typ, key)
		}
		writeJSON(w, http.StatusOK, round)
		return nil
	}
	raw := r.URL.Query().Get("round")
	token, err := debounce.ParseToken(raw)
	if err != nil || token == 0 {
		return errf(http.StatusBadRequest, "invalid_round", "round", "required: ?round=<16 hex digits>, the round to cancel")
	}
	round, res, err := d.cfg.Coalescer.CancelRound(r.Context(), typ, key, token)
	if err != nil {
		return errf(http.StatusServiceUnavailable, "store_unavailable", "", "%v", err)
	}
	switch res {
	case debounce.CancelNotFound:
		return errf(http.StatusNotFound, "not_found", "", "no round %s of %s %s", token, typ, key)
	case debounce.CancelOtherRound:
		return errf(http.StatusConflict, "other_round", "round", "round %s of %s %s is no longer pending; round %s is, and was not cancelled", token, typ, key, round.Token)
	case debounce.CancelStarted:
		return errf(http.StatusConflict, "already_started", "round", "round %s of %s %s has started (or finished): too late to cancel", token, typ, key)
	case debounce.CancelAlreadyCancelled:
		return errf(http.StatusConflict, "already_cancelled", "round", "round %s of %s %s was cancelled already; nothing changed", token, typ, key)
	}
	purged, err := d.cfg.Publisher.Cancel(r.Context(), typ, key, token)
	if err != nil {
		return errf(http.StatusServiceUnavailable, "publish_unavailable", "", "the round was cancelled in Redis but its messages could not be purged (%v); its job will start, find the round cancelled and not run", err)
	}
	writeJSON(w, http.StatusOK, map[string]any{"cancelled": round, "purged": purged})
	return nil
}

func (d *Dashboard) explain(w http.ResponseWriter, r *http.Request) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		return errf(http.StatusRequestEntityTooLarge, "too_large", "", "reading the body: %v", err)
	}
	var ev struct {
		Type string          `json:"type"`
		Args json.RawMessage `json:"args"`
		Key  string          `json:"key"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		return errf(http.StatusBadRequest, "invalid_json", "", `the body must be one event: {"type":"…","args":{…}}: %v`, err)
	}
	if _, err := d.policyOf(ev.Type); err != nil {
		return err
	}
	if ev.Args == nil {
		return errf(http.StatusBadRequest, "invalid_args", "args", "args: required; send {} when the job has none")
	}
	ex, err := d.cfg.Coalescer.Explain(r.Context(), debounce.Event{Type: ev.Type, Args: ev.Args, Key: ev.Key})
	var ee *debounce.EventError
	switch {
	case errors.As(err, &ee):
		return errf(http.StatusBadRequest, ee.Code, ee.Field, "%s", ee.Msg)
	case errors.Is(err, debounce.ErrInvalidEvent):
		return errf(http.StatusBadRequest, "invalid_event", "", "%v", err)
	case err != nil:
		return errf(http.StatusServiceUnavailable, "store_unavailable", "", "%v", err)
	}
	p, _ := d.cfg.Coalescer.Policy(ev.Type)
	writeJSON(w, http.StatusOK, struct {
		debounce.Explanation
		Policy PolicyView `json:"policy"`
	}{ex, ViewPolicy(p)})
	return nil
}

func (d *Dashboard) policies(w http.ResponseWriter, _ *http.Request) error {
	ps := d.cfg.Coalescer.Policies()
	slices.SortFunc(ps, func(x, y debounce.Policy) int { return strings.Compare(x.Type, y.Type) })
	views := make([]PolicyView, len(ps))
	for i, p := range ps {
		views[i] = ViewPolicy(p)
	}
	writeJSON(w, http.StatusOK, map[string]any{"policies": views})
	return nil
}

// PolicyView is a policy as the API shows it (the daemon's GET
// /v1/policies): the YAML keys, durations as text.
type PolicyView struct {
	Type      string   `json:"type"`
	Mode      string   `json:"mode"`
	Window    string   `json:"window,omitempty"`
	TTL       string   `json:"ttl,omitempty"`
	Extend    bool     `json:"extend,omitempty"`
	MaxWait   string   `json:"max_wait,omitempty"`
	Payload   string   `json:"payload"`
	MaxItems  int      `json:"max_items,omitempty"`
	ItemField string   `json:"item_field,omitempty"`
	KeyFields []string `json:"key_fields,omitempty"`
	Until     string   `json:"until,omitempty"`
	Trailing  bool     `json:"trailing,omitempty"`
	Fail      string   `json:"fail"`
}

// ViewPolicy converts a policy for display.
func ViewPolicy(p debounce.Policy) PolicyView {
	dur := func(v time.Duration) string {
		if v == 0 {
			return ""
		}
		return v.String()
	}
	return PolicyView{Type: p.Type, Mode: string(p.Mode), Window: dur(p.Window), TTL: dur(p.TTL), Extend: p.Extend,
		MaxWait: dur(p.MaxWait), Payload: string(p.Payload), MaxItems: p.MaxItems, ItemField: p.ItemField,
		KeyFields: p.KeyFields, Until: string(p.Until), Trailing: p.Trailing, Fail: string(p.Fail)}
}

func deadFilter(r *http.Request) admin.DeadFilter {
	q := r.URL.Query()
	return admin.DeadFilter{Type: q.Get("type"), Round: q.Get("round"), Code: q.Get("code")}
}

func (d *Dashboard) deadList(w http.ResponseWriter, r *http.Request) error {
	f := deadFilter(r)
	if r.Method == http.MethodDelete {
		if f.Type == "" {
			return errf(http.StatusBadRequest, "invalid_request", "type", "purging dead letters needs ?type= (and optionally &round=, &code=), or DELETE /v1/dead/{seq}")
		}
		n, err := d.dead.PurgeMatching(r.Context(), f)
		if err != nil {
			return errf(http.StatusServiceUnavailable, "stream_unavailable", "", "purge: %v", err)
		}
		writeJSON(w, http.StatusOK, map[string]int{"purged": n})
		return nil
	}
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			return errf(http.StatusBadRequest, "invalid_request", "limit", "limit %q: want 1 to 10000", v)
		}
		limit = n
	}
	letters, matching, codes, err := d.dead.Match(r.Context(), f, limit)
	if err != nil {
		return errf(http.StatusServiceUnavailable, "stream_unavailable", "", "list: %v", err)
	}
	if letters == nil {
		letters = []admin.DeadLetter{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"dead_letters": letters, "matching": matching, "codes": codes})
	return nil
}

func (d *Dashboard) deadReplayAll(w http.ResponseWriter, r *http.Request) error {
	n, err := d.dead.ReplayMatching(r.Context(), deadFilter(r))
	if err != nil {
		return errf(http.StatusServiceUnavailable, "stream_unavailable", "", "replayed %d, then: %v", n, err)
	}
	writeJSON(w, http.StatusOK, map[string]int{"replayed": n})
	return nil
}

func (d *Dashboard) deadOne(w http.ResponseWriter, r *http.Request) error {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		return errf(http.StatusBadRequest, "invalid_request", "seq", "%q is not a dead letter's sequence (a whole number from the list)", r.PathValue("seq"))
	}
	var out any
	switch r.Method {
	case http.MethodGet:
		out, err = d.dead.Show(r.Context(), seq)
	case http.MethodDelete:
		_, err = d.dead.Purge(r.Context(), "", "", seq)
		out = map[string]int{"purged": 1}
	default:
		out, err = d.dead.Replay(r.Context(), seq)
	}
	if errors.Is(err, admin.ErrNoDeadLetter) {
		return errf(http.StatusNotFound, "not_found", "seq", "%v", err)
	}
	if err != nil {
		return errf(http.StatusServiceUnavailable, "stream_unavailable", "", "%v", err)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
