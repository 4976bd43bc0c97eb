package redact_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/coalesce-io/coalesce/internal/redact"
)

func TestURL(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"postgres://app:s3cret@db:5432/app":                              "postgres://app:xxxxx@db:5432/app",
		"postgres://app@db/app?password=s3cret&sslmode=require":          "postgres://app@db/app?password=xxxxx&sslmode=require",
		"postgres://db/app?sslpassword=s3cret&sslkey=/k.pem":             "postgres://db/app?sslkey=%2Fk.pem&sslpassword=xxxxx",
		"postgresql://db/app?PassWord=s3cret":                            "postgresql://db/app?PassWord=xxxxx",
		"redis://:s3cret@cache:6379/0":                                   "redis://:xxxxx@cache:6379/0",
		"rediss://user:s3cret@cache:6379/0?dial_timeout=3s":              "rediss://user:xxxxx@cache:6379/0?dial_timeout=3s",
		"nats://user:s3cret@n1:4222":                                     "nats://user:xxxxx@n1:4222",
		"nats://s3cret@n1:4222":                                          "nats://xxxxx@n1:4222",
		"tls://s3cret@n1:4222":                                           "tls://xxxxx@n1:4222",
		"https://s3cret@hooks.example/jobs":                              "https://xxxxx@hooks.example/jobs",
		"s3cret@n1:4222":                                                 "xxxxx@n1:4222",
		"postgres://app@db/app":                                          "postgres://app@db/app",
		"redis://default@cache:6379/0":                                   "redis://default@cache:6379/0",
		"https://hooks.example/jobs?token=s3cret&x=1":                    "https://hooks.example/jobs?token=xxxxx&x=1",
		"https://hooks.example/jobs?api_key=s3cret#s3cret":               "https://hooks.example/jobs?api_key=xxxxx#xxxxx",
		"http://127.0.0.1:8080":                                          "http://127.0.0.1:8080",
		"host=db user=app password=s3cret dbname=app":                    "host=db user=app password=xxxxx dbname=app",
		"host=db password='s3 cr\\'et' sslpassword = s3cret sslmode=off": "host=db password=xxxxx sslpassword = xxxxx sslmode=off",
		"user:s3cret@n1:4222":                                            "user:xxxxx@n1:4222",
		"n1:4222":                                                        "n1:4222",
		"postgres://%zz":                                                 "(unparsable URL)",
	} {
		if got := redact.URL(raw); got != want {
			t.Errorf("URL(%q) = %q, want %q", raw, got, want)
		}
	}
	if got := redact.URLs([]string{"nats://a:s3cret@n1:4222", "nats://n2:4222"}); got != "nats://a:xxxxx@n1:4222,nats://n2:4222" {
		t.Errorf("URLs: %q", got)
	}
}

func TestError(t *testing.T) {
	t.Parallel()
	err := error(&url.Error{Op: "Post", URL: "http://h/jobs?token=s3cret", Err: errors.New("connection refused")})
	wrapped := redact.Error(errors.Join(errors.New("push"), err))
	if strings.Contains(wrapped.Error(), "s3cret") {
		t.Errorf("Error: %v", wrapped)
	}
}

// planted are forms a secret takes in the strings coalesce logs.
var planted = []string{"postgres://u:%s@h/db", "postgres://h/db?sslmode=off&password=%s", "host=h password=%s dbname=d",
	"nats://u:%s@h:4222", "nats://%s@h:4222", "https://h/p?x=1&token=%s", "u:%s@h:1", "redis://:%s@h:6379/0", "postgres://h/db?SSLPassword=%s"}

// FuzzURL: whatever the input, no panic; and a secret planted in any of
// the forms above never comes out.
func FuzzURL(f *testing.F) {
	f.Add("postgres://u:p@h/db?password=x", uint8(0), "s3cretZ")
	f.Add("host=h password='a b'", uint8(2), "s3cretZ")
	f.Fuzz(func(t *testing.T, any string, form uint8, secret string) {
		_ = redact.URL(any)
		if len(secret) < 6 {
			return
		}
		for _, c := range secret {
			if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
				return
			}
		}
		pattern := planted[int(form)%len(planted)]
		if strings.Contains(strings.ToLower(strings.Replace(pattern, "%s", redact.Mask, 1)), strings.ToLower(secret)) {
			return // the rest of the string spells it
		}
		raw := strings.Replace(pattern, "%s", secret, 1)
		if out := redact.URL(raw); strings.Contains(out, secret) {
			t.Fatalf("URL(%q) = %q shows the secret", raw, out)
		}
	})
}
