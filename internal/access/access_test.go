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
