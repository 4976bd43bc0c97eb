package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/fingerprint"
)

// Single events: POST /v1/events and the strict event decoder.

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
