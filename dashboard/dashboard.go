package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/access"
	"github.com/coalesce-io/coalesce/internal/admin"
	"github.com/coalesce-io/coalesce/publisher"
)

// Config configures a Dashboard.
type Config struct {
	Coalescer *debounce.Coalescer  // required
	Publisher *publisher.Publisher // required: pending rounds, cancel, dead letters, workers
	JetStream jetstream.JetStream  // required: dead letters and workers

	// Tokens may act (cancel, replay, purge); ReadTokens may only look. No
	// Tokens: no sign-in, everyone acts (keep such a dashboard on loopback).
	Tokens, ReadTokens []string
	// Path is where the Handler is mounted, with its trailing slash
	// (default "/"; the daemon uses "/ui/"). The session cookie is scoped
	// to "/" so that the pages may call an API mounted beside them.
	Path string
	// APIBase is where the pages find the JSON API ("/" when the API's /v1
	// routes are served at the root, as the daemon does). Empty: the
	// Handler serves the API itself under Path + "api/".
	APIBase string
	// Counters are the cumulative counts the overview charts (sampled every
	// SampleEvery by Run). Nil: a Recorder's, when Recorder is set.
	Counters func() Counters
	// Recorder counts decisions and remembers recent rounds for the
	// timelines (Recorder.Hooks on the Coalescer's Config). Optional.
	Recorder *Recorder
	// History remembers recent rounds for the timelines (nil: the
	// Recorder's); whoever decides calls History.Decided.
	History *History
	// Outbox reports the Postgres outbox's backlog when a relay runs.
	Outbox func(ctx context.Context) (OutboxState, error)
	// SampleEvery is the charts' resolution (DefaultSampleEvery); they keep
	// the last hour.
	SampleEvery time.Duration
	Logger      *slog.Logger
}

// DefaultSampleEvery is how often Run samples the counters.
const DefaultSampleEvery = 5 * time.Second

// Dashboard serves coalesce's web dashboard and its JSON API.
type Dashboard struct {
	cfg    Config
	access *access.Tokens
	dead   admin.Dead
	stats  *ring
	log    *slog.Logger
	pend   *pendingCache
}

// ErrInvalidConfig: New was given a configuration it cannot serve.
var ErrInvalidConfig = errors.New("dashboard: invalid config")

// New returns a dashboard; serve its Handler and call Run to sample the
// overview's charts.
func New(cfg Config) (*Dashboard, error) {
	if cfg.Coalescer == nil || cfg.Publisher == nil || cfg.JetStream == nil {
		return nil, fmt.Errorf("%w: Coalescer, Publisher and JetStream are required", ErrInvalidConfig)
	}
	if cfg.Path == "" {
		cfg.Path = "/"
	}
	if !strings.HasPrefix(cfg.Path, "/") || !strings.HasSuffix(cfg.Path, "/") {
		return nil, fmt.Errorf("%w: Path %q must start and end with /", ErrInvalidConfig, cfg.Path)
	}
	if cfg.APIBase != "" && !strings.HasSuffix(cfg.APIBase, "/") {
		return nil, fmt.Errorf("%w: APIBase %q must end with /", ErrInvalidConfig, cfg.APIBase)
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = DefaultSampleEvery
	}
	if cfg.Counters == nil && cfg.Recorder != nil {
		cfg.Counters = cfg.Recorder.Counters
	}
	if cfg.History == nil && cfg.Recorder != nil {
		cfg.History = cfg.Recorder.History
	}
	d := &Dashboard{cfg: cfg, access: access.New(cfg.Tokens, cfg.ReadTokens), log: cfg.Logger,
		dead:  admin.Dead{JS: cfg.JetStream, Stream: cfg.Publisher.Stream(), Subjects: cfg.Publisher.Subjects()},
		stats: newRing(int(time.Hour / cfg.SampleEvery)), pend: &pendingCache{m: map[string]pendingCount{}}}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	return d, nil
}

// Run samples the counters every SampleEvery until ctx ends.
func (d *Dashboard) Run(ctx context.Context) {
	if d.cfg.Counters == nil {
		return
	}
	t := time.NewTicker(d.cfg.SampleEvery)
	defer t.Stop()
	d.stats.add(time.Now(), d.cfg.Counters())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			d.stats.add(now, d.cfg.Counters())
		}
	}
}

// Error is the body of every error answer: {"error":{"code","message","field"}}.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

func (e *Error) Error() string { return e.Message }

func errf(status int, code, field, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Route is one JSON route of the dashboard's API. Its handler returns nil
// once it has written its answer, or the *Error to answer.
type Route struct {
	Pattern string // as http.ServeMux takes it, e.g. "/v1/overview"
	Name    string // a short name, for metrics
	Methods []string
	Handle  func(w http.ResponseWriter, r *http.Request) error
	// Core routes are the daemon's own (explain, a round, policies, dead
	// letters): a daemon serves its versions and registers only the others.
	Core bool
}

// Routes are the API's routes.
func (d *Dashboard) Routes() []Route {
	get := []string{http.MethodGet}
	return []Route{
		{Pattern: "/v1/overview", Name: "overview", Methods: get, Handle: d.overview},
		{Pattern: "/v1/rounds/{type}", Name: "rounds_list", Methods: get, Handle: d.listRounds},
		{Pattern: "/v1/rounds/{type}/{key}/history", Name: "rounds_history", Methods: get, Handle: d.history},
		{Pattern: "/v1/search", Name: "search", Methods: get, Handle: d.search},
		{Pattern: "/v1/workers", Name: "workers", Methods: get, Handle: d.workers},
		{Pattern: "/v1/rounds/{type}/{key}", Name: "rounds", Methods: []string{http.MethodGet, http.MethodDelete}, Handle: d.round, Core: true},
		{Pattern: "/v1/explain", Name: "explain", Methods: []string{http.MethodPost}, Handle: d.explain, Core: true},
		{Pattern: "/v1/policies", Name: "policies", Methods: get, Handle: d.policies, Core: true},
		{Pattern: "/v1/dead", Name: "dead", Methods: []string{http.MethodGet, http.MethodDelete}, Handle: d.deadList, Core: true},
		{Pattern: "/v1/dead:replay", Name: "dead_replay_all", Methods: []string{http.MethodPost}, Handle: d.deadReplayAll, Core: true},
		{Pattern: "/v1/dead/{seq}", Name: "dead_one", Methods: []string{http.MethodGet, http.MethodDelete}, Handle: d.deadOne, Core: true},
		{Pattern: "/v1/dead/{seq}/replay", Name: "dead_replay", Methods: []string{http.MethodPost}, Handle: d.deadOne, Core: true},
	}
}

// readOnlyRoutes take a POST and change nothing.
var readOnlyRoutes = map[string]bool{"explain": true}

// api serves Routes under the Handler's api/ when APIBase is empty, with
// the same access rules as the daemon: a token or the session cookie, the
// CSRF token for an action, a read-only token refused on an action.
func (d *Dashboard) api() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range d.Routes() {
		mux.HandleFunc(rt.Pattern, func(w http.ResponseWriter, r *http.Request) {
			if !contains(rt.Methods, r.Method) {
				w.Header().Set("Allow", strings.Join(rt.Methods, ", "))
				writeError(w, errf(http.StatusMethodNotAllowed, "method_not_allowed", "", "%s is not allowed on %s", r.Method, r.URL.Path))
				return
			}
			lvl, err := d.access.Request(r)
			switch {
			case errors.Is(err, access.ErrCSRF):
				writeError(w, errf(http.StatusForbidden, "csrf", "", "missing or stale CSRF token (%s): reload the page and try again", access.CSRFHeader))
				return
			case lvl == access.None:
				writeError(w, errf(http.StatusUnauthorized, "unauthorized", "", "missing or wrong bearer token: send Authorization: Bearer <token>"))
				return
			case lvl < access.Write && r.Method != http.MethodGet && !readOnlyRoutes[rt.Name]:
				writeError(w, errf(http.StatusForbidden, "read_only", "", "a read-only token cannot %s %s", r.Method, r.URL.Path))
				return
			}
			if err := rt.Handle(w, r); err != nil {
				writeError(w, err)
			}
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errf(http.StatusNotFound, "not_found", "", "no route %s %s", r.Method, r.URL.Path))
	})
	return mux
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = errf(http.StatusInternalServerError, "internal", "", "%v", err)
	}
	writeJSON(w, e.Status, struct {
		Error *Error `json:"error"`
	}{e})
}
