package access_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/internal/access"
)

func request(method string, c *http.Cookie, header map[string]string) *http.Request {
	r := httptest.NewRequest(method, "/v1/x", nil)
	if c != nil {
		r.AddCookie(c)
	}
	for k, v := range header {
		r.Header.Set(k, v)
	}
	return r
}

func TestLevelsBearerAndSession(t *testing.T) {
	t.Parallel()
	tok := access.New([]string{"w1", " "}, []string{"r1"})
	for _, c := range []struct {
		auth string
		want access.Level
	}{{"Bearer w1", access.Write}, {"bearer r1", access.Read}, {"Bearer nope", access.None}, {"Bearer ", access.None}, {"", access.None}, {"Basic w1", access.None}} {
		r := request(http.MethodPost, nil, map[string]string{"Authorization": c.auth})
		if got, err := tok.Request(r); got != c.want || err != nil {
			t.Errorf("%q: %v %v, want %v", c.auth, got, err, c.want)
		}
	}
	if _, _, ok := tok.SignIn("nope", "/", false, time.Now()); ok {
		t.Fatal("a wrong token signed in")
	}
	now := time.Now()
	wc, ws, ok := tok.SignIn("w1", "/", false, now)
	if !ok || ws.Level != access.Write || !wc.HttpOnly || wc.SameSite != http.SameSiteStrictMode || strings.Contains(wc.Value, "w1") {
		t.Fatalf("sign-in: %+v %+v", wc, ws)
	}
	rc, rs, _ := tok.SignIn("r1", "/", false, now)
	if rs.Level != access.Read {
		t.Fatalf("read sign-in: %+v", rs)
	}
	// GET by cookie needs no CSRF; an action does, the session's own.
	if got, err := tok.Request(request(http.MethodGet, wc, nil)); got != access.Write || err != nil {
		t.Errorf("GET with the cookie: %v %v", got, err)
	}
	if got, err := tok.Request(request(http.MethodPost, wc, nil)); got != access.None || err != access.ErrCSRF {
		t.Errorf("POST without CSRF: %v %v", got, err)
	}
	if got, err := tok.Request(request(http.MethodDelete, wc, map[string]string{access.CSRFHeader: ws.CSRF})); got != access.Write || err != nil {
		t.Errorf("DELETE with CSRF: %v %v", got, err)
	}
	// A later session's page has another CSRF token: the old one is stale.
	wc2, ws2, _ := tok.SignIn("w1", "/", false, now)
	if ws2.CSRF == ws.CSRF {
		t.Fatal("two sessions share a CSRF token")
	}
	if got, err := tok.Request(request(http.MethodPost, wc2, map[string]string{access.CSRFHeader: ws.CSRF})); got != access.None || err != access.ErrCSRF {
		t.Errorf("a stale CSRF token: %v %v", got, err)
	}
	if got, _ := tok.Request(request(http.MethodPost, rc, map[string]string{access.CSRFHeader: rs.CSRF})); got != access.Read {
		t.Errorf("read session: %v", got)
	}
	// A tampered level, an expired session, a token removed.
	forged := *rc
	forged.Value = strings.Replace(rc.Value, "v1.r.", "v1.w.", 1)
	if got, _ := tok.Request(request(http.MethodGet, &forged, nil)); got != access.None {
		t.Errorf("a forged level: %v", got)
	}
	if _, ok := tok.Session(request(http.MethodGet, wc, nil), now.Add(access.SessionLifetime+time.Second)); ok {
		t.Error("an expired session is valid")
	}
	other := access.New([]string{"w2"}, []string{"r1"})
	if got, _ := other.Request(request(http.MethodGet, wc, nil)); got != access.None {
		t.Errorf("a session of a removed token: %v", got)
	}
	if got, _ := other.Request(request(http.MethodGet, rc, nil)); got != access.Read {
		t.Errorf("a session of a kept token: %v", got)
	}
	// No tokens: everyone acts.
	if got, err := access.New(nil, nil).Request(request(http.MethodPost, nil, nil)); got != access.Write || err != nil {
		t.Errorf("open: %v %v", got, err)
	}
}

// FuzzSessionCookie: whatever a browser sends as the cookie, reading it
// never panics and never grants a level without the signature of a
// configured token.
func FuzzSessionCookie(f *testing.F) {
	tok := access.New([]string{"w1"}, []string{"r1"})
	c, _, _ := tok.SignIn("w1", "/", false, time.Now())
	f.Add(c.Value)
	f.Add("v1.w.99999999999.00.")
	f.Add("v1.r.1.2.3.4")
	f.Add("")
	f.Fuzz(func(t *testing.T, value string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.AddCookie(&http.Cookie{Name: access.CookieName, Value: value})
		lvl, _ := tok.Request(r)
		if lvl != access.None && value != c.Value {
			// Only a cookie signed with w1 or r1 passes: any other value
			// that passes would be a forgery.
			other := access.New([]string{"x"}, []string{"y"})
			if l2, _ := other.Request(r); l2 != access.None {
				t.Fatalf("a cookie valid for unrelated tokens: %q", value)
			}
			if !strings.HasPrefix(value, "v1.") {
				t.Fatalf("accepted %q", value)
			}
		}
	})
}
