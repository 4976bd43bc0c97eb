package worker_test

import (
	"errors"
	"strings"
	"testing"
	"time"

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
