package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/worker"
)

const pushConfig = `policies:
  digest:
    mode: debounce
    window: 1s
    payload: accumulate
    key_fields: [user]
`

// pushRecord is one request the Python handler logged.
type pushRecord struct {
	Start, End float64
	Status     int
	Problem    string
	Headers    map[string]string
	Doc        *worker.Document
}

// python3 finds the interpreter, or skips (fails when servers are required,
// as in CI, which installs it).
func python3(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("COALESCE_REQUIRE_SERVERS") != "" {
			t.Fatal("python3 is required for the foreign-handler tests: apt-get install python3")
		}
		t.Skip("no python3")
	}
	return p
}

// TestPushToAPythonHandler runs `coalesce work --post` against a handler
// written in Python's standard library, checked from the handler's own log:
// the job document with its items, the headers, the bearer token and the
// HMAC signature (the handler refuses the request otherwise, which would
// dead-letter the job); a 500 retried with the same items and summary; a
// 4xx dead-lettered at once; a handler slower than the ack wait not
// redelivered; and the round closed at start, so an event during the run
// makes a job of its own.
func TestPushToAPythonHandler(t *testing.T) {
	t.Parallel()
	py := python3(t)
	sd := serveEmbedded(t, pushConfig)
	dir, cfgPath, natsAddr, redisAddr, serve, base := sd.dir, sd.cfgPath, sd.natsAddr, sd.redisAddr, sd.serve, sd.base

	logPath := filepath.Join(dir, "pushes.ndjson")
	hcmd := exec.Command(py, "testdata/push_handler.py", logPath)
	hcmd.Env = append(os.Environ(), "PUSH_TOKEN=tok-123", "PUSH_SECRET=s3cret")
	handler := startCmd(t, hcmd)
	port := ""
	for deadline := time.Now().Add(10 * time.Second); port == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if f := strings.Fields(handler.out.String()); len(f) >= 2 && f[0] == "listening" {
			port = f[1]
		}
	}
	if port == "" {
		t.Fatalf("the Python handler did not start: %s", handler.out.String())
	}
	metricsAddr := freeAddr(t)
	wcmd := exec.Command(binary(t), "work", "--config", cfgPath, "--redis", "redis://"+redisAddr+"/0", "--nats", "nats://"+natsAddr,
		"--metrics", metricsAddr, "--type", "digest", "--post", "http://127.0.0.1:"+port+"/jobs?token=q-s3cret-q", "--ack-wait", "1500ms", "--max-deliver", "3")
	wcmd.Env = append(os.Environ(), "COALESCE_POST_TOKEN=tok-123", "COALESCE_POST_SECRET=s3cret")
	work := startCmd(t, wcmd)

	read := func() map[string][]pushRecord {
		out := map[string][]pushRecord{}
		for _, r := range readNDJSON[pushRecord](t, logPath) {
			if r.Doc == nil {
				t.Fatalf("the handler refused a push: %d %s (headers %v)", r.Status, r.Problem, r.Headers)
			}
			var args struct{ User string }
			_ = json.Unmarshal(r.Doc.Args, &args)
			out[args.User] = append(out[args.User], r)
		}
		return out
	}
	submit := func(lines ...string) string {
		t.Helper()
		code, out, stderr := runBin(t, strings.Join(lines, "\n")+"\n", "submit", "--server", base)
		if code != 0 {
			t.Fatalf("submit: exit %d: %s", code, stderr)
		}
		return out
	}
	submit(
		`{"type":"digest","args":{"user":"ann","n":1}}`,
		`{"type":"digest","args":{"user":"ann","n":2}}`,
		`{"type":"digest","args":{"user":"ann","n":3}}`,
		`{"type":"digest","args":{"user":"bob","behave":"fail_once","n":1}}`,
		`{"type":"digest","args":{"user":"bob","behave":"fail_once","n":2}}`,
		`{"type":"digest","args":{"user":"cy","behave":"reject"}}`,
		`{"type":"digest","args":{"user":"dee","behave":"slow","sleep":4}}`,
	)
	want := map[string]int{"ann": 1, "bob": 2, "cy": 1, "dee": 1}
	done := func(got map[string][]pushRecord) bool {
		for u, n := range want {
			if len(got[u]) < n || got[u][len(got[u])-1].End == 0 {
				return false
			}
		}
		return true
	}
	var got map[string][]pushRecord
	for deadline := time.Now().Add(25 * time.Second); !done(got); time.Sleep(100 * time.Millisecond) {
		if got = read(); time.Now().After(deadline) {
			t.Fatalf("pushes within 25 s: %v\nwork output:\n%s", got, work.out.String())
		}
	}
	time.Sleep(3 * time.Second) // no redelivery of the slow one, no retry of the rejected one
	got = read()
	for u, n := range want {
		if len(got[u]) != n {
			t.Errorf("%s: %d requests, want %d", u, len(got[u]), n)
		}
	}

	ann := got["ann"][0]
	if d := ann.Doc; d.V != 1 || d.Type != "digest" || d.Summary.Events != 3 || len(d.Summary.Items) != 3 || d.Release != "released" || d.Attempt != 1 {
		t.Errorf("ann's job: %+v", d)
	}
	if h := ann.Headers; h["Coalesce-Job-Type"] != "digest" || h["Coalesce-Round"] != ann.Doc.Round || h["Coalesce-Round-Key"] != ann.Doc.Key ||
		h["Coalesce-Attempt"] != "1" || h["Idempotency-Key"] != ann.Doc.Key+"."+ann.Doc.Round || !strings.HasPrefix(h["Coalesce-Signature"], "t=") {
		t.Errorf("ann's headers: %v", h)
	}
	if b := got["bob"]; len(b) == 2 {
		s0, _ := json.Marshal(b[0].Doc.Summary)
		s1, _ := json.Marshal(b[1].Doc.Summary)
		if b[0].Status != 500 || b[1].Status != 200 || b[0].Doc.Attempt != 1 || b[1].Doc.Attempt != 2 ||
			b[1].Headers["Idempotency-Key"] != b[0].Headers["Idempotency-Key"] || b[1].Doc.Release != "retry" {
			t.Errorf("bob's two requests: %+v / %+v", b[0], b[1])
		}
		if !bytes.Equal(s0, s1) || b[1].Doc.Summary.Events != 2 || len(b[1].Doc.Summary.Items) != 2 {
			t.Errorf("the retry carries another summary: %s, then %s", s0, s1)
		}
		if gap := b[1].Start - b[0].End; gap < 0.8 {
			t.Errorf("the retry came %.2f s after the 500; the first backoff is 1 s", gap)
		}
	}
	if d := got["dee"]; len(d) == 1 && d[0].End-d[0].Start < 4 {
		t.Errorf("the slow handler ran %.1f s", d[0].End-d[0].Start)
	}

	// The round closed at start: an event now opens the next round, whose
	// job carries it alone.
	if out := submit(`{"type":"digest","args":{"user":"ann","n":4}}`); !strings.Contains(out, `"outcome":"scheduled"`) {
		t.Errorf("an event after ann's job started: %s, want a new round", out)
	}
	for deadline := time.Now().Add(10 * time.Second); len(read()["ann"]) < 2; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no second job for ann:\n%s", work.out.String())
		}
	}
	a := read()["ann"][1].Doc
	var item struct {
		User string
		N    int
	}
	if len(a.Summary.Items) == 1 {
		_ = json.Unmarshal(a.Summary.Items[0], &item)
	}
	if a.Summary.Events != 1 || len(a.Summary.Items) != 1 || item.User != "ann" || item.N != 4 {
		t.Errorf("ann's second job: events %d, items %s", a.Summary.Events, a.Summary.Items)
	}

	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{
		`coalesce_push_total{result="2xx",type="digest"} 4`,
		`coalesce_push_total{result="5xx",type="digest"} 1`,
		`coalesce_push_total{result="4xx",type="digest"} 1`,
		`coalesce_jobs_total{result="dead",type="digest"} 1`,
		`coalesce_jobs_total{result="ok",type="digest"} 4`,
	} {
		if !bytes.Contains(metrics, []byte(line)) {
			t.Errorf("work --metrics lacks %s", line)
		}
	}
	if t.Failed() {
		t.Logf("work output:\n%s", work.out.String())
	}
	work.stop(t)
	serve.stop(t)
	// The URL's token (a query parameter) is in no log line, those of the
	// handler's 500s included. On 47bb46e "working" showed the URL whole.
	if out := work.out.String(); strings.Contains(out, "q-s3cret-q") {
		t.Errorf("work logged the --post URL's token:\n%s", out)
	}
}

// TestWorkPostRefusals: --post takes an absolute http(s) URL, and not with
// --exec.
func TestWorkPostRefusals(t *testing.T) {
	t.Parallel()
	for args, msg := range map[string]string{
		"--post ftp://x/jobs":          "want an absolute http:// or https:// URL",
		"--post /jobs":                 "want an absolute http:// or https:// URL",
		"--post http://x/ --exec true": "--exec and --post are both set",
	} {
		code, _, stderr := runBin(t, "", append([]string{"work", "--type", "t"}, strings.Fields(args)...)...)
		if code != 2 || !strings.Contains(stderr, msg) {
			t.Errorf("work %s: exit %d, stderr %q; want 2 and %q", args, code, stderr, msg)
		}
	}
}

// TestPythonHandlerChecksTheTokenInConstantTime: the reference Python
// handler, which users copy, compares the bearer token with
// hmac.compare_digest (on 47bb46e with !=, whose timing leaks how much of a
// guess is right), and still refuses a wrong token and takes the right one.
func TestPythonHandlerChecksTheTokenInConstantTime(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("testdata/push_handler.py")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(src), "\n") {
		if strings.Contains(line, `"Authorization"`) && (strings.Contains(line, "!=") || strings.Contains(line, "==")) {
			t.Errorf("push_handler.py compares the token with an operator: %s", strings.TrimSpace(line))
		}
	}
	if !strings.Contains(string(src), `hmac.compare_digest(
                self.headers.get("Authorization"`) {
		t.Error("push_handler.py does not compare the Authorization header with hmac.compare_digest")
	}
	py := python3(t)
	cmd := exec.Command(py, "testdata/push_handler.py", filepath.Join(t.TempDir(), "log.ndjson"))
	cmd.Env = append(os.Environ(), "PUSH_TOKEN=tok-123")
	h := startCmd(t, cmd)
	port := ""
	for deadline := time.Now().Add(10 * time.Second); port == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if f := strings.Fields(h.out.String()); len(f) >= 2 && f[0] == "listening" {
			port = f[1]
		}
	}
	if port == "" {
		t.Fatalf("the handler did not start: %s", h.out.String())
	}
	for token, want := range map[string]int{"Bearer tok-123": 200, "Bearer tok-124": 401, "": 401, "Bearer tok-1234": 401} {
		req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:"+port+"/jobs", strings.NewReader(`{"args":{}}`))
		if token != "" {
			req.Header.Set("Authorization", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Authorization %q: %d, want %d", token, resp.StatusCode, want)
		}
	}
}
