package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/coalesce-io/coalesce/api"
	"github.com/coalesce-io/coalesce/dashboard"
	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/fingerprint"
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

// DecodeEvent parses one event document strictly: an object with exactly the
// members type, args and optionally key, traceparent and idempotency_key, spelled in lower case,
// each once; the whole document I-JSON (unique member names, valid UTF-8, no
// lone surrogates, finite numbers) and nothing after it. Problems are refused
// with the field they are in.
func DecodeEvent(doc []byte) (debounce.Event, error) {
	// First the whole document through the strict canonicalizer: its errors
	// name the problem and the path (args.user.id), from the event's root.
	if _, err := fingerprint.Canonicalize(doc); err != nil {
		return debounce.Event{}, envelopeError(err)
	}
	dec := jsontext.NewDecoder(bytes.NewReader(doc))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return debounce.Event{}, errf(http.StatusBadRequest, "invalid_json", "", `the body must be one JSON object: {"type":"…","args":{…}}`)
	}
	var ev debounce.Event
	var haveArgs bool
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return ev, errf(http.StatusBadRequest, "invalid_json", "", "invalid JSON: %v", err)
		}
		name := tok.String()
		switch name {
		case "args":
			v, err := dec.ReadValue()
			if err != nil {
				return ev, errf(http.StatusBadRequest, "invalid_json", "args", "args: %v", err)
			}
			ev.Args, haveArgs = append(json.RawMessage(nil), v...), true
		case "type", "key", "traceparent", "idempotency_key":
			if k := dec.PeekKind(); k != '"' {
				return ev, errf(http.StatusBadRequest, "invalid_json", name, "%s: must be a string, not %s", name, kindName(k))
			}
			tok, err := dec.ReadToken()
			if err != nil {
				return ev, errf(http.StatusBadRequest, "invalid_json", name, "%s: %v", name, err)
			}
			switch name {
			case "type":
				ev.Type = tok.String()
			case "key":
				ev.Key = tok.String()
			case "idempotency_key":
				ev.IdempotencyKey = tok.String()
			default:
				ev.TraceParent = tok.String()
			}
		default:
			return ev, errf(http.StatusBadRequest, "unknown_field", name, "unknown field %q; an event has type, args, key, traceparent and idempotency_key (lower case)", truncateString(name, 64))
		}
	}
	if ev.Type == "" {
		return ev, errf(http.StatusBadRequest, "invalid_type", "type", "type: required, e.g. \"recompute_financials\"")
	}
	if !haveArgs {
		return ev, errf(http.StatusBadRequest, "invalid_args", "args", "args: required; send {} when the job has none")
	}
	if ev.TraceParent != "" && !debounce.ValidTraceParent(ev.TraceParent) {
		return ev, errf(http.StatusBadRequest, "invalid_traceparent", "traceparent", "traceparent: not a W3C traceparent (55-256 bytes of lowercase hex and dashes)")
	}
	if ev.IdempotencyKey != "" && !debounce.ValidIdempotencyKey(ev.IdempotencyKey) {
		return ev, errf(http.StatusBadRequest, "invalid_idempotency_key", "idempotency_key", "idempotency_key: must be 1-%d bytes of visible ASCII (a UUID, say)", debounce.MaxIdempotencyKeyLen)
	}
	return ev, nil
}

// envelopeError reports a canonicalizer error on the event document: its
// paths start at the event (args.args.x is the event's args.x).
func envelopeError(err error) *apiError {
	var fe *fingerprint.Error
	if !errors.As(err, &fe) {
		return errf(http.StatusBadRequest, "invalid_json", "", "%v", err)
	}
	path := strings.TrimPrefix(strings.TrimPrefix(fe.Path, "args"), ".")
	msg := fe.Msg
	if strings.HasPrefix(msg, "invalid JSON at byte 0: empty input") {
		msg = `empty body; send {"type":…,"args":{…}}`
	}
	if path != "" {
		msg = path + ": " + msg
	}
	return errf(http.StatusBadRequest, fe.Code(), path, "%s", msg)
}

func kindName(k jsontext.Kind) string {
	switch k {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '0':
		return "a number"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a value of another kind"
	}
}

func truncateString(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
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

// traceparent takes the trace context from the header when the body has
// none; an invalid header is ignored, as W3C Trace Context asks.
func traceparent(r *http.Request, ev *debounce.Event) {
	if h := r.Header.Get("traceparent"); ev.TraceParent == "" && debounce.ValidTraceParent(h) {
		ev.TraceParent = h
	}
}

// readEvent reads and decodes the one event a request carries.
func (a *API) readEvent(w http.ResponseWriter, r *http.Request) (debounce.Event, *apiError) {
	body, e := a.readBody(w, r)
	if e != nil {
		return debounce.Event{}, e
	}
	ev, err := DecodeEvent(body)
	if err != nil {
		return ev, submitError(err)
	}
	traceparent(r, &ev)
	return ev, nil
}

func (a *API) postEvent(w http.ResponseWriter, r *http.Request) *apiError {
	if e := a.admit(); e != nil {
		return e
	}
	defer a.inFlight.Add(-1)
	ev, e := a.readEvent(w, r)
	if e != nil {
		return e
	}
	if e := idempotencyKey(r, &ev); e != nil {
		return e
	}
	ctx, end := a.submitSpan(r.Context(), &ev)
	d, err := a.cfg.Coalescer.Submit(ctx, ev)
	end(d, err)
	if err != nil {
		return submitError(err)
	}
	if d.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

// idempotencyKey takes the Idempotency-Key header (the IETF httpapi draft: a
// structured-field string, "…", or a bare token) into the event; an event
// that names one itself must name the same.
func idempotencyKey(r *http.Request, ev *debounce.Event) *apiError {
	h := strings.TrimSpace(r.Header.Get("Idempotency-Key"))
	if h == "" {
		return nil
	}
	if len(h) >= 2 && h[0] == '"' && h[len(h)-1] == '"' {
		h = h[1 : len(h)-1]
	}
	if !debounce.ValidIdempotencyKey(h) {
		return errf(http.StatusBadRequest, "invalid_idempotency_key", "Idempotency-Key", "Idempotency-Key: must be 1-%d bytes of visible ASCII (a UUID, say), bare or in double quotes", debounce.MaxIdempotencyKeyLen)
	}
	if ev.IdempotencyKey != "" && ev.IdempotencyKey != h {
		return errf(http.StatusBadRequest, "invalid_idempotency_key", "Idempotency-Key", "the Idempotency-Key header and the event's idempotency_key differ; send one")
	}
	ev.IdempotencyKey = h
	return nil
}

// postBatch decides NDJSON events and answers NDJSON in the same order, one
// line per non-blank input line: the decision, or {"error":...}.
//
// The body is read first, line by line, into a spool (memory up to
// spoolInMemory, a temporary file beyond), so a batch over the byte limit
// (BatchLimitFactor times the body limit) or over BatchMaxLines lines is
// refused before any line is decided, and what it holds in memory is
// bounded by the configuration, not by its body: blank lines cost nothing,
// a line over the body limit is answered too_large in place. The spool is
// then decided a chunk at a time (batchChunkLines lines, events of one key
// in line order) and the answers written at the end, the write deadline
// renewed so a batch that takes longer than the server's write timeout is
// still answered in full.
func (a *API) postBatch(w http.ResponseWriter, r *http.Request) *apiError {
	limit := a.cfg.BodyLimit * BatchLimitFactor
	if r.ContentLength > limit {
		return errf(http.StatusRequestEntityTooLarge, "too_large", "", "body of %d bytes is over the %d-byte limit", r.ContentLength, limit)
	}
	rc := http.NewResponseController(w)
	if a.cfg.WriteTimeout > 0 {
		// The wait for a slot may outlast the server's write timeout: the
		// answer, a refusal included, gets its own, or the client sees the
		// connection close with no answer and cannot tell refused from lost.
		defer func() { _ = rc.SetWriteDeadline(time.Now().Add(a.cfg.WriteTimeout)) }()
	}
	wait := time.NewTimer(a.cfg.BatchWait)
	select {
	case a.batches <- struct{}{}:
		wait.Stop()
		defer func() { <-a.batches }()
	case <-wait.C:
		e := errf(http.StatusTooManyRequests, "busy", "", "every batch slot (%d) stayed taken for %v: nothing was decided; send the batch again after Retry-After", a.cfg.Batches, a.cfg.BatchWait)
		e.retryAfter = retryAfterDefault
		return e
	case <-r.Context().Done():
		wait.Stop()
		return errf(http.StatusServiceUnavailable, "canceled", "", "the request ended while waiting for a batch slot")
	}
	if a.cfg.ReadTimeout > 0 {
		// The wait for a slot is not the client's slowness: reading the
		// body starts its own read timeout.
		_ = rc.SetReadDeadline(time.Now().Add(a.cfg.ReadTimeout))
	}
	sp := &spool{}
	defer sp.close()
	br := bufio.NewReaderSize(http.MaxBytesReader(w, r.Body, limit), 64<<10)
	n := 0 // non-blank lines
	var tooLarge *http.MaxBytesError
	for {
		line, over, err := readLine(br, a.cfg.BodyLimit)
		if over || len(bytes.Trim(line, " \t\r\n")) > 0 { // JSON whitespace only: other spaces are bad lines
			if n++; n > BatchMaxLines {
				return errf(http.StatusRequestEntityTooLarge, "batch_too_long", "", "a batch holds at most %d lines; split it", BatchMaxLines)
			}
			if over {
				line = nil // an empty spool line: over the body limit
			}
			if werr := sp.writeLine(line); werr != nil {
				return errf(http.StatusServiceUnavailable, "spool_failed", "", "cannot hold the batch to decide it: %v", werr)
			}
		}
		switch {
		case err == nil:
			continue
		case errors.Is(err, io.EOF):
		case errors.As(err, &tooLarge):
			return errf(http.StatusRequestEntityTooLarge, "too_large", "", "body is over the %d-byte limit", limit)
		default:
			return errf(http.StatusBadRequest, "bad_body", "", "reading the body: %v", err)
		}
		break
	}
	src, err := sp.reader()
	if err != nil {
		return errf(http.StatusServiceUnavailable, "spool_failed", "", "cannot read the batch back: %v", err)
	}
	// From here every line is answered in place, in order, as its chunk is
	// decided: the status is 200 whatever the lines hold.
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	out := bufio.NewWriterSize(w, 32<<10)
	sr := bufio.NewReaderSize(src, 64<<10)
	var chunk [][]byte
	chunkBytes := int64(0)
	decide := func() {
		answers := a.decideBatch(r, chunk)
		if a.cfg.WriteTimeout > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(a.cfg.WriteTimeout))
		}
		for _, ans := range answers {
			_, _ = out.Write(ans)
			_ = out.WriteByte('\n')
		}
		if out.Flush() == nil {
			_ = rc.Flush()
		}
		chunk, chunkBytes = chunk[:0], 0
	}
	for {
		line, _, err := readLine(sr, a.cfg.BodyLimit)
		if err == nil || len(line) > 0 {
			if len(line) == 0 {
				chunk = append(chunk, nil) // answered too_large in place
			} else {
				chunk = append(chunk, bytes.Clone(line))
				chunkBytes += int64(len(line))
			}
			if len(chunk) >= batchChunkLines || chunkBytes >= 4*a.cfg.BodyLimit {
				decide()
			}
		}
		if err != nil {
			break
		}
	}
	if len(chunk) > 0 {
		decide()
	}
	return nil
}

// spoolInMemory: a batch spool up to this size stays in memory.
const spoolInMemory = 1 << 20

// spool holds a batch's non-blank lines, newline-terminated, until they are
// decided: in memory while small, in a temporary file (removed at close)
// beyond spoolInMemory.
type spool struct {
	mem bytes.Buffer
	f   *os.File
	bw  *bufio.Writer
}

func (s *spool) writeLine(line []byte) error {
	if s.f == nil && s.mem.Len()+len(line)+1 > spoolInMemory {
		f, err := os.CreateTemp("", "coalesce-batch-*")
		if err != nil {
			return err
		}
		s.f, s.bw = f, bufio.NewWriterSize(f, 64<<10)
		if _, err := s.mem.WriteTo(s.bw); err != nil {
			return err
		}
	}
	if s.f == nil {
		s.mem.Write(line)
		s.mem.WriteByte('\n')
		return nil
	}
	if _, err := s.bw.Write(line); err != nil {
		return err
	}
	return s.bw.WriteByte('\n')
}

func (s *spool) reader() (io.Reader, error) {
	if s.f == nil {
		return &s.mem, nil
	}
	if err := s.bw.Flush(); err != nil {
		return nil, err
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return s.f, nil
}

func (s *spool) close() {
	if s.f != nil {
		s.f.Close()
		os.Remove(s.f.Name())
	}
}

// batchChunkLines: the lines of a batch decided together.
const batchChunkLines = 256

// readLine reads one line (without its newline) of at most limit bytes,
// valid until the next read. A longer line is read to its end and dropped:
// over is true, line is nil. err is io.EOF after the last line, or the
// body's error.
func readLine(br *bufio.Reader, limit int64) (line []byte, over bool, err error) {
	frag, err := br.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		if int64(len(frag)) > limit+1 { // +1: the newline
			return nil, true, err
		}
		return bytes.TrimSuffix(frag, []byte{'\n'}), false, err
	}
	buf := bytes.Clone(frag)
	for errors.Is(err, bufio.ErrBufferFull) {
		frag, err = br.ReadSlice('\n')
		if !over {
			if int64(len(buf)+len(frag)) > limit+1 {
				over, buf = true, nil
			} else {
				buf = append(buf, frag...)
			}
		}
	}
	if over {
		return nil, true, err
	}
	return bytes.TrimSuffix(buf, []byte{'\n'}), false, err
}

// decideBatch decides the lines concurrently, except that the events of one
// round key are decided one after another in line order (so "first" and
// "last" mean what the batch says), and returns one answer per line.
func (a *API) decideBatch(r *http.Request, lines [][]byte) [][]byte {
	out := make([][]byte, len(lines))
	events := make([]debounce.Prepared, len(lines))
	types := make([]string, len(lines))
	groups := map[string][]int{}
	var order []string
	for i, line := range lines {
		if line == nil {
			out[i] = marshal(errorBody{errf(http.StatusRequestEntityTooLarge, "too_large", "", "line of the batch over the %d-byte body limit", a.cfg.BodyLimit)})
			continue
		}
		ev, err := DecodeEvent(line)
		var pr debounce.Prepared
		if err == nil {
			traceparent(r, &ev)
			pr, err = a.cfg.Coalescer.Prepare(ev)
		}
		if err != nil {
			out[i] = errorJSON(err)
			continue
		}
		events[i], types[i] = pr, ev.Type
		key := pr.Key()
		g := ev.Type + "\n" + string(key[:])
		if _, seen := groups[g]; !seen {
			order = append(order, g)
		}
		groups[g] = append(groups[g], i)
	}
	// BatchParallel workers take the groups in order (a goroutine per group
	// would grow a fresh stack for each).
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(a.cfg.BatchParallel, len(order)) {
		wg.Go(func() {
			for {
				gi := int(next.Add(1)) - 1
				if gi >= len(order) {
					return
				}
				for _, i := range groups[order[gi]] {
					ctx, end := r.Context(), noEnd
					if a.cfg.Tracer != nil {
						// The line's job keeps the line's own trace context
						// (prepared already); the span is the decision's.
						ev := debounce.Event{Type: types[i]}
						ctx, end = a.submitSpan(ctx, &ev)
					}
					d, err := a.cfg.Coalescer.SubmitPrepared(ctx, events[i])
					end(d, err)
					if err != nil {
						out[i] = errorJSON(err)
						continue
					}
					out[i] = appendDecision(nil, d)
				}
			}
		})
	}
	wg.Wait()
	return out
}

// appendDecision appends d as marshal writes it (TestAppendDecisionIsMarshal),
// without reflection: a batch writes one per event.
func appendDecision(b []byte, d debounce.Decision) []byte {
	if !plainJSON(d.Type) || !plainJSON(string(d.Outcome)) {
		return append(b, marshal(d)...)
	}
	b = append(b, `{"outcome":"`...)
	b = append(b, d.Outcome...)
	b = append(b, `","type":"`...)
	b = append(b, d.Type...)
	b = append(b, `","key":"`...)
	b = hex.AppendEncode(b, d.Key[:])
	b = append(b, `","fingerprint":"`...)
	b = hex.AppendEncode(b, d.Fingerprint[:])
	b = append(b, `","round":"`...)
	if d.Round != 0 {
		b = fmt.Appendf(b, "%016x", uint64(d.Round))
	}
	b = append(b, '"')
	if !d.DueAt.IsZero() {
		due, err := d.DueAt.MarshalJSON()
		if err != nil {
			return append(b[:0], marshal(d)...)
		}
		b = append(b, `,"due_at":`...)
		b = append(b, due...)
	}
	b = append(b, `,"events":`...)
	b = strconv.AppendInt(b, int64(d.Events), 10)
	if d.Replayed {
		b = append(b, `,"replayed":true`...)
	}
	return append(b, '}')
}

// plainJSON: s needs no escaping in a JSON string.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

func errorJSON(err error) []byte {
	b := marshal(errorBody{submitError(err)})
	return b
}

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
