package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/coalesce-io/coalesce/internal/testenv"
)

const uiConfig = `http:
  tokens: [writer-token-0123456789]
  read_tokens: [reader-token-0123456789]
  ui: on
policies:
  recompute:
    mode: debounce
    window: 10m
    key_fields: [tenant_id]
  digest:
    mode: debounce
    window: 1s
    payload: accumulate
    key_fields: [user]
`

const (
	writeToken = "writer-token-0123456789"
	readToken  = "reader-token-0123456789"
)

// chromiumPath is Debian's chromium, or CHROMIUM.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv(testenv.RequireEnv) == "1" {
		t.Fatalf("no chromium (apt-get install chromium; .ci/run does) and %s=1", testenv.RequireEnv)
	}
	t.Skip("no chromium: apt-get install chromium")
	return ""
}

// uiAPI calls the daemon's API with a bearer token and decodes the answer.
func uiAPI(t *testing.T, base, method, path, token, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
	return resp.StatusCode
}

// screenshots is where the test writes a picture of each page:
// COALESCE_SCREENSHOTS, else a temporary folder (kept, and named in the log).
func screenshots(t *testing.T) string {
	dir := os.Getenv("COALESCE_SCREENSHOTS")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "coalesce-ui-"); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// TestDashboardInABrowser drives the dashboard of the built daemon, on a
// real redis-server and nats-server, in headless Chromium: every page loads
// with no console error, its numbers are the API's for the same state,
// search finds a round by key and by args, a cancel and a bulk replay made
// through the pages take effect, a read-only session cannot act (buttons
// disabled and the API refusing it), and a stale CSRF token is refused.
func TestDashboardInABrowser(t *testing.T) {
	t.Parallel()
	chrome := chromiumPath(t)
	rs := testenv.NewRedis(t)
	ns := testenv.NATS(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "coalesce.yaml")
	if err := os.WriteFile(cfgPath, []byte(uiConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	httpAddr := freeAddr(t)
	serve := start(t, "serve", "--config", cfgPath, "--redis", rs.URL, "--nats", ns.URL, "--http", httpAddr)
	base := "http://" + httpAddr
	waitHTTP(t, base+"/readyz", serve)
	shots := screenshots(t)

	// State: five tenants' rounds (tenant 1 with three events), and three
	// digests whose jobs a failing worker dead-letters.
	keys := map[int]string{}
	for _, tenant := range []int{1, 1, 1, 2, 3, 4, 5} {
		var d struct{ Key, Round string }
		if code := uiAPI(t, base, "POST", "/v1/events", writeToken, fmt.Sprintf(`{"type":"recompute","args":{"tenant_id":%d}}`, tenant), &d); code != 200 {
			t.Fatalf("submit: %d", code)
		}
		keys[tenant] = d.Key
	}
	fixed := filepath.Join(dir, "fixed")
	runs := filepath.Join(dir, "runs.ndjson")
	start(t, "work", "--redis", rs.URL, "--nats", ns.URL, "--config", cfgPath, "--type", "digest",
		"--exec", `doc=$(cat); [ -e `+fixed+` ] || exit 100; printf '%s\n' "$doc" >> `+runs)
	for _, user := range []string{"ann", "bo", "cy"} {
		if code := uiAPI(t, base, "POST", "/v1/events", writeToken, `{"type":"digest","args":{"user":"`+user+`","n":1}}`, nil); code != 200 {
			t.Fatalf("submit digest: %d", code)
		}
	}
	type deadList struct {
		Matching int            `json:"matching"`
		Codes    map[string]int `json:"codes"`
	}
	var dl deadList
	for deadline := time.Now().Add(30 * time.Second); dl.Matching < 3; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("3 dead letters not there within 30 s: %+v\n%s", dl, serve.out.String())
		}
		uiAPI(t, base, "GET", "/v1/dead?type=digest", readToken, "", &dl)
	}
	if dl.Codes["permanent"] != 3 {
		t.Errorf("dead letters by code %v, want 3 permanent", dl.Codes)
	}

	// The browser.
	opts := append(chromedp.DefaultExecAllocatorOptions[:0:0],
		chromedp.ExecPath(chrome), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelCtx := chromedp.NewContext(actx)
	defer cancelCtx()
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	defer cancelTimeout()
	var (
		mu       sync.Mutex
		problems []string
		dialogs  []string
	)
	listenErr := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				mu.Lock()
				problems = append(problems, "console "+string(ev.Type)+": "+strings.Join(args, " "))
				mu.Unlock()
			}
		case *runtime.EventExceptionThrown:
			mu.Lock()
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			problems = append(problems, fmt.Sprintf("exception: %s at %s:%d", msg, d.URL, d.LineNumber))
			mu.Unlock()
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError && !expectedLogError(ev.Entry) {
				mu.Lock()
				problems = append(problems, "log: "+ev.Entry.Text+" "+ev.Entry.URL)
				mu.Unlock()
			}
		case *page.EventJavascriptDialogOpening:
			mu.Lock()
			dialogs = append(dialogs, ev.Message)
			mu.Unlock()
			go func() {
				_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			}()
		}
	})
	if listenErr != nil {
		t.Fatalf("chromium: %v", listenErr)
	}
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	shot := func(name string) {
		t.Helper()
		run("settle", chromedp.Sleep(300*time.Millisecond))
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	// waitText waits until sel's text is want (the page polls every 5 s).
	waitText := func(sel, want string) {
		t.Helper()
		var got string
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
			got, _ = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel), chromedp.AtLeast(0)))
			if strings.TrimSpace(got) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s shows %q, want %q", sel, got, want)
			}
		}
	}
	evalJSON := func(js string, out any) {
		t.Helper()
		raw, err := chromedp.Run(ctx, chromedp.Evaluate[json.RawMessage](js, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("eval %s: %v", js, err)
		}
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("eval %s: %v: %s", js, err, raw)
		}
	}
	// apiFromPage calls the API from the page, with its cookie and the given
	// CSRF token, and returns the status and error code.
	apiFromPage := func(method, path, csrf string) (int, string) {
		t.Helper()
		var res struct {
			Status int
			Code   string
		}
		evalJSON(fmt.Sprintf(`fetch(%q, {method: %q, headers: {"X-CSRF-Token": %q}}).then(async r => ({status: r.status, code: ((await r.json()).error || {}).code || ""}))`,
			base+path, method, csrf), &res)
		return res.Status, res.Code
	}
	signIn := func(token string) {
		t.Helper()
		run("sign in", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("token")),
			chromedp.SendKeys(chromedp.ID("token"), token), chromedp.Click(chromedp.ID("sign-in")),
			chromedp.WaitVisible(chromedp.ID("saved")))
	}
	signOut := func() {
		t.Helper()
		run("sign out", chromedp.Click(chromedp.ID("sign-out")), chromedp.WaitVisible(chromedp.ID("token")))
	}
	csrf := func() string {
		var s string
		evalJSON(`document.body.dataset.csrf`, &s)
		return s
	}

	if _, err := chromedp.Call(ctx, log.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("enable the log: %v", err)
	}
	// Signed out: every page sends to the sign-in; a wrong token is refused.
	run("sign-in page", chromedp.Navigate(base+"/ui/rounds"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), "wrong"), chromedp.Click(chromedp.ID("sign-in")), chromedp.WaitVisible(chromedp.ID("signin-error")))
	shot("sign-in")

	// Read-only: sees everything, can change nothing.
	signIn(readToken)
	if got := text("#readonly"); got != "read-only" {
		t.Errorf("read-only badge %q", got)
	}
	run("rounds, read-only", chromedp.Navigate(base+"/ui/rounds?type=recompute"), chromedp.WaitVisible(chromedp.CSS(`#rounds tbody tr[data-key] button.cancel`)))
	var disabled struct {
		All   bool
		Title string
	}
	evalJSON(`(() => { const b = [...document.querySelectorAll("button.cancel")]; return {all: b.length > 0 && b.every(x => x.disabled), title: b[0].title}; })()`, &disabled)
	if !disabled.All || !strings.Contains(disabled.Title, "read-only") {
		t.Errorf("cancel buttons of a read-only session: %+v, want all disabled saying why", disabled)
	}
	if code, ecode := apiFromPage("DELETE", "/v1/rounds/recompute/"+keys[2]+"?round=0000000000000001", csrf()); code != 403 || ecode != "read_only" {
		t.Errorf("a cancel with a read-only session: %d %s, want 403 read_only", code, ecode)
	}
	if code, ecode := apiFromPage("POST", "/v1/dead:replay?type=digest", csrf()); code != 403 || ecode != "read_only" {
		t.Errorf("a bulk replay with a read-only session: %d %s, want 403 read_only", code, ecode)
	}
	signOut()

	// A stale CSRF token (a page of an earlier session) is refused.
	signIn(writeToken)
	stale := csrf()
	signOut()
	signIn(writeToken)
	if code, ecode := apiFromPage("DELETE", "/v1/rounds/recompute/"+keys[2]+"?round=0000000000000001", stale); code != 403 || ecode != "csrf" {
		t.Errorf("a stale CSRF token: %d %s, want 403 csrf", code, ecode)
	}
	if code, _ := apiFromPage("DELETE", "/v1/rounds/recompute/"+keys[2]+"?round=0000000000000001", ""); code != 403 {
		t.Errorf("no CSRF token: %d, want 403", code)
	}

	// Overview: the numbers are the API's.
	var ov struct {
		Totals struct {
			Events  float64 `json:"events"`
			Jobs    float64 `json:"jobs"`
			Saved   float64 `json:"jobs_saved"`
			Pending int     `json:"pending"`
		} `json:"totals"`
		DeadLetters int `json:"dead_letters"`
	}
	uiAPI(t, base, "GET", "/v1/overview", readToken, "", &ov)
	if ov.Totals.Events != 10 || ov.Totals.Saved != 2 || ov.DeadLetters != 3 {
		t.Errorf("overview API: %+v, want 10 events, 2 saved, 3 dead letters", ov)
	}
	waitText("#saved", fmt.Sprint(ov.Totals.Saved))
	waitText("#events", fmt.Sprint(ov.Totals.Events))
	waitText("#jobs", fmt.Sprint(ov.Totals.Jobs))
	waitText("#pending", fmt.Sprint(ov.Totals.Pending))
	waitText("#dead-count", "3")
	waitText(`#types tr[data-type="recompute"] td.pending`, "5")
	shot("overview")

	// Pending rounds: the API's page, and search by key and by args.
	var page1 struct {
		Rounds []struct{ Key, Round, State string } `json:"rounds"`
	}
	uiAPI(t, base, "GET", "/v1/rounds/recompute", readToken, "", &page1)
	if len(page1.Rounds) != 5 {
		t.Fatalf("API rounds of recompute: %+v", page1)
	}
	run("rounds", chromedp.Navigate(base+"/ui/rounds?type=recompute"), chromedp.WaitVisible(chromedp.CSS(`#rounds tbody tr[data-key]`)))
	var listed []string
	evalJSON(`[...document.querySelectorAll("#rounds tbody tr[data-key]")].map(r => r.dataset.key)`, &listed)
	for i, r := range page1.Rounds {
		if i >= len(listed) || listed[i] != r.Key {
			t.Errorf("rounds page lists %v, the API %+v", listed, page1.Rounds)
			break
		}
	}
	shot("rounds")
	// Each search replaces the last one's answer: the test clears it first.
	clearFound := chromedp.Evaluate[bool](`document.querySelector("#found").replaceChildren() === undefined`)
	search := func(what, query, want string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, clearFound); err != nil {
			t.Fatal(err)
		}
		run(what, chromedp.SetValue(chromedp.ID("q"), query), chromedp.Click(chromedp.ID("find")), chromedp.WaitVisible(chromedp.ID(want)))
	}
	search("search by key", keys[2], "found-round")
	if got := text("#found-key"); got != keys[2] {
		t.Errorf("search by key found %q, want %s", got, keys[2])
	}
	search("search by args", `{"tenant_id": 3, "ignored": true}`, "found-round")
	if got := text("#found-key"); got != keys[3] {
		t.Errorf("search by args found %q, want tenant 3's %s", got, keys[3])
	}
	search("search finds nothing", `{"tenant_id": 99}`, "found-none")
	shot("rounds-search")

	// A round's page: its summary, timeline, and a cancel that takes effect.
	var r1 struct {
		Round  string `json:"round"`
		Events int    `json:"events"`
	}
	uiAPI(t, base, "GET", "/v1/rounds/recompute/"+keys[1], readToken, "", &r1)
	run("round", chromedp.Navigate(base+"/ui/round?type=recompute&key="+keys[1]), chromedp.WaitVisible(chromedp.ID("round-summary")))
	if got := text("#round-events"); got != fmt.Sprint(r1.Events) || r1.Events != 3 {
		t.Errorf("round page: %s events, the API %d (want 3)", got, r1.Events)
	}
	var imgWidth int
	for deadline := time.Now().Add(10 * time.Second); imgWidth == 0 && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		evalJSON(`document.querySelector("#timeline").naturalWidth`, &imgWidth)
	}
	if imgWidth == 0 {
		t.Error("the timeline picture did not load")
	}
	run("history rows", chromedp.WaitVisible(chromedp.CSS(`#history tbody tr[data-round="`+r1.Round+`"]`)))
	shot("round")
	run("cancel", chromedp.Click(chromedp.ID("cancel")), chromedp.WaitVisible(chromedp.ID("no-round")))
	if code := uiAPI(t, base, "GET", "/v1/rounds/recompute/"+keys[1], readToken, "", nil); code != 404 {
		t.Errorf("after the cancel the round answers %d, want 404", code)
	}
	var tl struct {
		Rounds []struct{ Round, State string } `json:"rounds"`
	}
	uiAPI(t, base, "GET", "/v1/rounds/recompute/"+keys[1]+"/history", readToken, "", &tl)
	if len(tl.Rounds) != 1 || tl.Rounds[0].Round != r1.Round || tl.Rounds[0].State != "cancelled" {
		t.Errorf("history after the cancel: %+v, want round %s cancelled", tl.Rounds, r1.Round)
	}
	shot("round-cancelled")

	// Explain.
	var ex struct{ Would, Key string }
	uiAPI(t, base, "POST", "/v1/explain", readToken, `{"type":"recompute","args":{"tenant_id":2}}`, &ex)
	run("explain", chromedp.Navigate(base+"/ui/explain"), chromedp.WaitVisible(chromedp.ID("event")),
		chromedp.SetValue(chromedp.ID("event"), `{"type":"recompute","args":{"tenant_id":2}}`),
		chromedp.Click(chromedp.ID("run-explain")), chromedp.WaitVisible(chromedp.ID("would")))
	if got := text("#would"); got != ex.Would || ex.Would != "coalesced" {
		t.Errorf("explain page: would %q, the API %q (want coalesced)", got, ex.Would)
	}
	shot("explain")

	// Dead letters: the count the API gives, then a bulk replay of every
	// matching letter, confirmed with that count, that runs the jobs again.
	run("dead letters", chromedp.Navigate(base+"/ui/dead?type=digest"), chromedp.WaitVisible(chromedp.CSS(`#letters tbody tr[data-seq]`)))
	waitText("#matching", "3 dead letters match")
	shot("dead")
	var seq string
	evalJSON(`document.querySelector("#letters tbody tr[data-seq]").dataset.seq`, &seq)
	run("one letter", chromedp.Navigate(base+"/ui/letter?seq="+seq), chromedp.WaitVisible(chromedp.ID("reason")))
	shot("dead-letter")
	if err := os.WriteFile(fixed, nil, 0o644); err != nil { // the handler is fixed
		t.Fatal(err)
	}
	run("replay all", chromedp.Navigate(base+"/ui/dead?type=digest&code=permanent"), chromedp.WaitVisible(chromedp.CSS(`#letters tbody tr[data-seq]`)))
	waitText("#matching", "3 dead letters match")
	run("click replay all", chromedp.Click(chromedp.ID("replay-all")))
	waitText("#matching", "0 dead letters match")
	mu.Lock()
	confirmed := strings.Join(dialogs, " | ")
	mu.Unlock()
	if !strings.Contains(confirmed, "Replay 3 dead letters of digest with code permanent?") {
		t.Errorf("the bulk replay's confirmation: %q", confirmed)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		raw, _ := os.ReadFile(runs)
		if n := bytes.Count(raw, []byte("\n")); n == 3 && bytes.Contains(raw, []byte(`"release":"replayed"`)) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the replayed jobs ran %d times, want 3:\n%s", n, raw)
		}
	}

	// Policies and workers: the API's.
	var pol struct{ Policies []struct{ Type string } }
	uiAPI(t, base, "GET", "/v1/policies", readToken, "", &pol)
	run("policies", chromedp.Navigate(base+"/ui/policies"), chromedp.WaitVisible(chromedp.CSS(`#policies tbody tr[data-type]`)))
	var rows int
	evalJSON(`document.querySelectorAll("#policies tbody tr[data-type]").length`, &rows)
	if rows != len(pol.Policies) || rows != 2 {
		t.Errorf("policies page: %d rows, the API %d policies", rows, len(pol.Policies))
	}
	shot("policies")
	var wk struct {
		Workers []struct {
			Name    string `json:"name"`
			Pending uint64 `json:"pending"`
		} `json:"workers"`
	}
	uiAPI(t, base, "GET", "/v1/workers", readToken, "", &wk)
	if len(wk.Workers) == 0 {
		t.Fatal("no consumer in the API's workers")
	}
	run("workers", chromedp.Navigate(base+"/ui/workers"), chromedp.WaitVisible(chromedp.CSS(`#workers tbody tr[data-consumer="`+wk.Workers[0].Name+`"]`)))
	waitText(`#workers tr[data-consumer="`+wk.Workers[0].Name+`"] td.pending`, fmt.Sprint(wk.Workers[0].Pending))
	shot("workers")
	run("overview again", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("saved")))
	waitText("#dead-count", "0")

	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Errorf("browser: %s", p)
	}
}

// expectedLogError: the log entries the test provokes on purpose (the
// sign-in refusing a wrong token, the API refusing a read-only session or a
// stale CSRF token, a round page's 404 after its cancel).
func expectedLogError(e *log.Entry) bool {
	return e.Source == log.EntrySourceNetwork && (strings.Contains(e.Text, "401") || strings.Contains(e.Text, "403") || strings.Contains(e.Text, "404"))
}
