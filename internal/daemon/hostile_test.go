package daemon_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/daemon"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/publisher"
)

// Settings of the hostile daemon: http.Server as daemon.Run builds it, with
// the read timeouts shortened so slow-loris cases finish in seconds.
const (
	hostileBodyLimit         = 256 << 10 // room for 100,000 levels of nesting; batches up to 16 MiB
	hostileReadHeaderTimeout = time.Second
	hostileReadTimeout       = 2 * time.Second
	hostileWriteTimeout      = 5 * time.Second
	hostileMaxHeaderBytes    = 64 << 10 // as daemon.Run
	hostilePrefix            = "hx:"
)

// hostileDaemon is the daemon's HTTP API on a real http.Server on a loopback
// port, over a private redis-server and an embedded NATS with a real
// publisher.
type hostileDaemon struct {
	addr string
	rdb  *redis.Client
	nc   *nats.Conn
	js   jetstream.JetStream
	pub  *publisher.Publisher
	co   *debounce.Coalescer
	// round is a pending round opened before the hostile requests: they
	// must leave it as it is.
	round    debounce.Decision
	errorLog *syncBuffer // the http.Server's ErrorLog
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Contains(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Contains(s.b.String(), sub)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newHostileDaemon(t *testing.T) *hostileDaemon {
	t.Helper()
	ctx := context.Background()
	h := &hostileDaemon{errorLog: &syncBuffer{}}
	rs := testenv.NewRedis(t)
	h.rdb = redis.NewClient(&redis.Options{Addr: rs.Addr, DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { h.rdb.Close() })
	h.nc, h.js = testenv.NATS(t).Connect(t)
	var err error
	if h.pub, err = publisher.New(ctx, h.js, nil); err != nil {
		t.Fatal(err)
	}
	if h.co, err = debounce.New(debounce.Config{Redis: h.rdb, Publisher: h.pub, Policies: testPolicies, Prefix: hostilePrefix}); err != nil {
		t.Fatal(err)
	}
	api := daemon.NewAPI(daemon.APIConfig{Coalescer: h.co, Publisher: h.pub, BodyLimit: hostileBodyLimit, Metrics: daemon.NewMetrics(testTypes()...)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:           api.Handler(),
		ReadHeaderTimeout: hostileReadHeaderTimeout,
		ReadTimeout:       hostileReadTimeout,
		WriteTimeout:      hostileWriteTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    hostileMaxHeaderBytes,
		ErrorLog:          log.New(h.errorLog, "", 0),
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	h.addr = ln.Addr().String()
	if h.round, err = h.co.Submit(ctx, debounce.Event{Type: "recompute", Args: json.RawMessage(`{"tenant_id":1}`)}); err != nil {
		t.Fatal(err)
	}
	return h
}

// state is what a refused request must leave unchanged: every Redis key with
// its value, and the job stream.
type state struct {
	dbsize  int64
	keys    map[string]string // key -> DUMP of its value
	msgs    uint64
	lastSeq uint64
}

func (h *hostileDaemon) snapshot(t *testing.T) state {
	t.Helper()
	ctx := context.Background()
	s := state{keys: map[string]string{}}
	var err error
	if s.dbsize, err = h.rdb.DBSize(ctx).Result(); err != nil {
		t.Fatal(err)
	}
	iter := h.rdb.Scan(ctx, 0, hostilePrefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		v, err := h.rdb.Dump(ctx, iter.Val()).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		s.keys[iter.Val()] = v
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	st, err := h.js.Stream(ctx, h.pub.Stream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.msgs, s.lastSeq = info.State.Msgs, info.State.LastSeq
	return s
}

func (s state) diff(o state) string {
	var d []string
	if s.dbsize != o.dbsize {
		d = append(d, fmt.Sprintf("DBSIZE %d -> %d", s.dbsize, o.dbsize))
	}
	for k, v := range o.keys {
		if w, ok := s.keys[k]; !ok {
			d = append(d, "new key "+k)
		} else if w != v {
			d = append(d, "changed key "+k)
		}
	}
	for k := range s.keys {
		if _, ok := o.keys[k]; !ok {
			d = append(d, "deleted key "+k)
		}
	}
	if s.msgs != o.msgs || s.lastSeq != o.lastSeq {
		d = append(d, fmt.Sprintf("stream %d msgs (last seq %d) -> %d (last seq %d)", s.msgs, s.lastSeq, o.msgs, o.lastSeq))
	}
	return strings.Join(d, "; ")
}

// healthz asks /healthz on a connection of its own and fails the test unless
// it answers 200 within limit.
func (h *hostileDaemon) healthz(t *testing.T, limit time.Duration) {
	t.Helper()
	c := &http.Client{Timeout: limit, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	resp, err := c.Get("http://" + h.addr + "/healthz")
	if err != nil {
		t.Fatalf("/healthz: %v (after %v)", err, time.Since(start).Round(time.Millisecond))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %d", resp.StatusCode)
	}
}

// answer is one expected response.
type answer struct {
	status int
	code   string // error code of the JSON body; "" when net/http answers by itself
	msg    string // in the error message (or, without code, in the body)
}

// hostileCase is one hostile request: built from method, path, headers and
// body (Host, and Content-Length unless chunked or given), or raw bytes.
type hostileCase struct {
	name    string
	method  string
	path    string
	header  []string // name, value, ... written as they are
	body    []byte
	chunked bool          // send body in 4 KiB chunks, with no length
	raw     []byte        // the whole byte stream instead
	trickle time.Duration // write one byte per trickle ...
	at      int           // ... after sending the first at bytes at once
	want    answer
	then    []answer      // pipelined: the answers after the first
	within  time.Duration // the answer comes within this much (default 5s) ...
	after   time.Duration // ... and not before this much
	// cutOff: the server ends the connection after the answers; the
	// answer itself may be lost, as the client still writing makes the
	// server's kernel reset the connection.
	cutOff bool
	// check looks further at the first answer (headers, raw bytes).
	check func(t *testing.T, resp *http.Response, body []byte)
}

func (c *hostileCase) bytes() []byte {
	if c.raw != nil {
		return c.raw
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: daemon\r\nConnection: close\r\n", c.method, c.path)
	hasLength := false
	for i := 0; i+1 < len(c.header); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", c.header[i], c.header[i+1])
		hasLength = hasLength || strings.EqualFold(c.header[i], "Content-Length")
	}
	switch {
	case c.chunked:
		b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		for rest := c.body; len(rest) > 0; {
			n := min(len(rest), 4096)
			fmt.Fprintf(&b, "%x\r\n%s\r\n", n, rest[:n])
			rest = rest[n:]
		}
		b.WriteString("0\r\n\r\n")
		return b.Bytes()
	case c.body != nil && !hasLength:
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(c.body))
	}
	b.WriteString("\r\n")
	b.Write(c.body)
	return b.Bytes()
}

// run sends the case on a connection of its own; while it is in flight
// /healthz must answer, and afterwards the daemon must be up, no handler may
// have panicked (net/http would recover and log it) and Redis and the stream
// must be unchanged.
func (h *hostileDaemon) run(t *testing.T, c hostileCase) {
	t.Helper()
	before := h.snapshot(t)
	data := c.bytes() // before dialing: the server gives a silent connection ReadHeaderTimeout
	conn, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		if c.trickle == 0 {
			_, _ = conn.Write(data)
			return
		}
		if _, err := conn.Write(data[:c.at]); err != nil {
			return
		}
		for i := c.at; i < len(data); i++ {
			if _, err := conn.Write(data[i : i+1]); err != nil {
				return
			}
			time.Sleep(c.trickle)
		}
	}()
	start := time.Now()
	h.healthz(t, time.Second) // not blocked by the request in flight

	within := cmp.Or(c.within, 5*time.Second)
	_ = conn.SetReadDeadline(start.Add(within))
	br := bufio.NewReader(conn)
	for i, want := range append([]answer{c.want}, c.then...) {
		method := c.method
		if method == "" {
			method = http.MethodGet
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		var body []byte
		if err == nil {
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if c.cutOff && err != nil && !isTimeout(err) {
			t.Logf("answer %d lost as the server reset the connection: %v", i, err)
			break
		}
		if err != nil {
			t.Fatalf("answer %d: %v (after %v)", i, err, time.Since(start).Round(time.Millisecond))
		}
		h.checkAnswer(t, i, want, resp, body)
		if i == 0 && c.check != nil {
			c.check(t, resp, body)
		}
	}
	if took := time.Since(start); took < c.after {
		t.Errorf("answered after %v, before the server's timeout of %v", took.Round(time.Millisecond), c.after)
	}
	if c.cutOff {
		if n, err := br.ReadByte(); err == nil {
			t.Errorf("the connection is still open: read %q", n)
		} else if isTimeout(err) {
			t.Errorf("the connection is still open after %v", within)
		}
	}
	conn.Close()
	<-wrote
	h.healthz(t, 2*time.Second)
	if h.errorLog.Contains("panic") {
		t.Fatalf("a handler panicked: %s", h.errorLog)
	}
	if d := before.diff(h.snapshot(t)); d != "" {
		t.Errorf("a refused request changed state: %s", d)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (h *hostileDaemon) checkAnswer(t *testing.T, i int, want answer, resp *http.Response, body []byte) {
	t.Helper()
	if resp.StatusCode != want.status {
		t.Errorf("answer %d: %d %.300s, want %d %s", i, resp.StatusCode, body, want.status, want.code)
		return
	}
	if want.code == "" {
		if !bytes.Contains(body, []byte(want.msg)) {
			t.Errorf("answer %d: body %.300q lacks %q", i, body, want.msg)
		}
		return
	}
	var e errBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Errorf("answer %d: %d, body not a JSON error: %.300q", i, resp.StatusCode, body)
		return
	}
	if e.Error.Code != want.code || !strings.Contains(e.Error.Message, want.msg) {
		t.Errorf("answer %d: %d %+v, want code %s with %q in the message", i, resp.StatusCode, e.Error, want.code, want.msg)
	}
	if len(body) > 8<<10 {
		t.Errorf("answer %d: a %d-byte error body echoes the input", i, len(body))
	}
}

func nested(depth int) string {
	return `{"type":"notify","args":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`
}

// ndjson returns lines of valid, distinct events totalling at least size bytes.
func ndjson(size int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, `{"type":"recompute","args":{"tenant_id":%d,"pad":"%s"}}`+"\n", 1000+i, strings.Repeat("p", 400))
	}
	return b.Bytes()
}

// TestHostileHTTP sends a corpus of hostile requests to the daemon: each gets
// the documented refusal (or net/http's own), none crashes it or blocks other
// requests, and none changes Redis or the job stream.
func TestHostileHTTP(t *testing.T) {
	t.Parallel()
	h := newHostileDaemon(t)
	key := h.round.Key.String()
	post := func(name, body string, want answer) hostileCase {
		return hostileCase{name: name, method: "POST", path: "/v1/events", body: []byte(body), want: want}
	}
	bad := func(code, msg string) answer { return answer{400, code, msg} }
	const slowBody = "POST /v1/events HTTP/1.1\r\nHost: d\r\nContent-Length: 60\r\n\r\n" + `{"type":"notify","args":{"slow":"` + "ssssssssssssssssssssssss" + `"}}`
	cases := []hostileCase{
		// Malformed and truncated JSON.
		post("truncated object", `{"type":"recompute","args":{"tenant_id":1}`, bad("invalid_json", "unexpected end of input, expected ',' or '}'")),
		post("truncated string", `{"type":"reco`, bad("invalid_json", "type: invalid JSON")),
		post("trailing comma", `{"type":"recompute","args":{"tenant_id":1},}`, bad("invalid_json", "expected a member name in double quotes, found '}'")),
		post("single quotes", `{'type':'recompute'}`, bad("invalid_json", "expected a member name in double quotes, found '\\''")),
		post("byte order mark", "\xef\xbb\xbf{\"type\":\"notify\",\"args\":{}}", bad("invalid_json", "expected a value, found '\\u00ef'")),
		post("comment", `{"type":"notify", /* hi */ "args":{}}`, bad("invalid_json", "expected a member name in double quotes, found '/'")),
		post("bare word", `recompute`, bad("invalid_json", "expected a value, found 'r'")),
		post("second document", `{"type":"notify","args":{}}{"type":"notify","args":{}}`, bad("invalid_json", "unexpected '{' after the top-level value")),
		// Every JSON type in the wrong place.
		post("body is an array", `[{"type":"notify","args":{}}]`, bad("invalid_json", "the body must be one JSON object: {\"type\":\"…\",\"args\":{…}}")),
		post("body is a string", `"notify"`, bad("invalid_json", "the body must be one JSON object: {\"type\":\"…\",\"args\":{…}}")),
		post("body is a number", `42`, bad("invalid_json", "the body must be one JSON object: {\"type\":\"…\",\"args\":{…}}")),
		post("body is a bool", `true`, bad("invalid_json", "the body must be one JSON object: {\"type\":\"…\",\"args\":{…}}")),
		post("body is null", `null`, bad("invalid_json", "the body must be one JSON object: {\"type\":\"…\",\"args\":{…}}")),
		post("type is a number", `{"type":1,"args":{}}`, bad("invalid_json", "type: must be a string, not a number")),
		post("type is an object", `{"type":{"name":"notify"},"args":{}}`, bad("invalid_json", "type: must be a string, not an object")),
		post("type is an array", `{"type":["notify"],"args":{}}`, bad("invalid_json", "type: must be a string, not an array")),
		post("type is a bool", `{"type":true,"args":{}}`, bad("invalid_json", "type: must be a string, not a boolean")),
		post("type is null", `{"type":null,"args":{}}`, bad("invalid_json", "type: must be a string, not null")),
		post("args a string with key fields", `{"type":"recompute","args":"tenant_id=1"}`, bad("key_fields_not_object", "")),
		post("args an array with key fields", `{"type":"recompute","args":[{"tenant_id":1}]}`, bad("key_fields_not_object", "")),
		post("args null with key fields", `{"type":"recompute","args":null}`, bad("key_fields_not_object", "")),
		post("key is a number", `{"type":"notify","args":{},"key":7}`, bad("invalid_json", "key: must be a string, not a number")),
		post("key is an object", `{"type":"notify","args":{},"key":{}}`, bad("invalid_json", "key: must be a string, not an object")),
		post("traceparent is an array", `{"type":"notify","args":{},"traceparent":[]}`, bad("invalid_json", "traceparent: must be a string, not an array")),
		// args that are not I-JSON.
		post("duplicate names at depth", `{"type":"notify","args":{"a":{"b":[{"c":1,"c":2}]}}}`, bad("duplicate_name", "duplicate member name")),
		post("lone surrogate", `{"type":"notify","args":{"s":"\udc00x"}}`, bad("lone_surrogate", "")),
		post("invalid UTF-8 in a value", "{\"type\":\"notify\",\"args\":{\"s\":\"\xc3\x28\"}}", bad("invalid_utf8", "invalid UTF-8")),
		post("invalid UTF-8 in a name", "{\"type\":\"notify\",\"args\":{\"\xff\":1}}", bad("invalid_utf8", "invalid UTF-8")),
		post("NaN literal", `{"type":"notify","args":{"n":NaN}}`, bad("invalid_json", "args.n: invalid JSON")),
		post("Infinity literal", `{"type":"notify","args":{"n":Infinity}}`, bad("invalid_json", "args.n: invalid JSON")),
		post("-Infinity literal", `{"type":"notify","args":{"n":-Infinity}}`, bad("invalid_json", "args.n: invalid JSON")),
		post("1e400", `{"type":"notify","args":{"n":1e400}}`, bad("non_finite", "")),
		post("-1e400", `{"type":"notify","args":[-1e400]}`, bad("non_finite", "")),
		post("integer beyond 2^53", `{"type":"recompute","args":{"tenant_id":9007199254740993}}`, bad("unsafe_integer", "send it as a string")),
		post("negative integer beyond 2^53", `{"type":"notify","args":{"id":-18014398509481985}}`, bad("unsafe_integer", "send it as a string")),
		post("nesting 100,000 deep", nested(100_000), bad("too_deep", "nest deeper than 1000 levels")),
		post("nesting 5,000 deep", nested(5_000), bad("too_deep", "")),
		// Size.
		{name: "10 MB body", method: "POST", path: "/v1/events", body: bytes.Repeat([]byte("a"), 10<<20), want: answer{413, "too_large", "over the 262144-byte limit"}},
		{name: "chunked body over the limit", method: "POST", path: "/v1/events", chunked: true,
			body: []byte(`{"type":"notify","args":{"s":"` + strings.Repeat("x", hostileBodyLimit) + `"}}`), want: answer{413, "too_large", "body is over the 262144-byte limit"}},
		{name: "NDJSON batch over the limit, chunked", method: "POST", path: "/v1/events:batch", chunked: true,
			body: ndjson(hostileBodyLimit*daemon.BatchLimitFactor + 1), want: answer{413, "too_large", "body is over the 16777216-byte limit"}},
		{name: "NDJSON batch over BatchMaxLines", method: "POST", path: "/v1/events:batch",
			body: bytes.Repeat([]byte("{}\n"), daemon.BatchMaxLines+1), want: answer{413, "batch_too_long", "at most 50000 lines"}},
		post("a 1 MB job type", `{"type":"`+strings.Repeat("t", 1<<20)+`","args":{}}`, answer{413, "too_large", ""}),
		post("a 200 KB job type", `{"type":"`+strings.Repeat("t", 200<<10)+`","args":{}}`, bad("invalid_type", "")),
		{name: "NDJSON batch declaring a length over the limit", method: "POST", path: "/v1/events:batch",
			header: []string{"Content-Length", "16777217"}, want: answer{413, "too_large", "body of 16777217 bytes is over the 16777216-byte limit"}},
		{name: "Expect 100-continue with an oversized length", method: "POST", path: "/v1/events",
			header: []string{"Expect", "100-continue", "Content-Length", "10485760"}, want: answer{413, "too_large", "body of 10485760 bytes"},
			check: func(t *testing.T, resp *http.Response, _ []byte) {
				if resp.StatusCode == http.StatusContinue {
					t.Error("the server asked for the oversized body")
				}
			}},
		// Empty bodies.
		post("empty body", ``, bad("invalid_json", "empty body")),
		post("whitespace-only body", " \r\n\t \n", bad("invalid_json", "empty input, expected a JSON value")),
		{name: "whitespace-only batch", method: "POST", path: "/v1/events:batch", body: []byte(" \n\r\n\t\n"), want: answer{200, "", ""},
			check: func(t *testing.T, _ *http.Response, body []byte) {
				if len(body) != 0 {
					t.Errorf("a batch of blank lines answered %q", body)
				}
			}},
		// Unknown fields.
		post("unknown field", `{"type":"notify","args":{},"priority":"high"}`, answer{400, "unknown_field", `unknown field "priority"`}),
		post("unknown field __proto__", `{"type":"notify","args":{},"__proto__":{"admin":true}}`, answer{400, "unknown_field", `"__proto__"`}),
		// Huge, odd and hostile types and keys.
		post("type of 200,000 bytes", `{"type":"`+strings.Repeat("t", 200_000)+`","args":{}}`, bad("invalid_type", "")),
		post("key of 200,000 bytes", `{"type":"notify","args":{},"key":"`+strings.Repeat("k", 200_000)+`"}`, bad("invalid_event", "key: must be 1-1024 bytes")),
		post("type with a space", `{"type":"re compute","args":{}}`, bad("invalid_type", "")),
		post("type with unicode", `{"type":"récompute","args":{}}`, bad("invalid_type", "")),
		post("type ..", `{"type":"..","args":{}}`, bad("invalid_type", "")),
		post("type ../recompute", `{"type":"../recompute","args":{}}`, bad("invalid_type", "")),
		post("type a..b has no policy", `{"type":"a..b","args":{}}`, answer{404, "no_policy", `"a..b"`}),
		post("type is a NATS wildcard", `{"type":">","args":{}}`, bad("invalid_type", "")),
		post("type with an escaped NUL", `{"type":"notify\u0000","args":{}}`, bad("invalid_type", "")),
		post("raw NUL byte in a string", "{\"type\":\"notify\",\"args\":{},\"key\":\"a\x00b\"}", bad("invalid_json", "key: invalid JSON")),
		post("raw NUL byte between members", "{\"type\":\"notify\",\x00\"args\":{}}", bad("invalid_json", "expected a member name in double quotes, found '\\x00'")),
		// Header injection and traceparent abuse.
		post("traceparent over 256 bytes", `{"type":"notify","args":{},"traceparent":"00-`+strings.Repeat("a", 300)+`"}`, answer{400, "invalid_traceparent", "not a W3C traceparent"}),
		{name: "CR inside the traceparent header", raw: []byte("POST /v1/events HTTP/1.1\r\nHost: d\r\ntraceparent: 00-a\rX-Injected: 1\r\nContent-Length: 2\r\n\r\n{}"),
			method: "POST", want: answer{400, "", "Bad Request"}},
		{name: "NUL inside the traceparent header", raw: []byte("POST /v1/events HTTP/1.1\r\nHost: d\r\ntraceparent: 00-a\x00b\r\nContent-Length: 2\r\n\r\n{}"),
			method: "POST", want: answer{400, "", "Bad Request"}},
		{name: "header name with a space", raw: []byte("POST /v1/events HTTP/1.1\r\nHost: d\r\nTrace parent: x\r\nContent-Length: 2\r\n\r\n{}"),
			method: "POST", want: answer{400, "", "Bad Request"}},
		// Content-Type lies: the body is read as JSON whatever it says.
		{name: "form Content-Type, form body", method: "POST", path: "/v1/events", header: []string{"Content-Type", "application/x-www-form-urlencoded"},
			body: []byte("type=notify&args=%7B%7D"), want: bad("invalid_json", "invalid literal")},
		{name: "JSON Content-Type, multipart body", method: "POST", path: "/v1/events", header: []string{"Content-Type", "application/json"},
			body: []byte("--b\r\nContent-Disposition: form-data; name=\"type\"\r\n\r\nnotify\r\n--b--\r\n"), want: bad("invalid_json", "expected a digit")},
		// Wrong methods.
		{name: "GET /v1/events", method: "GET", path: "/v1/events", want: answer{405, "method_not_allowed", "use POST"},
			check: func(t *testing.T, resp *http.Response, _ []byte) {
				if resp.Header.Get("Allow") != "POST" {
					t.Errorf("Allow: %q", resp.Header.Get("Allow"))
				}
			}},
		{name: "PUT /v1/events", method: "PUT", path: "/v1/events", body: []byte(`{"type":"notify","args":{}}`), want: answer{405, "method_not_allowed", "PUT is not allowed"}},
		{name: "DELETE /v1/explain", method: "DELETE", path: "/v1/explain", want: answer{405, "method_not_allowed", "use POST"}},
		{name: "POST to a round", method: "POST", path: "/v1/rounds/recompute/" + key, body: []byte(`{}`), want: answer{405, "method_not_allowed", "use GET or DELETE"}},
		{name: "lowercase post", method: "post", path: "/v1/events", body: []byte(`{"type":"notify","args":{}}`), want: answer{405, "method_not_allowed", "post is not allowed"}},
		{name: "TRACE", method: "TRACE", path: "/v1/events", want: answer{405, "method_not_allowed", "TRACE is not allowed"}},
		{name: "method with a separator", raw: []byte("PO(ST /v1/events HTTP/1.1\r\nHost: d\r\n\r\n"), want: answer{400, "", "Bad Request"}},
		// Paths.
		{name: "dot-dot in a round path", method: "GET", path: "/v1/rounds/../../etc/passwd", want: answer{307, "", ""},
			check: func(t *testing.T, resp *http.Response, _ []byte) {
				if loc := resp.Header.Get("Location"); loc != "/etc/passwd" {
					t.Errorf("Location %q, want the cleaned /etc/passwd (which is not found)", loc)
				}
			}},
		{name: "cleaned path is not found", method: "GET", path: "/etc/passwd", want: answer{404, "not_found", "no route"}},
		{name: "encoded slashes in the key", method: "GET", path: "/v1/rounds/recompute/..%2F..%2Fetc%2Fpasswd", want: bad("invalid_key", "64 hex digits")},
		{name: "encoded slashes in the type", method: "GET", path: "/v1/rounds/recompute%2F..%2F..%2Fx/" + key, want: answer{404, "no_policy", `"recompute/../../x"`}},
		{name: "encoded NUL in the type", method: "DELETE", path: "/v1/rounds/recompute%00/" + key, want: answer{404, "no_policy", `"recompute\x00"`}},
		{name: "63 hex digits", method: "GET", path: "/v1/rounds/recompute/" + key[:63], want: bad("invalid_key", "64 hex digits")},
		{name: "65 hex digits", method: "DELETE", path: "/v1/rounds/recompute/" + key + "0", want: bad("invalid_key", "64 hex digits")},
		{name: "64 non-hex digits", method: "DELETE", path: "/v1/rounds/recompute/" + strings.Repeat("g", 64), want: bad("invalid_key", "64 hex digits")},
		{name: "no such round", method: "DELETE", path: "/v1/rounds/recompute/" + strings.Repeat("f", 64) + "?round=00000000000000aa", want: answer{404, "not_found", "no round 00000000000000aa"}},
		{name: "cancel without a round", method: "DELETE", path: "/v1/rounds/recompute/" + strings.Repeat("f", 64), want: answer{400, "invalid_round", "required: ?round="}},
		{name: "cancel with a bad round", method: "DELETE", path: "/v1/rounds/recompute/" + strings.Repeat("f", 64) + "?round=xyz", want: answer{400, "invalid_round", "not a round token"}},
		{name: "segment after the key", method: "DELETE", path: "/v1/rounds/recompute/" + key + "/x", want: answer{404, "not_found", "no route"}},
		{name: "invalid escape in the path", raw: []byte("GET /v1/rounds/%zz/x HTTP/1.1\r\nHost: d\r\n\r\n"), want: answer{400, "", "Bad Request"}},
		{name: "query-string junk", method: "POST", path: "/v1/events?%zz=%%&a=1;b&&=&type=notify", body: []byte(`{"args":{}}`), want: bad("invalid_type", "type: required")},
		{name: "query junk on a read", method: "GET", path: "/v1/policies?" + strings.Repeat("%00&", 2000), want: answer{200, "", `"policies"`}},
		// Protocol versions and absurd headers.
		{name: "HTTP/1.0 without Host", raw: []byte("POST /v1/events HTTP/1.0\r\nContent-Length: 11\r\n\r\n{\"args\":{}}"), method: "POST", want: bad("invalid_type", "type: required")},
		{name: "HTTP/1.0 healthz", raw: []byte("GET /healthz HTTP/1.0\r\n\r\n"), want: answer{200, "", `"ok"`}},
		{name: "HTTP/9.9", raw: []byte("GET /healthz HTTP/9.9\r\nHost: d\r\n\r\n"), want: answer{505, "", "HTTP Version Not Supported"}},
		{name: "HTTP/1.1 without Host", raw: []byte("GET /healthz HTTP/1.1\r\n\r\n"), want: answer{400, "", "missing required Host header"}},
		{name: "one 100 KB header", method: "GET", path: "/healthz", header: []string{"X-Big", strings.Repeat("b", 100<<10)}, want: answer{431, "", "Request Header Fields Too Large"}},
		{name: "10,000 headers", method: "GET", path: "/healthz", header: manyHeaders(10_000), want: answer{431, "", "Request Header Fields Too Large"}},
		{name: "100 KB request line", method: "GET", path: "/healthz?" + strings.Repeat("q", 100<<10), want: answer{431, "", "Request Header Fields Too Large"}},
		// Transfer-Encoding wins over Content-Length (RFC 9112 6.3): the body is the empty chunked one.
		{name: "Content-Length and chunked", raw: []byte("POST /v1/events HTTP/1.1\r\nHost: d\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), method: "POST", want: bad("invalid_json", "empty body")},
		{name: "two Content-Lengths", raw: []byte("POST /v1/events HTTP/1.1\r\nHost: d\r\nContent-Length: 2\r\nContent-Length: 30\r\n\r\n{}"), method: "POST", want: answer{400, "", "Bad Request"}},
		{name: "negative Content-Length", raw: []byte("POST /v1/events HTTP/1.1\r\nHost: d\r\nContent-Length: -5\r\n\r\n{}"), method: "POST", want: answer{400, "", "Bad Request"}},
		{name: "gzip transfer coding", raw: []byte("POST /v1/events HTTP/1.1\r\nHost: d\r\nTransfer-Encoding: gzip\r\n\r\n{}"), method: "POST", want: answer{501, "", "Unsupported transfer encoding"}},
		// Slow loris: cut off by the server's timeouts while /healthz answers.
		{name: "slow-loris headers", raw: []byte("POST /v1/events HTTP/1.1\r\nHost: d\r\nX-Slow: " + strings.Repeat("s", 60)), trickle: 100 * time.Millisecond,
			want: answer{400, "", "Bad Request"}, cutOff: true, after: hostileReadHeaderTimeout - 100*time.Millisecond, within: hostileReadHeaderTimeout + 2*time.Second},
		{name: "slow-loris body", raw: []byte(slowBody), at: strings.Index(slowBody, "\r\n\r\n") + 4, trickle: 100 * time.Millisecond, method: "POST",
			want: answer{400, "bad_body", "i/o timeout"}, cutOff: true, after: hostileReadTimeout - 100*time.Millisecond, within: hostileReadTimeout + 2*time.Second},
		// Pipelined: each answered in order, the bad one in place.
		{name: "pipelined good, bad, good", raw: []byte("GET /healthz HTTP/1.1\r\nHost: d\r\n\r\n" +
			"POST /v1/events HTTP/1.1\r\nHost: d\r\nContent-Length: 9\r\n\r\n{\"type\":1" +
			"GET /v1/policies HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n"),
			want: answer{200, "", `"ok"`}, then: []answer{bad("invalid_json", "unexpected end of input"), {200, "", `"policies"`}}},
		// The same hostile inputs through explain and batch.
		{name: "explain 1e400", method: "POST", path: "/v1/explain", body: []byte(`{"type":"notify","args":[1e400]}`), want: bad("non_finite", "")},
		{name: "explain unknown field", method: "POST", path: "/v1/explain", body: []byte(`{"type":"notify","args":{},"x":1}`), want: answer{400, "unknown_field", `"x"`}},
		{name: "batch of bad lines", method: "POST", path: "/v1/events:batch",
			body: []byte("{\n" + `{"type":"notify","args":{"a":1,"a":1}}` + "\n\xff\n" + nested(100_000) + "\n" + `{"type":"notify","args":{},"key":1}`),
			want: answer{200, "", `{"error":{"code":"invalid_json"`},
			check: func(t *testing.T, _ *http.Response, body []byte) {
				lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
				// The 100,000-deep line is refused at the fingerprint's nesting limit.
				want := []string{"invalid_json", "duplicate_name", "invalid_json", "too_deep", "invalid_json"}
				if len(lines) != len(want) {
					t.Fatalf("%d answer lines, want %d: %s", len(lines), len(want), body)
				}
				for i, code := range want {
					if !strings.Contains(lines[i], `"code":"`+code+`"`) {
						t.Errorf("line %d: %s, want %s", i, lines[i], code)
					}
				}
			}},
	}
	if len(cases) < 40 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { h.run(t, c) })
	}
	// The round opened before the corpus is as it was.
	r, found, err := h.co.Inspect(context.Background(), "recompute", h.round.Key)
	if err != nil || !found || r.Events != 1 || r.Token != h.round.Round {
		t.Errorf("the pending round after the corpus: %+v found=%v err=%v", r, found, err)
	}
}

func manyHeaders(n int) []string {
	h := make([]string, 0, 2*n)
	for i := range n {
		h = append(h, fmt.Sprintf("X-H%d", i), "v")
	}
	return h
}

// TestHostileConcurrentAbuse sends hundreds of bad requests in parallel, and
// slow-loris connections, while good events keep being decided: every good
// event gets its decision, every bad one its refusal, and in the end Redis
// holds the good rounds only and the stream their jobs only.
func TestHostileConcurrentAbuse(t *testing.T) {
	t.Parallel()
	h := newHostileDaemon(t)
	before := h.snapshot(t)
	const bad, good, loris = 400, 60, 20
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	badBodies := []string{`{"type":`, `{"type":"notify","args":{"a":1,"a":2}}`, `{"type":"recompute","args":{"tenant_id":1e400}}`,
		`{"type":"notify","args":{},"x":1}`, nested(5000), `{"type":"a b","args":{}}`, "\xff", `[]`}
	var wg sync.WaitGroup
	var failures atomic.Int64
	fail := func(format string, args ...any) {
		failures.Add(1)
		t.Errorf(format, args...)
	}
	for i := range loris { // held open until the server cuts them
		wg.Go(func() {
			conn, err := net.Dial("tcp", h.addr)
			if err != nil {
				fail("loris %d: %v", i, err)
				return
			}
			defer conn.Close()
			start := time.Now()
			_, _ = conn.Write([]byte("POST /v1/events HTTP/1.1\r\nHost: d\r\n"))
			for time.Since(start) < 4*time.Second {
				if _, err := conn.Write([]byte("X")); err != nil {
					return // cut off
				}
				time.Sleep(200 * time.Millisecond)
			}
			fail("loris %d: still connected after 4s", i)
		})
	}
	sem := make(chan struct{}, 64)
	for i := range bad {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			resp, err := client.Post("http://"+h.addr+"/v1/events", "application/json", strings.NewReader(badBodies[i%len(badBodies)]))
			if err != nil {
				fail("bad %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			var e errBody
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != 400 || e.Error.Code == "" {
				fail("bad %d: %d %+v %v", i, resp.StatusCode, e, err)
			}
		})
	}
	var decided sync.Map
	for i := range good {
		wg.Go(func() {
			start := time.Now()
			resp, err := client.Post("http://"+h.addr+"/v1/events", "application/json",
				strings.NewReader(fmt.Sprintf(`{"type":"recompute","args":{"tenant_id":%d}}`, 5000+i)))
			if err != nil {
				fail("good %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			var d debounce.Decision
			if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != 200 || d.Outcome != debounce.OutcomeScheduled {
				fail("good %d: %d %+v %v", i, resp.StatusCode, d, err)
				return
			}
			if took := time.Since(start); took > 5*time.Second {
				fail("good %d took %v", i, took)
			}
			decided.Store(d.Key, true)
		})
	}
	wg.Wait()
	if failures.Load() > 0 {
		return
	}
	after := h.snapshot(t)
	n := 0
	decided.Range(func(any, any) bool { n++; return true })
	// Each round is one message in the stream (its schedule), or, held in
	// Redis until due, no message and its identity beside it (and its type's
	// due list, one key).
	perRound, msgs := int64(1), uint64(good)
	if h.co.HoldsInRedis(context.Background(), "recompute") {
		perRound, msgs = 2, 0
	}
	if n != good || after.dbsize-before.dbsize < perRound*good || after.dbsize-before.dbsize > perRound*good+1 || after.msgs != before.msgs+msgs {
		t.Errorf("%d good rounds decided; Redis %d -> %d keys, stream %d -> %d messages; want %d rounds of %d key(s) and %d message(s) each",
			n, before.dbsize, after.dbsize, before.msgs, after.msgs, good, perRound, msgs/uint64(good))
	}
	h.healthz(t, time.Second)
	if h.errorLog.Contains("panic") {
		t.Fatalf("a handler panicked: %s", h.errorLog)
	}
}

// TestHostileNATSIngest sends hostile payloads to the request/reply ingest
// subject: each gets an error reply naming the problem, nothing changes.
func TestHostileNATSIngest(t *testing.T) {
	t.Parallel()
	h := newHostileDaemon(t)
	in, err := daemon.StartIngest(context.Background(), daemon.IngestConfig{Conn: h.nc, JetStream: h.js, Coalescer: h.co, Prefix: "co", Requests: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Stop)
	cases := []struct {
		name, subject string
		data          []byte
		code, msg     string
	}{
		{"not JSON", "co.events.recompute", []byte(`not json`), "invalid_json", "invalid literal"},
		{"empty payload", "co.events.recompute", nil, "invalid_json", "empty body"},
		{"truncated", "co.events.recompute", []byte(`{"args":{"tenant_id":1}`), "invalid_json", "unexpected end of input"},
		{"an array", "co.events.recompute", []byte(`[{"args":{}}]`), "invalid_json", "must be one JSON object"},
		{"null", "co.events.notify", []byte(`null`), "invalid_json", "must be one JSON object"},
		{"no args", "co.events.notify", []byte(`{}`), "invalid_args", "args: required"},
		{"missing key field", "co.events.recompute", []byte(`{"args":{"order":1}}`), "missing_key_field", "tenant_id"},
		{"type differs from the subject", "co.events.recompute", []byte(`{"type":"notify","args":{}}`), "invalid_type", `differs from "recompute"`},
		{"unknown field", "co.events.notify", []byte(`{"args":{},"priority":1}`), "unknown_field", `"priority"`},
		{"duplicate names", "co.events.notify", []byte(`{"args":{"a":[{"b":1,"b":2}]}}`), "duplicate_name", "duplicate member name"},
		{"lone surrogate", "co.events.notify", []byte(`{"args":"\ud800"}`), "lone_surrogate", ""},
		{"invalid UTF-8", "co.events.notify", []byte("{\"args\":\"\xed\xa0\x80\"}"), "invalid_utf8", ""},
		{"1e400", "co.events.notify", []byte(`{"args":[1e400]}`), "non_finite", ""},
		{"integer beyond 2^53", "co.events.recompute", []byte(`{"args":{"tenant_id":9007199254740993}}`), "unsafe_integer", "send it as a string"},
		{"nesting 100,000 deep", "co.events.notify", []byte(`{"args":` + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + `}`), "too_deep", "nest deeper than 1000 levels"},
		{"key too long", "co.events.notify", []byte(`{"args":{},"key":"` + strings.Repeat("k", 1025) + `"}`), "invalid_event", "1-1024 bytes"},
		{"no policy", "co.events.unknown", []byte(`{"args":{}}`), "no_policy", `"unknown"`},
		{"type with dots from the subject", "co.events.recompute.x", []byte(`{"args":{"tenant_id":1}}`), "no_policy", `"recompute.x"`},
		{"invalid type from the subject", "co.events.-x", []byte(`{"args":{}}`), "invalid_type", ""},
		{"a 1,000-byte type from the subject", "co.events." + strings.Repeat("t", 1000), []byte(`{"args":{}}`), "invalid_type", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := h.snapshot(t)
			msg, err := h.nc.Request(c.subject, c.data, 5*time.Second)
			if err != nil {
				t.Fatalf("no reply: %v", err)
			}
			var e errBody
			if err := json.Unmarshal(msg.Data, &e); err != nil || e.Error.Code != c.code || !strings.Contains(e.Error.Message, c.msg) {
				t.Errorf("reply %.300s, want code %s with %q", msg.Data, c.code, c.msg)
			}
			if d := before.diff(h.snapshot(t)); d != "" {
				t.Errorf("a refused event changed state: %s", d)
			}
		})
	}
	// A traceparent header that is not W3C trace context is ignored, as
	// on HTTP: the event is decided, not refused.
	for _, tp := range []string{"garbage", "00-" + strings.Repeat("a", 300), "00-00000000000000000000000000000000-0000000000000000-01"} {
		m := nats.NewMsg("co.events.notify")
		m.Header.Set("traceparent", tp)
		m.Data = []byte(`{"args":{"tp":"` + tp[:min(len(tp), 20)] + `"}}`)
		reply, err := h.nc.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Errorf("traceparent header %.40q: no reply: %v", tp, err)
		} else if !bytes.Contains(reply.Data, []byte(`"outcome":"published"`)) {
			t.Errorf("traceparent header %.40q: %.300s, want the event decided", tp, reply.Data)
		}
	}
	// Still deciding good events.
	msg, err := h.nc.Request("co.events.recompute", []byte(`{"args":{"tenant_id":77}}`), 5*time.Second)
	if err != nil || !bytes.Contains(msg.Data, []byte(`"outcome":"scheduled"`)) {
		t.Fatalf("good event after the hostile ones: %v %s", err, msg.Data)
	}
}
