package daemon_test

import (
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

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/daemon"
	"github.com/coalesce-io/coalesce/worker"
)

// TestClientRetryAfterATimeoutCountsTheEventOnce: a client whose request
// timed out after the daemon decided sends it again ("after an error, send
// it again"). With the same Idempotency-Key the retry gets the first
// decision back (Idempotent-Replayed) and the round's job, run by a real
// worker on real NATS and Redis, counts the event once and holds its item
// once. The control: the same retry without a key (what every client did
// before 47bb46e's successor) counts it twice.
func TestClientRetryAfterATimeoutCountsTheEventOnce(t *testing.T) {
	t.Parallel()
	f := newAPIPolicies(t, []debounce.Policy{{Type: "digest", Mode: debounce.ModeDebounce, Window: time.Second,
		KeyFields: []string{"user"}, Payload: debounce.PayloadAccumulate}}, nil)
	// The first answer of each key is lost: the handler decides, then the
	// response never leaves (the client times out).
	lost := map[string]bool{}
	lossy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := r.Header.Get("X-Test-Attempt-Of")
		if !lost[k] {
			lost[k] = true
			f.srv.Config.Handler.ServeHTTP(httptest.NewRecorder(), r)
			<-r.Context().Done()
			return
		}
		f.srv.Config.Handler.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(lossy)
	defer srv.Close()
	client := &http.Client{Timeout: 2 * time.Second}
	send := func(user, idem string) (*http.Response, []byte, error) {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/events", strings.NewReader(`{"type":"digest","args":{"user":"`+user+`","note":{"text":"hello"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Test-Attempt-Of", user)
		if idem != "" {
			req.Header.Set("Idempotency-Key", idem)
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, err
	}
	retry := func(user, idem string) debounce.Decision {
		t.Helper()
		if _, _, err := send(user, idem); err == nil {
			t.Fatalf("%s: the first attempt was answered; the test needs it lost", user)
		}
		resp, body, err := send(user, idem) // the client's retry
		var d debounce.Decision
		if err != nil || resp.StatusCode != 200 || json.Unmarshal(body, &d) != nil {
			t.Fatalf("%s: retry: %v %s", user, err, body)
		}
		if got := resp.Header.Get("Idempotent-Replayed"); (got == "true") != (idem != "") || d.Replayed != (idem != "") {
			t.Errorf("%s: retry answered Idempotent-Replayed %q, replayed %v", user, got, d.Replayed)
		}
		return d
	}
	keyed := retry("ann", `"3f0e0a52-1c1b-4bb5-9f5d-0c6c3b8a0b11"`)
	plain := retry("bob", "")
	if keyed.Events != 1 || keyed.Outcome != debounce.OutcomeScheduled {
		t.Errorf("keyed retry: %+v, want the first decision (scheduled, 1 event)", keyed)
	}
	if plain.Events != 2 {
		t.Errorf("unkeyed retry: %+v, want the old behaviour (counted twice) as the control", plain)
	}

	w, err := worker.New(worker.Config{JetStream: f.js, Coalescer: f.co, Publisher: f.pub, Types: []string{"digest"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	jobs := make(chan *worker.Job, 4)
	go func() {
		_ = w.Run(ctx, func(_ context.Context, j *worker.Job) error { jobs <- j; return nil })
	}()
	got := map[string]*worker.Job{}
	deadline := time.After(30 * time.Second)
	for len(got) < 2 {
		select {
		case j := <-jobs:
			var a struct{ User string }
			_ = json.Unmarshal(j.Summary.Items[0], &a)
			got[a.User] = j
		case <-deadline:
			t.Fatalf("jobs run: %d of 2", len(got))
		}
	}
	if j := got["ann"]; j.Summary.Events != 1 || len(j.Summary.Items) != 1 {
		t.Errorf("keyed: the job counts %d events, %d items; want 1 and 1", j.Summary.Events, len(j.Summary.Items))
	}
	if j := got["bob"]; j.Summary.Events != 2 {
		t.Errorf("unkeyed control: the job counts %d events, want 2 (the double count keys prevent)", j.Summary.Events)
	}
}

// TestIdempotencyKeyOverHTTP: the header's forms and refusals, and the
// per-line field of a batch.
func TestIdempotencyKeyOverHTTP(t *testing.T) {
	t.Parallel()
	f := newAPI(t)
	ev := `{"type":"recompute","args":{"tenant_id":5,"n":1}}`
	code, body := f.do(t, "POST", "/v1/events", ev, "Idempotency-Key", `"k-1"`, "Content-Type", "application/json")
	if code != 200 || bytes.Contains(body, []byte("replayed")) {
		t.Fatalf("first: %d %s", code, body)
	}
	// Bare form, same key; the args written otherwise are the same event.
	code, body = f.do(t, "POST", "/v1/events", `{"args":{"n":1.0,"tenant_id":5},"type":"recompute"}`, "Idempotency-Key", "k-1", "Content-Type", "application/json")
	if code != 200 || !bytes.Contains(body, []byte(`"events":1,"replayed":true`)) {
		t.Errorf("retry: %d %s, want the first decision replayed", code, body)
	}
	tests := []struct {
		name, body string
		header     []string
		status     int
		code       string
	}{
		{"another event, same key", `{"type":"recompute","args":{"tenant_id":5,"n":2}}`, []string{"Idempotency-Key", "k-1"}, 422, "idempotency_key_reused"},
		{"a key with a space", ev, []string{"Idempotency-Key", "a b"}, 400, "invalid_idempotency_key"},
		{"a key too long", ev, []string{"Idempotency-Key", strings.Repeat("k", 256)}, 400, "invalid_idempotency_key"},
		{"header and member differ", `{"type":"recompute","args":{"tenant_id":5},"idempotency_key":"x"}`, []string{"Idempotency-Key", "y"}, 400, "invalid_idempotency_key"},
		{"a member that is not a string", `{"type":"recompute","args":{"tenant_id":5},"idempotency_key":7}`, nil, 400, "invalid_json"},
	}
	for _, tt := range tests {
		code, body := f.do(t, "POST", "/v1/events", tt.body, tt.header...)
		var e errBody
		_ = json.Unmarshal(body, &e)
		if code != tt.status || e.Error.Code != tt.code {
			t.Errorf("%s: %d %s, want %d %s", tt.name, code, body, tt.status, tt.code)
		}
	}
	// A batch: a key per line; the retried batch replays each keyed line.
	batch := `{"type":"recompute","args":{"tenant_id":6,"n":1},"idempotency_key":"b-1"}` + "\n" +
		`{"type":"recompute","args":{"tenant_id":6,"n":2},"idempotency_key":"b-2"}` + "\n" +
		`{"type":"recompute","args":{"tenant_id":6,"n":3}}` + "\n"
	f.do(t, "POST", "/v1/events:batch", batch)
	code, body = f.do(t, "POST", "/v1/events:batch", batch)
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	if code != 200 || len(lines) != 3 || !strings.Contains(lines[0], `"events":1,"replayed":true`) ||
		!strings.Contains(lines[1], `"events":2,"replayed":true`) || !strings.Contains(lines[2], `"events":4}`) {
		t.Errorf("retried batch: %d\n%s\nwant lines 1-2 replayed (1, 2 events), line 3 counted again (4)", code, body)
	}
}

// TestBackPressure: a daemon that sheds load answers 429 with Retry-After,
// deciding nothing: a batch that waits for a slot longer than BatchWait
// (busy), a single event over MaxInFlight (overloaded).
func TestBackPressure(t *testing.T) {
	t.Parallel()
	f := newAPIWith(t, func(c *daemon.APIConfig) {
		c.Batches, c.BatchWait, c.MaxInFlight = 1, 50*time.Millisecond, 1
	})
	// Requests whose bodies never end hold a batch slot and the one
	// decision in flight.
	hold := func(path string) (release func(), ended <-chan struct{}) {
		pr, pw := io.Pipe()
		req, _ := http.NewRequest("POST", f.srv.URL+path, pr)
		done := make(chan struct{})
		// A connection of its own: an idle one the server closed would
		// fail the request at once (its body cannot be sent again).
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		go func() {
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
			}
			close(done)
		}()
		if _, err := pw.Write([]byte(`{"type":"notify",`)); err != nil {
			t.Fatalf("holding %s: %v", path, err)
		}
		return func() { pw.CloseWithError(io.ErrUnexpectedEOF); <-done }, done
	}
	for _, tt := range []struct{ path, code string }{{"/v1/events:batch", "busy"}, {"/v1/events", "overloaded"}} {
		// A probe decided just before the hold was admitted can turn the
		// hold away (429 itself): then it is held again.
		release, ended := hold(tt.path)
		var code int
		var body []byte
		var retryAfter string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			select {
			case <-ended:
				release()
				release, ended = hold(tt.path)
			default:
			}
			req, _ := http.NewRequest("POST", f.srv.URL+tt.path, strings.NewReader(`{"type":"notify","args":{"bp":1}}`))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			code, retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
			if code == 429 {
				break
			}
		}
		release()
		if code != 429 || retryAfter == "" || !bytes.Contains(body, []byte(`"code":"`+tt.code+`"`)) {
			t.Errorf("%s with its slot held: %d Retry-After %q %s, want 429 %s with Retry-After", tt.path, code, retryAfter, body, tt.code)
		}
	}
	// Once free, events are decided again. (The held request's slot is
	// given back just after its answer.)
	code, body := 429, []byte(nil)
	for deadline := time.Now().Add(30 * time.Second); code == 429 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		code, body = f.do(t, "POST", "/v1/events", `{"type":"notify","args":{"bp":"after"}}`)
	}
	if code != 200 || !bytes.Contains(body, []byte(`"outcome":"published"`)) {
		t.Errorf("after the load: %d %s, want it decided now", code, body)
	}
	// An outage under fail: closed is a 503 with Retry-After.
	f.redis.Stop()
	resp, err := http.Post(f.srv.URL+"/v1/events", "application/json", strings.NewReader(`{"type":"notify","args":{"bp":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "2" {
		t.Errorf("Redis down, fail closed: %d Retry-After %q, want 503 with Retry-After 2", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// TestContractEveryRouteNeedsAToken: with tokens set every route but the
// probes answers 401 without one, as the document says; and the document
// is served.
func TestContractEveryRouteNeedsAToken(t *testing.T) {
	// (and a read-only token may not act: 403 read_only)
	t.Parallel()
	f := newAllRoutesAPI(t, []string{"r3ad"}, "s3cret")
	fill := strings.NewReplacer("{type}", "recompute", "{key}", strings.Repeat("0", 64), "{seq}", "1")
	// (the dashboard's pages are open: their data comes from the routes)
	n := 0
	for _, r := range f.api.Routes() {
		if !r.Auth {
			continue
		}
		for _, m := range r.Methods {
			code, body := f.do(t, m, fill.Replace(r.Pattern), "")
			if code != 401 || !bytes.Contains(body, []byte(`"unauthorized"`)) {
				t.Errorf("%s %s without a token: %d %s", m, r.Pattern, code, body)
			}
			n++
			if m == "POST" || m == "DELETE" {
				code, body := f.do(t, m, fill.Replace(r.Pattern), "", "Authorization", "Bearer r3ad")
				if wantRO := r.Pattern != "/v1/explain"; wantRO != (code == 403 && bytes.Contains(body, []byte(`"read_only"`))) {
					t.Errorf("%s %s with a read-only token: %d %s", m, r.Pattern, code, body)
				}
			}
		}
	}
	if n < 15 {
		t.Errorf("only %d routes checked", n)
	}
	code, body := f.do(t, "GET", "/v1/openapi.json", "", "Authorization", "Bearer s3cret")
	var doc struct {
		OpenAPI string `json:"openapi"`
	}
	if code != 200 || json.Unmarshal(body, &doc) != nil || doc.OpenAPI != "3.1.0" {
		t.Errorf("GET /v1/openapi.json: %d %.200s", code, body)
	}
	_ = fmt.Sprint()
}
