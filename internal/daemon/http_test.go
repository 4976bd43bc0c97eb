package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/fingerprint"
	"github.com/coalesce-io/coalesce/internal/daemon"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/publisher"
)

func TestMain(m *testing.M) { testenv.MainWith(m, contractCoverage) }

var testPolicies = []debounce.Policy{
	{Type: "recompute", Mode: debounce.ModeDebounce, Window: 30 * time.Second, KeyFields: []string{"tenant_id"}},
	{Type: "notify", Mode: debounce.ModeDedup, Fail: debounce.FailClosed},
}

// testTypes are testPolicies' job types, the ones the metrics may name.
func testTypes() []string {
	var out []string
	for _, p := range testPolicies {
		out = append(out, p.Type)
	}
	return out
}

type apiFixture struct {
	api   *daemon.API
	srv   *httptest.Server
	co    *debounce.Coalescer
	pub   *publisher.Publisher
	nc    *nats.Conn
	js    jetstream.JetStream
	redis *testenv.RedisServer
}

// newAPI serves the API on a private redis-server and an embedded NATS.
func newAPI(t *testing.T, tokens ...string) *apiFixture {
	t.Helper()
	return newAPIWith(t, nil, tokens...)
}

// newAPIWith is newAPI with the API's configuration changed by mut.
func newAPIWith(t *testing.T, mut func(*daemon.APIConfig), tokens ...string) *apiFixture {
	t.Helper()
	return newAPIWithFixture(t, func(_ *apiFixture, _ jetstream.JetStream, c *daemon.APIConfig) {
		if mut != nil {
			mut(c)
		}
	}, tokens...)
}

// newAPIWithFixture is newAPIWith whose mut also sees the fixture and its
// JetStream.
func newAPIWithFixture(t *testing.T, mut func(*apiFixture, jetstream.JetStream, *daemon.APIConfig), tokens ...string) *apiFixture {
	t.Helper()
	return newAPIPolicies(t, testPolicies, mut, tokens...)
}

// newAPIPolicies is newAPIWithFixture with other policies (mut may be nil).
func newAPIPolicies(t *testing.T, policies []debounce.Policy, mut func(*apiFixture, jetstream.JetStream, *daemon.APIConfig), tokens ...string) *apiFixture {
	t.Helper()
	f := &apiFixture{redis: testenv.NewRedis(t)}
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr, DisableIdentity: true, MaxRetries: -1, DialTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	var js jetstream.JetStream
	f.nc, js = testenv.NATS(t).Connect(t)
	f.js = js
	var err error
	if f.pub, err = publisher.New(context.Background(), js, nil); err != nil {
		t.Fatal(err)
	}
	m := daemon.NewMetrics(testTypes()...)
	if f.co, err = debounce.New(debounce.Config{Redis: rdb, Publisher: f.pub, Policies: policies, Hooks: m.DebounceHooks()}); err != nil {
		t.Fatal(err)
	}
	cfg := daemon.APIConfig{Coalescer: f.co, Publisher: f.pub, Tokens: tokens, BodyLimit: 4096, Metrics: m,
		Ready: func(ctx context.Context) map[string]error { return map[string]error{"redis": rdb.Ping(ctx).Err()} }}
	if mut != nil {
		mut(f, js, &cfg)
	}
	f.api = daemon.NewAPI(cfg)
	report := checkContract(t) // its cleanup runs after the server's: every exchange is complete
	f.srv = httptest.NewServer(contract.Handler(f.api.Handler(), report))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *apiFixture) do(t *testing.T, method, path, body string, header ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

type errBody struct {
	Error struct{ Code, Message, Field string } `json:"error"`
}

func TestEventsAndErrors(t *testing.T) {
	t.Parallel()
	f := newAPI(t)
	code, body := f.do(t, "POST", "/v1/events", `{"type":"recompute","args":{"tenant_id":42,"order":1}}`)
	var d map[string]any
	if err := json.Unmarshal(body, &d); code != 200 || err != nil {
		t.Fatalf("POST /v1/events: %d %s", code, body)
	}
	for _, k := range []string{"outcome", "type", "key", "fingerprint", "round", "due_at", "events"} {
		if _, ok := d[k]; !ok {
			t.Errorf("decision lacks %q: %s", k, body)
		}
	}
	if d["outcome"] != "scheduled" || d["events"] != 1.0 {
		t.Errorf("decision %s", body)
	}
	_, body = f.do(t, "POST", "/v1/events", `{"type":"recompute","args":{"order":2,"tenant_id":42}}`, "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	if !bytes.Contains(body, []byte(`"outcome":"coalesced"`)) || !bytes.Contains(body, []byte(`"events":2`)) {
		t.Errorf("second event: %s", body)
	}

	tests := []struct {
		name, method, path, body string
		status                   int
		code, field, msgHas      string
	}{
		{"not JSON", "POST", "/v1/events", `{"type":`, 400, "invalid_json", "type", "unexpected end of input"},
		{"empty body", "POST", "/v1/events", ``, 400, "invalid_json", "", "empty body"},
		{"two documents", "POST", "/v1/events", `{"type":"recompute","args":{}} {}`, 400, "invalid_json", "", "after the top-level value"},
		{"unknown field", "POST", "/v1/events", `{"type":"recompute","args":{},"priority":1}`, 400, "unknown_field", "priority", `unknown field "priority"`},
		{"type not a string", "POST", "/v1/events", `{"type":7,"args":{}}`, 400, "invalid_json", "type", "must be a string"},
		{"no type", "POST", "/v1/events", `{"args":{}}`, 400, "invalid_type", "type", "required"},
		{"invalid type", "POST", "/v1/events", `{"type":"a b","args":{}}`, 400, "invalid_type", "type", `"a b" has ' '`},
		{"no args", "POST", "/v1/events", `{"type":"recompute"}`, 400, "invalid_args", "args", "required"},
		{"unsafe integer", "POST", "/v1/events", `{"type":"recompute","args":{"tenant_id":9007199254740993}}`, 400, "unsafe_integer", "args.tenant_id", "send it as a string"},
		{"duplicate member", "POST", "/v1/events", `{"type":"recompute","args":{"tenant_id":1,"tenant_id":2}}`, 400, "duplicate_name", "args.tenant_id", "duplicate member name"},
		{"missing key field", "POST", "/v1/events", `{"type":"recompute","args":{"order":1}}`, 400, "missing_key_field", "args.tenant_id", "missing"},
		{"invalid UTF-8", "POST", "/v1/events", "{\"type\":\"recompute\",\"args\":{\"tenant_id\":\"\xff\"}}", 400, "invalid_utf8", "args.tenant_id", "invalid UTF-8"},
		{"key too long", "POST", "/v1/events", `{"type":"recompute","args":{"tenant_id":1},"key":"` + strings.Repeat("k", 1025) + `"}`, 400, "invalid_event", "key", "1-1024 bytes"},
		{"no policy", "POST", "/v1/events", `{"type":"unknown","args":{}}`, 404, "no_policy", "type", `"unknown"`},
		{"too large", "POST", "/v1/events", `{"type":"recompute","args":{"x":"` + strings.Repeat("a", 5000) + `"}}`, 413, "too_large", "", "4096-byte limit"},
		{"wrong method", "GET", "/v1/events", ``, 405, "method_not_allowed", "", "use POST"},
		{"unknown route", "GET", "/v2/nothing", ``, 404, "not_found", "", "no route"},
		{"bad round key", "GET", "/v1/rounds/recompute/xyz", ``, 400, "invalid_key", "key", "64 hex"},
		{"round of unknown type", "GET", "/v1/rounds/unknown/" + strings.Repeat("0", 64), ``, 404, "no_policy", "type", ""},
		{"no such round", "GET", "/v1/rounds/recompute/" + strings.Repeat("0", 64), ``, 404, "not_found", "", "no round pending"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := f.do(t, tt.method, tt.path, tt.body)
			var e errBody
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("%d, body not JSON: %s", code, body)
			}
			if code != tt.status || e.Error.Code != tt.code || e.Error.Field != tt.field || !strings.Contains(e.Error.Message, tt.msgHas) {
				t.Errorf("got %d %+v, want %d %s field %q containing %q", code, e.Error, tt.status, tt.code, tt.field, tt.msgHas)
			}
		})
	}
	// Nothing refused changed Redis: still one round (tenant 42), two events.
	var dec debounce.Decision
	_ = json.Unmarshal(body, &dec)
	if r, found, _ := f.co.Inspect(context.Background(), "recompute", dec.Key); !found || r.Events != 2 {
		t.Errorf("after the refusals: %+v found=%v", r, found)
	}
	// Metrics count by type and outcome.
	_, metrics := f.do(t, "GET", "/metrics", "")
	for _, want := range []string{`coalesce_events_total{outcome="scheduled",type="recompute"} 1`, `coalesce_events_total{outcome="coalesced",type="recompute"} 1`, "coalesce_decision_seconds_bucket", `coalesce_http_requests_total{code="413",route="events"} 1`} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestBatchKeepsOrderAndAnswersBadLinesInPlace(t *testing.T) {
	t.Parallel()
	f := newAPI(t)
	var in strings.Builder
	const n = 300
	for i := range n {
		switch {
		case i%50 == 7:
			in.WriteString(`{"type":"recompute","args":{"tenant_id":1,"x":1,"x":2}}` + "\n")
		case i%50 == 9:
			in.WriteString("not json\n")
		default:
			fmt.Fprintf(&in, `{"type":"recompute","args":{"tenant_id":%d,"seq":%d}}`+"\n", i%5, i)
		}
	}
	in.WriteString("\n") // blank lines are ignored
	code, body := f.do(t, "POST", "/v1/events:batch", in.String())
	if code != 200 {
		t.Fatalf("batch: %d %s", code, body)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	i, scheduled, failed := 0, 0, 0
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case i%50 == 7:
			if !bytes.Contains(line, []byte(`"code":"duplicate_name"`)) {
				t.Errorf("line %d: %s, want duplicate_name", i, line)
			}
			failed++
		case i%50 == 9:
			if !bytes.Contains(line, []byte(`"code":"invalid_json"`)) {
				t.Errorf("line %d: %s, want invalid_json", i, line)
			}
			failed++
		default:
			var d debounce.Decision
			if err := json.Unmarshal(line, &d); err != nil || d.Type != "recompute" {
				t.Errorf("line %d: %s", i, line)
			}
			if d.Outcome == debounce.OutcomeScheduled {
				scheduled++
				if i >= 5 {
					t.Errorf("line %d opened a round; the events of one key are decided in line order, so lines 0-4 open them", i)
				}
			}
		}
		i++
	}
	if i != n || scheduled != 5 || failed != 12 {
		t.Errorf("%d answers (want %d), %d scheduled (want 5), %d failed (want 12)", i, n, scheduled, failed)
	}
}

func TestExplainRoundsAndPolicies(t *testing.T) {
	t.Parallel()
	f := newAPI(t)
	ev := `{"type":"recompute","args":{"tenant_id":7,"b":2}}`
	code, body := f.do(t, "POST", "/v1/explain", ev)
	var ex struct {
		Fingerprint, Key string
		Canonical        json.RawMessage `json:"canonical_args"`
		Would            string
		Policy           daemon.PolicyView
		Pending          *debounce.Round
	}
	if err := json.Unmarshal(body, &ex); code != 200 || err != nil || ex.Would != "scheduled" || string(ex.Canonical) != `{"tenant_id":7}` || ex.Policy.Window != "30s" || ex.Pending != nil {
		t.Fatalf("explain: %d %s", code, body)
	}
	if code, _ := f.do(t, "GET", "/v1/rounds/recompute/"+ex.Key, ""); code != 404 {
		t.Fatalf("explain opened a round (GET round: %d)", code)
	}
	_, body = f.do(t, "POST", "/v1/events", ev)
	var d debounce.Decision
	_ = json.Unmarshal(body, &d)
	code, body = f.do(t, "GET", "/v1/rounds/recompute/"+ex.Key, "")
	if code != 200 || !bytes.Contains(body, []byte(`"events":1`)) || !bytes.Contains(body, []byte(`"round":"`+d.Round.String()+`"`)) {
		t.Fatalf("GET round: %d %s", code, body)
	}
	if code, body := f.do(t, "DELETE", "/v1/rounds/recompute/"+ex.Key, ""); code != 400 || !bytes.Contains(body, []byte(`"field":"round"`)) {
		t.Fatalf("DELETE without ?round: %d %s, want 400 naming round", code, body)
	}
	roundPath := "/v1/rounds/recompute/" + ex.Key + "?round=" + d.Round.String()
	code, body = f.do(t, "DELETE", roundPath, "")
	// A round held in Redis until due has no message yet to purge; one with
	// a JetStream schedule has its schedule purged.
	purged := `"purged":1`
	if f.co.HoldsInRedis(context.Background(), "recompute") {
		purged = `"purged":0`
	}
	if code != 200 || !bytes.Contains(body, []byte(purged)) || !bytes.Contains(body, []byte(`"cancelled"`)) {
		t.Fatalf("DELETE round: %d %s, want cancelled with %s", code, body, purged)
	}
	if code, _ := f.do(t, "GET", "/v1/rounds/recompute/"+ex.Key, ""); code != 404 {
		t.Errorf("round still there after DELETE: %d", code)
	}
	// Repeated (a client's retry): it says the round was cancelled already,
	// not 200 with a zeroed round; nothing else touched.
	if code, body := f.do(t, "DELETE", roundPath, ""); code != 409 || !bytes.Contains(body, []byte(`"code":"already_cancelled"`)) || !bytes.Contains(body, []byte(d.Round.String())) {
		t.Errorf("repeated DELETE: %d %s, want 409 already_cancelled naming the round", code, body)
	}
	// Replayed once the key has its next round: refused, the next round stays.
	_, body = f.do(t, "POST", "/v1/events", ev)
	var next debounce.Decision
	_ = json.Unmarshal(body, &next)
	if code, body := f.do(t, "DELETE", roundPath, ""); code != 409 || !bytes.Contains(body, []byte(`"other_round"`)) || !bytes.Contains(body, []byte(next.Round.String())) {
		t.Errorf("replayed DELETE with the next round pending: %d %s, want 409 other_round", code, body)
	}
	if code, _ := f.do(t, "GET", "/v1/rounds/recompute/"+ex.Key, ""); code != 200 {
		t.Errorf("the next round was cancelled by a replay: GET %d", code)
	}
	code, body = f.do(t, "GET", "/v1/policies", "")
	if code != 200 || !bytes.Contains(body, []byte(`"type":"notify","mode":"dedup"`)) || !bytes.Contains(body, []byte(`"key_fields":["tenant_id"]`)) {
		t.Errorf("policies: %d %s", code, body)
	}
}

func TestBearerTokens(t *testing.T) {
	t.Parallel()
	f := newAPI(t, "s3cret", "other")
	ev := `{"type":"notify","args":{"c":1}}`
	for _, h := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "s3cret"}} {
		code, body := f.do(t, "POST", "/v1/events", ev, h...)
		if code != 401 || !bytes.Contains(body, []byte(`"code":"unauthorized"`)) {
			t.Errorf("headers %v: %d %s, want 401", h, code, body)
		}
	}
	for _, path := range []string{"/v1/policies", "/v1/rounds/notify/" + strings.Repeat("0", 64)} {
		if code, _ := f.do(t, "GET", path, ""); code != 401 {
			t.Errorf("GET %s without a token: %d, want 401", path, code)
		}
	}
	if code, body := f.do(t, "POST", "/v1/events", ev, "Authorization", "Bearer other"); code != 200 {
		t.Errorf("right token: %d %s", code, body)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _ := f.do(t, "GET", path, ""); code != 200 {
			t.Errorf("GET %s: %d, want 200 without a token", path, code)
		}
	}
	// With tokens set, /metrics takes one too (it names every job type and
	// counts every outcome); PublicMetrics opens it for a scraper that
	// cannot send one.
	if code, _ := f.do(t, "GET", "/metrics", ""); code != 401 {
		t.Errorf("GET /metrics without a token: %d, want 401", code)
	}
	if code, _ := f.do(t, "GET", "/metrics", "", "Authorization", "Bearer s3cret"); code != 200 {
		t.Errorf("GET /metrics with a token: %d, want 200", code)
	}
	open := newAPIWith(t, func(c *daemon.APIConfig) { c.PublicMetrics = true }, "s3cret")
	if code, _ := open.do(t, "GET", "/metrics", ""); code != 200 {
		t.Errorf("GET /metrics without a token, PublicMetrics: %d, want 200", code)
	}
}

// TestReadyzShowsDetailsOnlyWithAToken: /readyz is open (probes send no
// token), but a failing check's error names internal addresses; with tokens
// set, only an authorized request sees it.
func TestReadyzShowsDetailsOnlyWithAToken(t *testing.T) {
	t.Parallel()
	f := newAPI(t, "s3cret")
	f.redis.Stop()
	code, body := f.do(t, "GET", "/readyz", "")
	if code != 503 || !bytes.Contains(body, []byte(`"redis":"failing"`)) {
		t.Errorf("readyz without a token, Redis down: %d %s", code, body)
	}
	if bytes.Contains(body, []byte("127.0.0.1")) || bytes.Contains(body, []byte("dial")) {
		t.Errorf("readyz shows the error to anyone: %s", body)
	}
	code, body = f.do(t, "GET", "/readyz", "", "Authorization", "Bearer s3cret")
	if code != 503 || !bytes.Contains(body, []byte("127.0.0.1")) {
		t.Errorf("readyz with a token, Redis down: %d %s (want the error)", code, body)
	}
}

func TestStoreDownFailClosedIs503(t *testing.T) {
	t.Parallel()
	f := newAPI(t)
	f.redis.Stop()
	code, body := f.do(t, "POST", "/v1/events", `{"type":"notify","args":{"c":1}}`)
	var e errBody
	_ = json.Unmarshal(body, &e)
	if code != 503 || e.Error.Code != "store_unavailable" {
		t.Errorf("fail closed with Redis down: %d %s", code, body)
	}
	code, body = f.do(t, "GET", "/readyz", "")
	if code != 503 || !bytes.Contains(body, []byte(`"status":"not ready"`)) {
		t.Errorf("readyz with Redis down: %d %s", code, body)
	}
	// fail open: published without a reservation.
	code, body = f.do(t, "POST", "/v1/events", `{"type":"recompute","args":{"tenant_id":1}}`)
	if code != 200 || !bytes.Contains(body, []byte(`"outcome":"bypassed"`)) {
		t.Errorf("fail open with Redis down: %d %s", code, body)
	}
}

// TestFoundByTheHostileCorpus: what the hostile-input review found, fixed.
func TestFoundByTheHostileCorpus(t *testing.T) {
	t.Parallel()
	f := newAPI(t)
	_, body := f.do(t, "POST", "/v1/events", `{"type":"recompute","args":{"tenant_id":1}}`)
	var d debounce.Decision
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatal(err)
	}
	// A round key named with another job type reaches nothing.
	for _, m := range []string{"GET", "DELETE"} {
		if code, body := f.do(t, m, "/v1/rounds/notify/"+d.Key.String()+"?round="+d.Round.String(), ""); code != 404 {
			t.Errorf("%s of recompute's round as notify: %d %s, want 404", m, code, body)
		}
	}
	if _, found, _ := f.co.Inspect(context.Background(), "recompute", d.Key); !found {
		t.Fatal("the recompute round was touched through another type")
	}
	tests := []struct{ name, body, code, field string }{
		{"CR LF in the body's traceparent", `{"type":"notify","args":{},"traceparent":"00-a\r\nX-Injected: 1"}`, "invalid_traceparent", "traceparent"},
		{"non-ASCII traceparent", `{"type":"notify","args":{},"traceparent":"00-é"}`, "invalid_traceparent", "traceparent"},
		{"invalid UTF-8 in the key", "{\"type\":\"notify\",\"args\":{},\"key\":\"\xff\"}", "invalid_utf8", "key"},
		{"lone surrogate in the key", `{"type":"notify","args":{},"key":"\udfff"}`, "lone_surrogate", "key"},
		{"a stray brace after the event", `{"type":"notify","args":{"c":1}}}`, "invalid_json", ""},
		{"a stray bracket after the event", `{"type":"notify","args":{"c":1}}]`, "invalid_json", ""},
		{"members in upper case", `{"TYPE":"notify","ARGS":{}}`, "unknown_field", "TYPE"},
		{"args twice", `{"type":"notify","args":{"c":1},"args":{"c":2}}`, "duplicate_name", "args"},
		{"a body that is an array", `[]`, "invalid_json", ""},
	}
	for _, tt := range tests {
		code, body := f.do(t, "POST", "/v1/events", tt.body)
		var e errBody
		_ = json.Unmarshal(body, &e)
		if code != 400 || e.Error.Code != tt.code || e.Error.Field != tt.field || strings.Contains(e.Error.Message, "wireEvent") {
			t.Errorf("%s: %d %s, want 400 %s field %q", tt.name, code, body, tt.code, tt.field)
		}
	}
	// An invalid traceparent header is ignored, as W3C Trace Context asks.
	if code, body := f.do(t, "POST", "/v1/events", `{"type":"notify","args":{"c":9}}`, "traceparent", "junk\x80"); code != 200 {
		t.Errorf("invalid traceparent header: %d %s, want 200", code, body)
	}
	// A batch line of Unicode spaces is a bad line, answered in place.
	code, body := f.do(t, "POST", "/v1/events:batch", "\u00a0\n"+`{"type":"notify","args":{"c":10}}`+"\n")
	if lines := strings.Split(strings.TrimSpace(string(body)), "\n"); code != 200 || len(lines) != 2 || !strings.Contains(lines[0], `"invalid_json"`) {
		t.Errorf("NBSP line: %d %s", code, body)
	}
	// Bearer is case-insensitive; an empty configured token lets nothing in.
	g := newAPI(t, "tok", "")
	if code, _ := g.do(t, "GET", "/v1/policies", "", "Authorization", "bearer tok"); code != 200 {
		t.Errorf("lower-case bearer: %d", code)
	}
	if code, _ := g.do(t, "GET", "/v1/policies", "", "Authorization", "Bearer "); code != 401 {
		t.Errorf("empty bearer with an empty token configured: %d", code)
	}
}

// TestNoHTMLEscaping: the daemon's JSON is not HTML-escaped. encoding/json
// writes <, >, & and U+2028/9 as \u escapes by default, which made explain's
// canonical_args differ from the bytes that are hashed, and a 401 read
// "Bearer \u003ctoken\u003e".
func TestNoHTMLEscaping(t *testing.T) {
	t.Parallel()
	f := newAPI(t)
	args := `{"b":"<a href='x'>&</a>","a":"\u2028\u2029"}`
	canon, err := fingerprint.Canonicalize([]byte(args))
	if err != nil {
		t.Fatal(err)
	}
	code, body := f.do(t, "POST", "/v1/explain", `{"type":"notify","args":`+args+`}`)
	if code != 200 || !bytes.Contains(body, append(append([]byte(`"canonical_args":`), canon...), ',')) {
		t.Fatalf("explain: %d %s\nwant canonical_args exactly %s", code, body, canon)
	}
	if _, body := f.do(t, "POST", "/v1/events", `{"type":"notify","args":`+args+`}`); bytes.Contains(body, []byte(`\u003c`)) {
		t.Errorf("decision HTML-escaped: %s", body)
	}
	secured := newAPI(t, "s3cret")
	if code, body := secured.do(t, "POST", "/v1/events", `{}`); code != 401 || !bytes.Contains(body, []byte("Bearer <token>")) {
		t.Errorf("401: %d %s, want it to read Bearer <token>", code, body)
	}
}

// TestMetricsNameOnlyConfiguredTypes: the job type of an event is the
// caller's to choose, so it must not become a label value. Events of
// unknown and invalid types, 1 KB each, are counted under type="_unknown";
// /metrics names no such type and stays small.
func TestMetricsNameOnlyConfiguredTypes(t *testing.T) {
	t.Parallel()
	f := newAPI(t)
	for i := range 60 {
		typ := fmt.Sprintf("%s%04d", strings.Repeat("x", 1000), i)
		if i%2 == 1 {
			typ = fmt.Sprintf("bad type! %s %d", strings.Repeat("y", 1000), i)
		}
		body, _ := json.Marshal(map[string]any{"type": typ, "args": map[string]any{"n": i}})
		if code, out := f.do(t, "POST", "/v1/events", string(body)); code != 400 {
			t.Fatalf("event of type %.20q...: %d %s, want 400", typ, code, out)
		}
	}
	if code, out := f.do(t, "POST", "/v1/events", `{"type":"recompute","args":{"tenant_id":1}}`); code != 200 {
		t.Fatalf("a configured type: %d %s", code, out)
	}
	code, metrics := f.do(t, "GET", "/metrics", "")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	if bytes.Contains(metrics, []byte("xxxxxxxx")) || bytes.Contains(metrics, []byte("yyyyyyyy")) {
		t.Errorf("/metrics names a caller's unknown job type")
	}
	for _, want := range []string{
		`coalesce_events_total{outcome="error",type="_unknown"} 60`,
		`coalesce_events_total{outcome="scheduled",type="recompute"} 1`,
	} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if len(metrics) > 64<<10 {
		t.Errorf("/metrics is %d bytes after 60 events", len(metrics))
	}
}

// TestJobOverNATSMaxPayload: an event within the body limit can make a job
// over the NATS server's max payload (1 MB here). That can never succeed,
// so it is a 413 naming the sizes, not a 503 "retry later", and it leaves no
// round behind.
func TestJobOverNATSMaxPayload(t *testing.T) {
	t.Parallel()
	f := newAPIWith(t, func(c *daemon.APIConfig) { c.BodyLimit = 4 << 20 })
	big := strings.Repeat("a", 1200<<10)
	code, body := f.do(t, "POST", "/v1/events", `{"type":"recompute","args":{"tenant_id":9,"blob":"`+big+`"}}`)
	var e errBody
	_ = json.Unmarshal(body, &e)
	if code != 413 || e.Error.Code != "job_too_large" || e.Error.Field != "args" || !strings.Contains(e.Error.Message, "max payload") {
		t.Errorf("an event whose job is over max payload: %d %.300s, want 413 job_too_large on args", code, body)
	}
	key, _ := f.co.RoundKeyOf(debounce.Event{Type: "recompute", Args: json.RawMessage(`{"tenant_id":9}`)})
	if _, found, err := f.co.Inspect(context.Background(), "recompute", key); found || err != nil {
		t.Errorf("a round was left behind (found %v, %v)", found, err)
	}
	// The same key still takes an event that fits.
	if code, body := f.do(t, "POST", "/v1/events", `{"type":"recompute","args":{"tenant_id":9}}`); code != 200 {
		t.Errorf("a fitting event after it: %d %s", code, body)
	}
}
