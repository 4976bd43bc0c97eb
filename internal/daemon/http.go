package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/coalesce-io/coalesce/dashboard"
	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/access"
	"github.com/coalesce-io/coalesce/internal/admin"
	"github.com/coalesce-io/coalesce/publisher"
)

// DefaultBodyLimit bounds a request body.
const DefaultBodyLimit = 1 << 20

// BatchLimitFactor: a batch body may be this many times the body limit.
const BatchLimitFactor = 64

// DefaultBatches is how many batch requests are decided at once.
const DefaultBatches = 4

// BatchMaxLines bounds the lines of one batch: the lines after it are not
// decided, and one last answer line says from which line on.
const BatchMaxLines = 50_000

// DefaultBatchWait is how long a batch waits for a slot before it is
// answered 429 busy (with Retry-After), nothing decided.
const DefaultBatchWait = 10 * time.Second

// DefaultMaxInFlight bounds the single-event requests (events, explain)
// decided at once; more are answered 429 overloaded (with Retry-After).
const DefaultMaxInFlight = 10_000

// APIConfig configures the HTTP API.
type APIConfig struct {
	Coalescer *debounce.Coalescer  // required
	Publisher *publisher.Publisher // cancel purges the round's schedule; nil skips that
	Protocol  *Protocol            // serves /v1/jobs/start and /v1/jobs/finish; nil: not served
	Dead      *admin.Dead          // serves /v1/dead; nil: not served
	Ready     func(ctx context.Context) map[string]error
	Tokens    []string // bearer tokens; empty: no authentication
	// ReadTokens may read (GET, explain) and not act (403 read_only).
	ReadTokens []string
	BodyLimit  int64 // DefaultBodyLimit
	// BatchParallel bounds the decisions of one batch request in flight.
	BatchParallel int
	// Batches bounds the batch requests in progress (DefaultBatches); more
	// wait for a slot, up to BatchWait (DefaultBatchWait), then are
	// answered 429.
	Batches   int
	BatchWait time.Duration
	// MaxInFlight bounds the single-event requests decided at once
	// (DefaultMaxInFlight); more are answered 429.
	MaxInFlight int
	Metrics     *Metrics
	// WriteTimeout is the server's (http.write_timeout): a batch renews it
	// as it writes each chunk's answers, so a batch that takes long to
	// decide is answered in full. 0: left as the server set it.
	WriteTimeout time.Duration
	// ReadTimeout is the server's (http.read_timeout): a batch that waited
	// for its slot gets it afresh to read its body. 0: left as set.
	ReadTimeout time.Duration
	// PublicMetrics serves /metrics without a token even when Tokens are
	// set (for a scraper that cannot send one). By default /metrics takes
	// a token whenever the API does.
	PublicMetrics bool
	Logger        *slog.Logger
	// Dashboard serves the overview, rounds, history, search and workers
	// routes; nil: not served. UI also serves its pages at /ui/.
	Dashboard *dashboard.Dashboard
	UI        bool
	// Tracer, when set, traces requests and decisions (tracing.go); nil:
	// off, at no cost.
	Tracer trace.Tracer
}

// API serves HTTP API v1.
type API struct {
	cfg      APIConfig
	access   *access.Tokens
	log      *slog.Logger
	batches  chan struct{} // a slot per batch in progress
	inFlight atomic.Int64  // single-event requests being decided
	routes   []Route
}

// Route is one pattern the API serves, with its methods (the contract
// test compares them with the OpenAPI document).
type Route struct {
	Pattern string
	Methods []string
	Auth    bool
}

// Routes lists what Handler serves, in registration order.
func (a *API) Routes() []Route { return slices.Clone(a.routes) }

// NewAPI returns the API; Handler serves it.
func NewAPI(cfg APIConfig) *API {
	if cfg.BodyLimit <= 0 {
		cfg.BodyLimit = DefaultBodyLimit
	}
	if cfg.BatchParallel <= 0 {
		cfg.BatchParallel = 64
	}
	if cfg.Batches <= 0 {
		cfg.Batches = DefaultBatches
	}
	if cfg.BatchWait <= 0 {
		cfg.BatchWait = DefaultBatchWait
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	a := &API{cfg: cfg, log: cfg.Logger, batches: make(chan struct{}, cfg.Batches)}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	a.access = access.New(cfg.Tokens, cfg.ReadTokens)
	return a
}

// apiError is the body of every error answer.
type apiError struct {
	status int
	// retryAfter is the Retry-After of a 429 or 503 (retryAfterDefault
	// when zero).
	retryAfter time.Duration
	Code       string `json:"code"`
	Message    string `json:"message"`
	Field      string `json:"field,omitempty"`
}

func (e *apiError) Error() string { return e.Message }

type errorBody struct {
	Error *apiError `json:"error"`
}

func errf(status int, code, field, format string, args ...any) *apiError {
	return &apiError{status: status, Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// retryAfterDefault is the Retry-After of a 429 or 503 that names none:
// long enough for a Redis or NATS failover or a burst to pass, short
// enough that a client's retry is not the slow part.
const retryAfterDefault = time.Second

// setRetryAfter adds Retry-After (whole seconds, at least 1) to a 429 or
// 503 answer: every such answer carries one (the OpenAPI document says so).
func setRetryAfter(h http.Header, status int, after time.Duration) {
	if status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
		return
	}
	if after <= 0 {
		after = retryAfterDefault
	}
	h.Set("Retry-After", strconv.FormatInt(int64((after+time.Second-1)/time.Second), 10))
}

// Handler returns the routes. When tokens are configured every /v1 route
// and /metrics (unless PublicMetrics) need a bearer token; /healthz and
// /readyz stay open for probes, /readyz showing a failing check's error
// only to a request with a token.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	a.routes = a.routes[:0]
	// Every route is registered here: Routes lists them for the contract
	// test, which fails when one is missing from api/openapi.yaml.
	route := func(pattern, name string, methods []string, h func(w http.ResponseWriter, r *http.Request) *apiError, auth bool) {
		a.routes = append(a.routes, Route{Pattern: pattern, Methods: methods, Auth: auth})
		handle := func(pattern string, h http.HandlerFunc) {
			if a.cfg.Tracer != nil {
				h = traced(a.cfg.Tracer, "", pattern, h)
			}
			mux.HandleFunc(pattern, h)
		}
		handle(pattern, func(w http.ResponseWriter, r *http.Request) {
			sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
			var e *apiError
			switch {
			case !slices.Contains(methods, r.Method):
				sw.Header().Set("Allow", strings.Join(methods, ", "))
				e = errf(http.StatusMethodNotAllowed, "method_not_allowed", "", "%s is not allowed on %s; use %s", r.Method, r.URL.Path, strings.Join(methods, " or "))
			default:
				if e = a.allow(sw, r, name, auth); e == nil {
					e = h(sw, r)
				}
			}
			if e != nil {
				setRetryAfter(sw.Header(), e.status, e.retryAfter)
				writeJSON(sw, e.status, errorBody{e})
			}
			if a.cfg.Metrics != nil {
				a.cfg.Metrics.http.WithLabelValues(name, strconv.Itoa(sw.code)).Inc()
			}
		})
	}
	route("/v1/events", "events", []string{http.MethodPost}, a.postEvent, true)
	route("/v1/events:batch", "events_batch", []string{http.MethodPost}, a.postBatch, true)
	route("/v1/explain", "explain", []string{http.MethodPost}, a.postExplain, true)
	route("/v1/rounds/{type}/{key}", "rounds", []string{http.MethodGet, http.MethodDelete}, a.round, true)
	route("/v1/policies", "policies", []string{http.MethodGet}, a.getPolicies, true)
	route("/v1/openapi.json", "openapi", []string{http.MethodGet}, a.getOpenAPI, true)
	if a.cfg.Dead != nil {
		a.deadRoutes(route)
	}
	if a.cfg.Dashboard != nil {
		a.uiRoutes(mux, route)
	}
	if p := a.cfg.Protocol; p != nil {
		route("/v1/jobs/start", "jobs_start", []string{http.MethodPost}, httpOp(a, p.Start), true)
		route("/v1/jobs/progress", "jobs_progress", []string{http.MethodPost}, httpOp(a, p.Progress), true)
		route("/v1/jobs/finish", "jobs_finish", []string{http.MethodPost}, httpOp(a, p.Finish), true)
	}
	route("/healthz", "healthz", []string{http.MethodGet, http.MethodHead}, func(w http.ResponseWriter, _ *http.Request) *apiError {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		return nil
	}, false)
	route("/readyz", "readyz", []string{http.MethodGet, http.MethodHead}, a.readyz, false)
	if a.cfg.Metrics != nil {
		metrics := promhttp.HandlerFor(a.cfg.Metrics.Registry, promhttp.HandlerOpts{})
		route("/metrics", "metrics", []string{http.MethodGet}, func(w http.ResponseWriter, r *http.Request) *apiError {
			metrics.ServeHTTP(w, r)
			return nil
		}, !a.cfg.PublicMetrics)
	}
	route("/", "not_found", []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodHead},
		func(_ http.ResponseWriter, r *http.Request) *apiError {
			return errf(http.StatusNotFound, "not_found", "", "no route %s %s; see GET /v1/policies, POST /v1/events", r.Method, r.URL.Path)
		}, false)
	return mux
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (a *API) authorized(r *http.Request) bool {
	return a.access.Bearer(r) >= access.Read
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // the exact bytes: canonical args are what was hashed
	_ = enc.Encode(v)
}

// marshal encodes v as JSON without HTML escaping (encoding/json writes <, >,
// & and U+2028/9 as \u escapes by default, which would change the canonical
// args and the messages clients read).
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'})
}

// readBody reads the whole body within the limit: nothing is decided from a
// body that turns out too large.
func (a *API) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	return readLimited(w, r, a.cfg.BodyLimit)
}

func readLimited(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *apiError) {
	if r.ContentLength > limit {
		return nil, errf(http.StatusRequestEntityTooLarge, "too_large", "", "body of %d bytes is over the %d-byte limit", r.ContentLength, limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, errf(http.StatusRequestEntityTooLarge, "too_large", "", "body is over the %d-byte limit", limit)
	case err != nil:
		return nil, errf(http.StatusBadRequest, "bad_body", "", "reading the body: %v", err)
	}
	return body, nil
}

// submitError maps Submit's errors to API errors.
func submitError(err error) *apiError {
	var ae *apiError
	var ee *debounce.EventError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, debounce.ErrIdempotencyKeyReused):
		return errf(http.StatusUnprocessableEntity, "idempotency_key_reused", "Idempotency-Key", "%v", err)
	case errors.Is(err, debounce.ErrNoPolicy):
		return errf(http.StatusNotFound, "no_policy", "type", "%v; see GET /v1/policies", err)
	case errors.Is(err, debounce.ErrJobTooLarge):
		return errf(http.StatusRequestEntityTooLarge, "job_too_large", "args", "%s", strings.TrimPrefix(err.Error(), debounce.ErrJobTooLarge.Error()+": "))
	case errors.As(err, &ee):
		return errf(http.StatusBadRequest, ee.Code, ee.Field, "%s", ee.Msg)
	case errors.Is(err, debounce.ErrInvalidEvent):
		return errf(http.StatusBadRequest, "invalid_event", "", "%v", err)
	case errors.Is(err, debounce.ErrNotReplicated):
		return errf(http.StatusServiceUnavailable, "not_replicated", "", "%v; the policy is fail: closed, so the event is not accepted: send it again (where the write stood, its round's count may then include it twice; an accumulated item or a payload last is never doubled)", err)
	case errors.Is(err, debounce.ErrStoreUnavailable):
		e := errf(http.StatusServiceUnavailable, "store_unavailable", "", "%v; the policy is fail: closed, so nothing was published: retry later", err)
		e.retryAfter = outageRetryAfter
		return e
	case errors.Is(err, debounce.ErrPublish):
		e := errf(http.StatusServiceUnavailable, "publish_unavailable", "", "%v; nothing was accepted: retry later", err)
		e.retryAfter = outageRetryAfter
		return e
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return errf(http.StatusServiceUnavailable, "canceled", "", "%v", err)
	default:
		return errf(http.StatusInternalServerError, "internal", "", "%v", err)
	}
}

// outageRetryAfter is the Retry-After of a 503 for a Redis or NATS outage:
// a failover takes a few seconds.
const outageRetryAfter = 2 * time.Second

// admit counts a single-event request in flight, or refuses it (429) when
// MaxInFlight are; an admitted request calls a.inFlight.Add(-1) once
// decided (a deferred call, not a closure: nothing allocated).
func (a *API) admit() *apiError {
	if a.inFlight.Add(1) > int64(a.cfg.MaxInFlight) {
		a.inFlight.Add(-1)
		e := errf(http.StatusTooManyRequests, "overloaded", "", "%d requests are being decided: nothing was decided; send it again after Retry-After", a.cfg.MaxInFlight)
		e.retryAfter = retryAfterDefault
		return e
	}
	return nil
}
