package daemon_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/coalesce-io/coalesce/api"
	"github.com/coalesce-io/coalesce/dashboard"
	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/admin"
	"github.com/coalesce-io/coalesce/internal/apicontract"
	"github.com/coalesce-io/coalesce/internal/daemon"
	"github.com/coalesce-io/coalesce/worker"
)

// The HTTP API is a contract (api/openapi.yaml). Three checks hold the
// handlers to it:
//   - every exchange of this package's HTTP tests goes through contract
//     (newAPIWith): each response must be one the document declares for
//     its operation (status, headers, body schema: an undocumented field or
//     status fails), a request the document calls invalid must be refused;
//   - TestContractRoutes: the routes the API registers and the document's
//     paths and methods are the same sets;
//   - TestContractFields: each response schema's properties are the JSON
//     fields of the Go type the handler encodes, and the reverse;
//   - contractCoverage (after a full run of the package): every documented
//     (method, path, status) was answered by some test, but those excused
//     below with the reason.
//
// A new route (the dashboard's, say) is added to the document, to
// excusedStatuses if no test here can produce one of its answers, and to
// schemaTypes if it answers with a Go type.
var contract = func() *apicontract.Checker {
	c, err := apicontract.New()
	if err != nil {
		panic(err)
	}
	return c
}()

// checkContract returns where a test's checked server reports failures;
// they fail the test at its end.
func checkContract(t *testing.T) func(string) {
	t.Helper()
	var mu sync.Mutex
	var fails []string
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, f := range fails {
			t.Errorf("OpenAPI contract: %s", f)
		}
	})
	return func(f string) {
		mu.Lock()
		fails = append(fails, f)
		mu.Unlock()
	}
}

// excusedStatuses are documented answers no test of this package produces,
// and why.
var excusedStatuses = map[apicontract.Operation]string{
	{Method: "POST", Path: "/v1/events", Status: 500}:                     "a bug's answer (submitError's default)",
	{Method: "GET", Path: "/v1/openapi.json", Status: 401}:                "the same auth wrapper as every /v1 route (TestContractEveryRouteNeedsAToken covers the others)",
	{Method: "DELETE", Path: "/v1/rounds/{type}/{key}", Status: 503}:      "a cancel needs Redis, then NATS: the outage cases are TestStoreDownFailClosedIs503's submit",
	{Method: "POST", Path: "/v1/events:batch", Status: 503}:               "spool_failed (no temporary file) and canceled (the client left while waiting for a slot): no test makes a disk fail",
	{Method: "POST", Path: "/v1/explain", Status: 429}:                    "the same admit() as POST /v1/events, whose 429 TestBackPressure produces",
	{Method: "POST", Path: "/v1/explain", Status: 403}:                    "csrf: the dashboard's session cookie without its CSRF token (access_test.go covers the cookie on the acting routes); a read-only token may explain",
	{Method: "GET", Path: "/v1/overview", Status: 0}:                      "its 400 and 503 come from the dashboard's own checks (its tests); with Redis down it answers 200 with errors",
	{Method: "GET", Path: "/v1/rounds/{type}/{key}/history", Status: 503}: "the history is the daemon's memory: it needs no server",
	{Method: "GET", Path: "/v1/workers", Status: 503}:                     "NATS down: no test stops the embedded NATS under the API",
	{Method: "POST", Path: "/v1/dead:replay", Status: 0}:                  "400 and 503 as GET /v1/dead: TestDeadLettersEndToEnd (cmd/coalesce) on the built binary",
	{Method: "POST", Path: "/v1/jobs/progress", Status: 0}:                "exclusive leases over HTTP: covered over NATS by the protocol tests, and by cmd/coalesce",
	{Method: "GET", Path: "/v1/dead", Status: 0}:                          "dead letters over HTTP: TestDeadLettersEndToEnd (cmd/coalesce) runs them on the built binary",
	{Method: "DELETE", Path: "/v1/dead", Status: 0}:                       "as GET /v1/dead",
	{Method: "GET", Path: "/v1/dead/{seq}", Status: 0}:                    "as GET /v1/dead",
	{Method: "DELETE", Path: "/v1/dead/{seq}", Status: 0}:                 "as GET /v1/dead",
	{Method: "POST", Path: "/v1/dead/{seq}/replay", Status: 0}:            "as GET /v1/dead",
}

// contractCoverage fails a full run of the package (no -run) that left a
// documented answer unanswered, listing them.
func contractCoverage(code int) int {
	if code != 0 || testing.Short() {
		return code
	}
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() != "" {
		return code
	}
	missing := contract.Missing(excusedStatuses)
	if len(missing) == 0 {
		return code
	}
	fmt.Fprintf(os.Stderr, "FAIL: OpenAPI contract: %d documented answers no test produced (produce them, or excuse them in contract_test.go):\n", len(missing))
	for _, op := range missing {
		fmt.Fprintf(os.Stderr, "  %s\n", op)
	}
	return 1
}

// newAllRoutesAPI serves an API with every optional part configured: the
// worker protocol, dead letters, the dashboard's routes and pages.
func newAllRoutesAPI(t *testing.T, readTokens []string, tokens ...string) *apiFixture {
	t.Helper()
	return newAPIWithFixture(t, func(_ *apiFixture, js jetstream.JetStream, c *daemon.APIConfig) {
		c.ReadTokens = readTokens
		c.Protocol = daemon.NewProtocol(daemon.ProtocolConfig{Coalescer: c.Coalescer, Publisher: c.Publisher})
		c.Dead = &admin.Dead{JS: js, Stream: c.Publisher.Stream(), Subjects: c.Publisher.Subjects()}
		d, err := dashboard.New(dashboard.Config{Coalescer: c.Coalescer, Publisher: c.Publisher, JetStream: js, Path: daemon.UIPath, APIBase: "/",
			Tokens: c.Tokens, ReadTokens: c.ReadTokens, Counters: c.Metrics.DashboardCounters, History: c.Metrics.History})
		if err != nil {
			t.Fatal(err)
		}
		c.Dashboard, c.UI = d, true
	}, tokens...)
}

// TestContractRoutes: the routes the API serves and the document's paths
// are the same, method by method; what is missing on either side is listed.
func TestContractRoutes(t *testing.T) {
	t.Parallel()
	served := map[string][]string{}
	for _, r := range newAllRoutesAPI(t, nil).api.Routes() {
		if r.Pattern == "/" {
			continue // the not-found answer for everything else
		}
		served[r.Pattern] = append(served[r.Pattern], r.Methods...)
	}
	documented := contract.Routes()
	var missing, extra []string
	for path, methods := range served {
		for _, m := range methods {
			if !slices.Contains(documented[path], m) {
				missing = append(missing, m+" "+path)
			}
		}
	}
	for path, methods := range documented {
		for _, m := range methods {
			if !slices.Contains(served[path], m) {
				extra = append(extra, m+" "+path)
			}
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("served but not in api/openapi.yaml:\n  %s", strings.Join(missing, "\n  "))
	}
	if len(extra) > 0 {
		t.Errorf("in api/openapi.yaml but not served:\n  %s", strings.Join(extra, "\n  "))
	}
}

// schemaTypes maps the document's response schemas to the Go types their
// handlers encode (extra: members the handler adds around the type).
var schemaTypes = map[string]struct {
	types []any
	extra []string
}{
	"Event":        {types: []any{debounce.Event{}}},
	"Decision":     {types: []any{debounce.Decision{}}},
	"Round":        {types: []any{debounce.Round{}}},
	"Explanation":  {types: []any{debounce.Explanation{}}, extra: []string{"policy"}},
	"Policy":       {types: []any{daemon.PolicyView{}}},
	"Summary":      {types: []any{debounce.Summary{}}},
	"JobDocument":  {types: []any{worker.Document{}}},
	"StartAnswer":  {types: []any{daemon.StartAnswer{}}},
	"DeadLetter":   {types: []any{admin.DeadLetter{}}},
	"ReplayAnswer": {types: []any{admin.Replayed{}}},
	// The dashboard's (generated from these types, then kept by this test).
	"Overview":      {types: []any{dashboard.Overview{}}},
	"TypeOverview":  {types: []any{dashboard.TypeOverview{}}},
	"OverdueRound":  {types: []any{dashboard.OverdueRound{}}},
	"LocalJoins":    {types: []any{dashboard.LocalJoins{}}},
	"OutboxState":   {types: []any{dashboard.OutboxState{}}},
	"Series":        {types: []any{dashboard.Series{}}},
	"RoundsPage":    {types: []any{dashboard.RoundsPage{}}},
	"RoundEntry":    {types: []any{dashboard.RoundEntry{}}},
	"Timeline":      {types: []any{dashboard.Timeline{}}},
	"TimelineRound": {types: []any{dashboard.TimelineRound{}}},
	"SearchResult":  {types: []any{dashboard.SearchResult{}}},
	"WorkersPage":   {types: []any{dashboard.WorkersPage{}}},
	"Worker":        {types: []any{dashboard.Worker{}}},
}

// TestContractFields: each schema's properties are exactly the JSON fields
// of its Go type.
func TestContractFields(t *testing.T) {
	t.Parallel()
	b, err := api.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]any `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for name, st := range schemaTypes {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("schema %s is not in the document", name)
			continue
		}
		fields := map[string]bool{}
		for _, e := range st.extra {
			fields[e] = true
		}
		for _, v := range st.types {
			jsonFields(reflect.TypeOf(v), fields)
		}
		for f := range fields {
			if _, ok := s.Properties[f]; !ok {
				t.Errorf("%s: field %q is encoded by the handler but not in the schema", name, f)
			}
		}
		for p := range s.Properties {
			if !fields[p] {
				t.Errorf("%s: property %q is in the schema but no handler encodes it", name, p)
			}
		}
	}
}

// jsonFields adds the JSON member names encoding/json writes for t.
func jsonFields(t reflect.Type, out map[string]bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			jsonFields(f.Type, out)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = true
	}
}

// TestContractErrorAnswers produces the documented answers no behaviour
// test needs, so that each is checked against the document: HEAD probes,
// size limits and unknown types on every body route, and Redis down on the
// routes that need it.
func TestContractErrorAnswers(t *testing.T) {
	t.Parallel()
	f := newAllRoutesAPI(t, nil)
	args := fmt.Sprintf(`{"c":"%d"}`, time.Now().UnixNano())
	jobs, err := f.nc.SubscribeSync("co.run.notify.>")
	if err != nil {
		t.Fatal(err)
	}
	if code, out := f.do(t, "POST", "/v1/events", `{"type":"notify","args":`+args+`}`); code != 200 {
		t.Fatalf("submit: %d %s", code, out)
	}
	msg, err := jobs.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	headers := func(extra ...string) []string {
		var h []string
		for k, vs := range msg.Header {
			if !strings.HasPrefix(k, "Nats-") {
				h = append(h, k, vs[0])
			}
		}
		return append(h, extra...)
	}
	big := strings.Repeat("x", 5000)
	type call struct {
		method, path, body string
		header             []string
		status             int
	}
	run := func(calls []call) {
		for _, c := range calls {
			if code, out := f.do(t, c.method, c.path, c.body, c.header...); code != c.status {
				t.Errorf("%s %s: %d %.300s, want %d", c.method, c.path, code, out, c.status)
			}
		}
	}
	run([]call{
		{"HEAD", "/healthz", "", nil, 200},
		{"HEAD", "/readyz", "", nil, 200},
		{"POST", "/v1/events:batch", strings.Repeat(`{"type":"notify","args":{}}`+"\n", 10_000), nil, 413},
		{"POST", "/v1/explain", `{"type":`, nil, 400},
		{"POST", "/v1/explain", `{"type":"nope","args":{}}`, nil, 404},
		{"POST", "/v1/explain", `{"type":"notify","args":"` + big + `"}`, nil, 413},
		{"POST", "/v1/jobs/start", big, headers(), 413},
		{"POST", "/v1/jobs/finish", big, headers("Coalesce-Result", "ok"), 413},
		{"POST", "/v1/jobs/finish", string(msg.Data), headers("Coalesce-Type", "nope", "Coalesce-Result", "ok"), 404},
		{"GET", "/ui/", "", nil, 200},
		{"GET", "/v1/workers", "", nil, 200},
		{"POST", "/v1/dead:replay?type=notify", "", nil, 200},
		{"GET", "/v1/rounds/nope", "", nil, 404},
		{"GET", "/v1/rounds/nope/" + strings.Repeat("0", 64) + "/history", "", nil, 404},
	})
	f.redis.Stop()
	run([]call{
		{"HEAD", "/readyz", "", nil, 503},
		{"POST", "/v1/explain", `{"type":"notify","args":{}}`, nil, 503},
		{"GET", "/v1/rounds/notify/" + strings.Repeat("0", 64), "", nil, 503},
		{"GET", "/v1/rounds/notify", "", nil, 503},
		{"GET", "/v1/search?type=notify&q=" + strings.Repeat("0", 64), "", nil, 503},
		{"POST", "/v1/jobs/start", string(msg.Data), headers(), 503},
		{"POST", "/v1/jobs/finish", string(msg.Data), headers("Coalesce-Result", "ok"), 503},
	})
}
