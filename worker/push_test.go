package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/worker"
)

// TestPushSignature: a signature verifies against its body and secret,
// and not against another body, another secret, or outside the tolerance.
func TestPushSignature(t *testing.T) {
	secret, body := []byte("s3cret"), []byte(`{"v":1,"type":"digest"}`)
	at := time.Unix(1_800_000_000, 0)
	sig := worker.PushSignature(secret, at, body)
	const prefix = "t=1800000000,v1="
	if !strings.HasPrefix(sig, prefix) || len(sig) != len(prefix)+64 {
		t.Fatalf("signature %q is not t=<unix>,v1=<64 hex digits>", sig)
	}
	if err := worker.VerifyPushSignature(secret, sig, body, at.Add(time.Minute), 5*time.Minute); err != nil {
		t.Errorf("a fresh signature: %v", err)
	}
	for name, c := range map[string]struct {
		secret, body []byte
		header       string
		now          time.Time
	}{
		"another body":    {secret, []byte(`{"v":1,"type":"other"}`), sig, at},
		"another secret":  {[]byte("other"), body, sig, at},
		"too old":         {secret, body, sig, at.Add(6 * time.Minute)},
		"from the future": {secret, body, sig, at.Add(-6 * time.Minute)},
		"no v1":           {secret, body, "t=1800000000", at},
		"garbage":         {secret, body, "sha256=abc", at},
	} {
		if err := worker.VerifyPushSignature(c.secret, c.header, c.body, c.now, 5*time.Minute); !errors.Is(err, worker.ErrPushSignature) {
			t.Errorf("%s: %v, want ErrPushSignature", name, err)
		}
	}
}

func TestPushRefusesBadURLs(t *testing.T) {
	for _, u := range []string{"", "/jobs", "ftp://host/x", "http://", "::"} {
		if _, err := worker.Push(worker.PushConfig{URL: u}); !errors.Is(err, worker.ErrInvalidConfig) {
			t.Errorf("URL %q: %v, want ErrInvalidConfig", u, err)
		}
	}
}

// TestPushErrorsHideSecrets: a push URL's password and secret query
// parameters (a token in the query string, as some webhook endpoints take
// it) never appear in Push's errors, which the worker logs. On 47bb46e the
// query string was shown whole, in the error and in the wrapped net/http
// error.
func TestPushErrorsHideSecrets(t *testing.T) {
	t.Parallel()
	const secret = "q-s3cret-q"
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	}))
	t.Cleanup(failing.Close)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	job := &worker.Job{Job: debounce.Job{Type: "sync", Args: json.RawMessage(`{}`), Bypass: "_0123456789abcdef"}}
	for _, u := range []string{
		failing.URL + "/jobs?token=" + secret,
		fmt.Sprintf("http://user:%s@127.0.0.1:%d/jobs?api_key=%s", secret, port, secret),
	} {
		h, err := worker.Push(worker.PushConfig{URL: u, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		err = h(context.Background(), job)
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("push to %s: %v; want an error without the secret", failing.URL, err)
		}
	}
	if _, err := worker.Push(worker.PushConfig{URL: "ftp://h/jobs?token=" + secret}); err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("a refused URL: %v; want an error without the secret", err)
	}
}
