package daemon_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/coalesce-io/coalesce/internal/daemon"
)

// TestReadOnlyTokens: a token from http.read_tokens reads every route (GET,
// explain) and is refused, 403 read_only, on every route that acts:
// submit, batch, cancel, the worker protocol. Nothing it sent changed Redis.
func TestReadOnlyTokens(t *testing.T) {
	t.Parallel()
	f := newAPIWith(t, func(c *daemon.APIConfig) { c.ReadTokens = []string{"reader"} }, "writer")
	read := []string{"Authorization", "Bearer reader"}
	ev := `{"type":"recompute","args":{"tenant_id":7}}`
	code, body := f.do(t, "POST", "/v1/events", ev, "Authorization", "Bearer writer")
	if code != 200 {
		t.Fatalf("submit with the write token: %d %s", code, body)
	}
	var d struct{ Key, Round string }
	_ = json.Unmarshal(body, &d)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/policies", ""},
		{"GET", "/v1/rounds/recompute/" + d.Key, ""},
		{"POST", "/v1/explain", ev},
		{"GET", "/metrics", ""},
	} {
		if code, body := f.do(t, c.method, c.path, c.body, read...); code != 200 {
			t.Errorf("%s %s with a read token: %d %s, want 200", c.method, c.path, code, body)
		}
	}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/events", `{"type":"recompute","args":{"tenant_id":8}}`},
		{"POST", "/v1/events:batch", `{"type":"recompute","args":{"tenant_id":9}}` + "\n"},
		{"DELETE", "/v1/rounds/recompute/" + d.Key + "?round=" + d.Round, ""},
	} {
		code, body := f.do(t, c.method, c.path, c.body, read...)
		if code != 403 || !bytes.Contains(body, []byte(`"code":"read_only"`)) {
			t.Errorf("%s %s with a read token: %d %s, want 403 read_only", c.method, c.path, code, body)
		}
	}
	// The round is still pending, with its one event; tenants 8 and 9 have none.
	code, body = f.do(t, "GET", "/v1/rounds/recompute/"+d.Key, "", read...)
	if code != 200 || !strings.Contains(string(body), `"events":1`) {
		t.Errorf("the round after the refused actions: %d %s", code, body)
	}
	code, body = f.do(t, "POST", "/v1/explain", `{"type":"recompute","args":{"tenant_id":8}}`, read...)
	if code != 200 || strings.Contains(string(body), `"pending"`) || !strings.Contains(string(body), `"would":"scheduled"`) {
		t.Errorf("explain of tenant 8 after its refused submit: %d %s, want nothing pending", code, body)
	}
}
