package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/fingerprint"
	"github.com/coalesce-io/coalesce/internal/daemon"
	"github.com/coalesce-io/coalesce/internal/testenv"
)

// eventSeeds are event documents worth mutating: valid ones of each policy,
// and one of each way to be wrong.
var eventSeeds = []string{
	`{"type":"recompute","args":{"tenant_id":42,"order":1}}`,
	`{"type":"notify","args":{"c":1},"key":"user-7","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`,
	`{"type":"reindex","args":{"doc":"a\u00e9\ud83d\ude00"},"key":"k"}`,
	`{"type":"last","args":[1,2.50,-0,1e21,"\u2028<&>"]}`,
	` {"args":null,"type":"notify"} `,
	`{"type":"recompute","args":{"tenant_id":1}}]`,
	`{"type":"recompute","args":{"tenant_id":1},"args":{"tenant_id":2}}`,
	`{"TYPE":"notify","Args":{}}`,
	`{"type":"recompute","args":{"tenant_id":9007199254740993}}`,
	`{"type":"recompute","args":{"tenant_id":1,"tenant_id":2}}`,
	`{"type":"recompute","args":{"tenant_id":"\ud800"}}`,
	"{\"type\":\"recompute\",\"args\":{\"tenant_id\":\"\xff\"}}",
	"{\"type\":\"notify\",\"args\":{},\"key\":\"\xfe\xff\"}",
	`{"type":"recompute","args":{"tenant_id":1e400}}`,
	`{"type":"a b","args":{}}`,
	`{"type":"notify","args":{},"traceparent":"00-x\r\nInjected: 1"}`,
	`{"type":"notify","args":{},"priority":1}`,
	`{"type":7,"args":{}}`,
	`{"type":"notify"}`,
	`{"type":"notify","args":{}} {}`,
	`{"type":"notify","args":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
	`{"type":`,
	``,
	"\n",
	`[]`,
	`null`,
}

// fuzzPolicies cover each mode and payload, so every decision path is fuzzed.
var fuzzPolicies = []debounce.Policy{
	{Type: "recompute", Mode: debounce.ModeDebounce, Window: 30 * time.Second, KeyFields: []string{"tenant_id"}},
	{Type: "notify", Mode: debounce.ModeDedup, Fail: debounce.FailClosed},
	{Type: "reindex", Mode: debounce.ModeThrottle, Window: time.Minute, Trailing: true, Payload: debounce.PayloadAccumulate, ItemField: "doc", MaxItems: 5},
	{Type: "last", Mode: debounce.ModeDebounce, Window: 10 * time.Second, Extend: true, MaxWait: time.Minute, Payload: debounce.PayloadLast},
}

// FuzzDecodeEvent: DecodeEvent never panics, refuses with a message, and an
// event it accepts, encoded again, decodes to itself (args compacted, with the
// same fingerprint or the same refusal).
func FuzzDecodeEvent(f *testing.F) {
	for _, s := range eventSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		ev, err := daemon.DecodeEvent(doc)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("empty error for %q", doc)
			}
			return
		}
		if ev.Type == "" || len(bytes.TrimSpace(ev.Args)) == 0 || !json.Valid(ev.Args) {
			t.Fatalf("accepted %q as %+v: no type, or args not JSON", doc, ev)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(ev); err != nil {
			t.Fatalf("accepted %q but cannot encode it again: %v", doc, err)
		}
		again, err := daemon.DecodeEvent(buf.Bytes())
		if err != nil {
			t.Fatalf("accepted %q, encoded as %s, refused: %v", doc, buf.Bytes(), err)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, ev.Args); err != nil {
			t.Fatal(err)
		}
		if again.Type != ev.Type || again.Key != ev.Key || again.TraceParent != ev.TraceParent || !bytes.Equal(again.Args, compact.Bytes()) {
			t.Fatalf("not a fixed point:\n in %q\n 1st %+v\n 2nd %+v", doc, ev, again)
		}
		fp1, err1 := fingerprint.FromJSON("t", ev.Args)
		fp2, err2 := fingerprint.FromJSON("t", again.Args)
		if fp1 != fp2 || fingerprint.Code(err1) != fingerprint.Code(err2) {
			t.Fatalf("re-encoding changed the fingerprint of %q: %s %v / %s %v", ev.Args, fp1, err1, fp2, err2)
		}
	})
}

// errorCodes are the codes a batch line may carry with a healthy store and
// publisher; anything else (internal, store_unavailable, ...) is a bug.
var errorCodes = map[string]bool{
	"invalid_json": true, "unknown_field": true, "invalid_type": true, "invalid_args": true,
	"invalid_traceparent": true, "invalid_event": true, "no_policy": true, "duplicate_name": true,
	"invalid_utf8": true, "lone_surrogate": true, "non_finite": true, "unsafe_integer": true,
	"missing_key_field": true, "key_fields_not_object": true, "too_deep": true, "noncharacter": true,
}

// FuzzBatch: the batch handler (on miniredis and a publisher that accepts
// everything) answers 200 with exactly one line per non-blank input line,
// each a JSON decision or a JSON error with a known code; never a 5xx.
func FuzzBatch(f *testing.F) {
	f.Add([]byte(strings.Join(eventSeeds, "\n")))
	for _, s := range eventSeeds {
		f.Add([]byte(s + "\n" + s + "\r\n\n  \n" + s))
	}
	f.Add([]byte("\n\n\n"))
	f.Add([]byte("\x00\n\xff\n\t\n"))
	_, rdb := testenv.Miniredis(f)
	pub := debounce.PublisherFunc(func(context.Context, debounce.Job) error { return nil })
	co, err := debounce.New(debounce.Config{Redis: rdb, Publisher: pub, Policies: fuzzPolicies})
	if err != nil {
		f.Fatal(err)
	}
	h := daemon.NewAPI(daemon.APIConfig{Coalescer: co, BodyLimit: 4096, BatchParallel: 4}).Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > 4096*daemon.BatchLimitFactor {
			return
		}
		r := httptest.NewRequest(http.MethodPost, "/v1/events:batch", bytes.NewReader(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("batch of %q: %d %s", body, w.Code, w.Body)
		}
		want := 0
		for line := range bytes.SplitSeq(body, []byte{'\n'}) {
			if len(bytes.Trim(line, " \t\r")) > 0 { // JSON whitespace: a form feed line is a bad line, answered
				want++
			}
		}
		sc := bufio.NewScanner(w.Body)
		sc.Buffer(nil, 1<<20)
		got := 0
		for sc.Scan() {
			got++
			var ans struct {
				Outcome debounce.Outcome `json:"outcome"`
				Error   *struct{ Code, Message string }
			}
			if err := json.Unmarshal(sc.Bytes(), &ans); err != nil {
				t.Fatalf("answer line %d is not JSON (%v): %q", got, err, sc.Bytes())
			}
			switch {
			case ans.Error != nil && !errorCodes[ans.Error.Code]:
				t.Fatalf("answer line %d has code %q: %s", got, ans.Error.Code, sc.Bytes())
			case ans.Error == nil && ans.Outcome == "":
				t.Fatalf("answer line %d is neither a decision nor an error: %s", got, sc.Bytes())
			}
		}
		if err := sc.Err(); err != nil && !errors.Is(err, bufio.ErrTooLong) {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("%d answer lines for %d non-blank input lines of %q:\n%s", got, want, body, w.Body)
		}
	})
}

// FuzzIngestEvent: the NATS ingest decoder never panics; what it accepts has
// the subject's type and JSON args; a body that names its type decodes as
// over HTTP; a body without a type decodes as that body with the type added.
func FuzzIngestEvent(f *testing.F) {
	for _, s := range eventSeeds {
		f.Add([]byte(s))
	}
	for _, s := range []string{`{"args":{"a":1}}`, ` { } `, `{"args":1,"type":"recompute"}`, "\f{\"args\":{}}", `[]`, `{"type":null,"args":{}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := daemon.EventFrom("co.events.recompute", "recompute", data)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("empty error for %q", data)
			}
			return
		}
		if ev.Type != "recompute" || !json.Valid(ev.Args) {
			t.Fatalf("accepted %q as %+v", data, ev)
		}
		direct, derr := daemon.DecodeEvent(data)
		if derr == nil {
			if direct.Type != ev.Type || direct.Key != ev.Key || !bytes.Equal(direct.Args, ev.Args) {
				t.Fatalf("%q: ingest %+v, HTTP %+v", data, ev, direct)
			}
			return
		}
		// Accepted only with the type added: the body was an object without one.
		var probe map[string]json.RawMessage
		if err := json.Unmarshal(data, &probe); err != nil {
			t.Fatalf("accepted %q, which is not a JSON object: %v", data, err)
		}
		if _, ok := probe["type"]; ok {
			t.Fatalf("accepted %q, which names a type HTTP refuses (%v)", data, derr)
		}
	})
}
