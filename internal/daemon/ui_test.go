package daemon_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/coalesce-io/coalesce/dashboard"
	"github.com/coalesce-io/coalesce/internal/daemon"
)

// newAPIWithDashboard serves the dashboard's routes beside the API, as Run
// does.
func newAPIWithDashboard(t *testing.T, tokens ...string) *apiFixture {
	return newAPIWithFixture(t, func(_ *apiFixture, js jetstream.JetStream, c *daemon.APIConfig) {
		d, err := dashboard.New(dashboard.Config{Coalescer: c.Coalescer, Publisher: c.Publisher, JetStream: js, Path: daemon.UIPath, APIBase: "/",
			Tokens: c.Tokens, ReadTokens: c.ReadTokens, Counters: c.Metrics.DashboardCounters, History: c.Metrics.History})
		if err != nil {
			t.Fatal(err)
		}
		c.Dashboard, c.UI = d, true
	}, tokens...)
}

// TestDashboardRoutes: the rounds of a type page by page with the cursor,
// in the state Redis gives them; search by key, args and explicit key, and
// bad queries refused naming the field; the overview counts what was
// decided; a key's history shows the rounds the daemon opened.
func TestDashboardRoutes(t *testing.T) {
	t.Parallel()
	f := newAPIWithDashboard(t, "tok")
	auth := []string{"Authorization", "Bearer tok"}
	keys := map[int]string{}
	for i := range 7 {
		code, body := f.do(t, "POST", "/v1/events", fmt.Sprintf(`{"type":"recompute","args":{"tenant_id":%d}}`, i), auth...)
		if code != 200 {
			t.Fatalf("submit: %d %s", code, body)
		}
		var d struct{ Key string }
		_ = json.Unmarshal(body, &d)
		keys[i] = d.Key
	}
	f.do(t, "POST", "/v1/events", `{"type":"recompute","args":{"tenant_id":0}}`, auth...)
	if code, body := f.do(t, "POST", "/v1/events", `{"type":"recompute","key":"nightly","args":{"tenant_id":100}}`, auth...); code != 200 {
		t.Fatalf("submit with a key: %d %s", code, body)
	}
	var seen []string
	after := ""
	for pages := 0; ; pages++ {
		code, body := f.do(t, "GET", "/v1/rounds/recompute?limit=3&after="+after, "", auth...)
		var page dashboard.RoundsPage
		if code != 200 || json.Unmarshal(body, &page) != nil || pages > 4 {
			t.Fatalf("page %d: %d %s", pages, code, body)
		}
		for _, r := range page.Rounds {
			if r.State != "pending" || r.Events < 1 {
				t.Errorf("round %+v", r)
			}
			seen = append(seen, r.Key.String())
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if len(seen) != 8 || seen[0] != keys[0] || seen[6] != keys[6] {
		t.Errorf("listed %d rounds %v, want the 8 in order", len(seen), seen)
	}
	for _, c := range []struct{ q, kind, key string }{
		{keys[3], "key", keys[3]},
		{`{"tenant_id":3,"other":1}`, "args", keys[3]},
		{"nightly", "explicit_key", seen[7]},
	} {
		code, body := f.do(t, "GET", "/v1/search?type=recompute&q="+urlQuery(c.q), "", auth...)
		var res dashboard.SearchResult
		_ = json.Unmarshal(body, &res)
		if code != 200 || res.Kind != c.kind || res.Key.String() != c.key || res.Round == nil {
			t.Errorf("search %s: %d %s, want %s %s pending", c.q, code, body, c.kind, c.key)
		}
	}
	for _, c := range []struct{ path, code, field string }{
		{"/v1/search?type=recompute&q=" + urlQuery(`{"tenant_id":9007199254740993}`), "unsafe_integer", "q"},
		{"/v1/search?type=recompute&q=" + urlQuery(`{"x":1}`), "missing_key_field", "q"},
		{"/v1/search?type=recompute", "invalid_request", "q"},
		{"/v1/search?type=nope&q=x", "no_policy", "type"},
		{"/v1/rounds/recompute?after=x", "invalid_request", "after"},
		{"/v1/rounds/recompute/zz/history", "invalid_key", "key"},
	} {
		code, body := f.do(t, "GET", c.path, "", auth...)
		var e errBody
		_ = json.Unmarshal(body, &e)
		if code/100 != 4 || e.Error.Code != c.code || e.Error.Field != c.field {
			t.Errorf("GET %s: %d %s, want %s on %s", c.path, code, body, c.code, c.field)
		}
	}
	code, body := f.do(t, "GET", "/v1/overview", "", auth...)
	var ov dashboard.Overview
	if code != 200 || json.Unmarshal(body, &ov) != nil || ov.Totals.Events != 9 || ov.Totals.Jobs != 8 || ov.Totals.Pending != 8 {
		t.Errorf("overview: %d %s, want 9 events, 8 jobs, 8 pending", code, body)
	}
	code, body = f.do(t, "GET", "/v1/rounds/recompute/"+keys[0]+"/history", "", auth...)
	var tl dashboard.Timeline
	if code != 200 || json.Unmarshal(body, &tl) != nil || len(tl.Rounds) != 1 || tl.Rounds[0].State != "pending" || !tl.Rounds[0].Recorded || tl.Rounds[0].Events != 2 {
		t.Errorf("history: %d %s", code, body)
	}
	if code, _ := f.do(t, "GET", "/v1/overview", ""); code != 401 {
		t.Errorf("overview without a token: %d", code)
	}
}

func urlQuery(s string) string {
	return strings.NewReplacer("%", "%25", "&", "%26", "+", "%2B", " ", "%20", "#", "%23", `"`, "%22", "{", "%7B", "}", "%7D").Replace(s)
}
