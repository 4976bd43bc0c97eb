package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/config"
	"github.com/coalesce-io/coalesce/internal/daemon"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/publisher"
)

// loadConfig writes yaml to a file of the test and loads it with env as the
// environment, as `coalesce serve --config` does.
func loadConfig(t *testing.T, yaml string, env map[string]string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "coalesce.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("config.Load: %v\n%s", err, yaml)
	}
	return cfg
}

// submitOne connects as the daemon does, submits one dedup event through the
// coalescer and finds its job in the stream.
func submitOne(t *testing.T, cfg *config.Config) {
	t.Helper()
	ctx := context.Background()
	c, err := daemon.Connect(ctx, cfg, nil, nil, false)
	if err != nil {
		t.Fatalf("daemon.Connect: %v", err)
	}
	defer c.Close()
	args, _ := json.Marshal(map[string]string{"test": t.Name()}) // a job of this test's own
	d, err := c.Coalescer.Submit(ctx, debounce.Event{Type: "notify", Args: args})
	if err != nil || d.Outcome != debounce.OutcomePublished {
		t.Fatalf("Submit: %+v %v", d, err)
	}
	s, err := c.JetStream.Stream(ctx, c.Publisher.Stream())
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, c.Publisher.Subjects().Run("notify", d.Key, d.Round))
	if err != nil {
		t.Fatalf("the job is not in the stream: %v", err)
	}
	if m.Header.Get(publisher.HeaderKey) != d.Key.String() {
		t.Errorf("job %v, want key %s", m.Header, d.Key)
	}
}

// connectFails runs daemon.Connect and wants an error with every one of want.
func connectFails(t *testing.T, cfg *config.Config, want ...string) {
	t.Helper()
	c, err := daemon.Connect(context.Background(), cfg, nil, nil, false)
	if err == nil {
		c.Close()
		t.Fatalf("daemon.Connect succeeded, want an error with %q", want)
	}
	t.Logf("refused: %v", err)
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
}

// TestRedisACLCredentials: a Redis with ACL users only (the default user
// off) is reached with username and password from the environment, and the
// wrong or missing ones are refused at start naming the authentication.
func TestRedisACLCredentials(t *testing.T) {
	t.Parallel()
	rs := testenv.NewRedisACL(t, "coalesce on >s3cret ~* &* +@all", "default off")
	natsURL := testenv.NATS(t).URL
	yaml := fmt.Sprintf("redis: {url: %q}\nnats: {url: %q}\npolicies: {notify: {mode: dedup}}\n", rs.URL, natsURL)
	submitOne(t, loadConfig(t, yaml, map[string]string{"COALESCE_REDIS_USERNAME": "coalesce", "COALESCE_REDIS_PASSWORD": "s3cret"}))
	tests := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"wrong password", map[string]string{"COALESCE_REDIS_USERNAME": "coalesce", "COALESCE_REDIS_PASSWORD": "wrong"}, []string{"redis", "WRONGPASS", "username-password"}},
		{"unknown user", map[string]string{"COALESCE_REDIS_USERNAME": "nobody", "COALESCE_REDIS_PASSWORD": "s3cret"}, []string{"redis", "WRONGPASS"}},
		{"no credentials", nil, []string{"redis", "NOAUTH", "Authentication required"}},
		{"password without user (the disabled default user)", map[string]string{"COALESCE_REDIS_PASSWORD": "s3cret"}, []string{"redis", "WRONGPASS"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			connectFails(t, loadConfig(t, yaml, tt.env), tt.want...)
		})
	}
}

// TestRedisTLS: a Redis listening for TLS only is reached with a rediss://
// URL and redis.tls.ca_file (with or without a client certificate), and
// refused with a certificate error when the CA is not trusted.
func TestRedisTLS(t *testing.T) {
	t.Parallel()
	certs := testenv.NewCerts(t)
	rs := testenv.NewRedisTLS(t, certs)
	_, port, _ := strings.Cut(rs.Addr, ":")
	natsURL := testenv.NATS(t).URL
	// Each subtest has its own key prefix (and stream subjects shared).
	cfg := func(t *testing.T, url, tls string) string {
		return fmt.Sprintf("redis: {url: %q, prefix: %q, tls: {%s}}\nnats: {url: %q}\npolicies: {notify: {mode: dedup}}\n", url, testenv.Prefix(t), tls, natsURL)
	}
	ca := fmt.Sprintf("ca_file: %q", certs.CAFile)
	t.Run("rediss and ca_file", func(t *testing.T) {
		t.Parallel()
		submitOne(t, loadConfig(t, cfg(t, rs.URL, ca), nil))
	})
	t.Run("localhost and a client certificate", func(t *testing.T) {
		t.Parallel()
		submitOne(t, loadConfig(t, cfg(t, "rediss://localhost:"+port+"/0", ca+fmt.Sprintf(", cert_file: %q, key_file: %q", certs.ClientCertFile, certs.ClientKeyFile)), nil))
	})
	t.Run("redis URL with tls enabled", func(t *testing.T) {
		t.Parallel()
		submitOne(t, loadConfig(t, cfg(t, "redis://"+rs.Addr+"/0", "enabled: true, "+ca), nil))
	})
	other := testenv.NewCerts(t)
	tests := []struct {
		name, url, tls string
		want           []string
	}{
		{"CA not trusted", rs.URL, fmt.Sprintf("ca_file: %q", other.CAFile), []string{"redis", "x509: certificate signed by unknown authority"}},
		{"system roots only", rs.URL, "", []string{"redis", "x509: certificate signed by unknown authority"}},
		{"plain TCP to the TLS port", "redis://" + rs.Addr + "/0", "", []string{"redis"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			connectFails(t, loadConfig(t, cfg(t, tt.url, tt.tls), nil), tt.want...)
		})
	}
}

// TestNATSTLSUserPassword: a NATS server requiring TLS and a user is reached
// through config.NATSOptions (nats.tls.ca_file, nats.user and
// COALESCE_NATS_PASSWORD); daemon.Connect provisions the stream and an event
// gets its job published. The wrong password, an untrusted CA and a plain
// URL (upgraded to TLS on the system roots) are refused naming the cause; a server that requires client
// certificates takes nats.tls.cert_file and key_file.
func TestNATSTLSUserPassword(t *testing.T) {
	t.Parallel()
	certs := testenv.NewCerts(t)
	ns := testenv.NATSTLS(t, certs, false, "coalesce", "n4ts")
	redisURL := testenv.SharedRedis(t).URL
	cfg := func(url, tls string) string {
		return fmt.Sprintf("redis: {url: %q, prefix: %q}\nnats: {url: %q, user: coalesce, tls: {%s}}\npolicies: {notify: {mode: dedup}}\n",
			redisURL, testenv.Prefix(t), url, tls)
	}
	ca := fmt.Sprintf("ca_file: %q", certs.CAFile)
	good := map[string]string{"COALESCE_NATS_PASSWORD": "n4ts"}
	submitOne(t, loadConfig(t, cfg(ns.URL, ca), good))

	_, port, _ := strings.Cut(strings.TrimPrefix(ns.URL, "tls://"), ":")
	tests := []struct {
		name, url, tls string
		env            map[string]string
		want           []string
	}{
		{"wrong password", ns.URL, ca, map[string]string{"COALESCE_NATS_PASSWORD": "wrong"}, []string{"nats", "Authorization Violation"}},
		{"no password", ns.URL, ca, nil, []string{"nats", "Authorization Violation"}},
		{"CA not trusted", ns.URL, fmt.Sprintf("ca_file: %q", testenv.NewCerts(t).CAFile), good, []string{"nats", "x509: certificate signed by unknown authority"}},
		// nats.go upgrades to TLS when the server requires it, with the system roots.
		{"plain nats URL", "nats://127.0.0.1:" + port, "", good, []string{"nats", "tls", "x509: certificate signed by unknown authority"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			connectFails(t, loadConfig(t, cfg(tt.url, tt.tls), tt.env), tt.want...)
		})
	}

	t.Run("client certificate required", func(t *testing.T) {
		t.Parallel()
		mtls := testenv.NATSTLS(t, certs, true, "", "")
		yaml := func(tls string) string {
			return fmt.Sprintf("redis: {url: %q, prefix: %q}\nnats: {url: %q, tls: {%s}}\npolicies: {notify: {mode: dedup}}\n",
				redisURL, testenv.Prefix(t), mtls.URL, tls)
		}
		submitOne(t, loadConfig(t, yaml(ca+fmt.Sprintf(", cert_file: %q, key_file: %q", certs.ClientCertFile, certs.ClientKeyFile)), nil))
		// TLS 1.3: the server's "certificate required" alert may arrive
		// after the client has written, as a closed connection instead.
		connectFails(t, loadConfig(t, yaml(ca), nil), "nats", "tls")
	})
}

// TestBearerTokenEdges: an empty bearer token, a token inside a longer one,
// another scheme and a token list never authenticate; whitespace around the
// token is ignored.
func TestBearerTokenEdges(t *testing.T) {
	t.Parallel()
	f := newAPI(t, "s3cret", "other-token")
	tests := []struct {
		auth   []string // Authorization header values, in order
		status int
	}{
		{[]string{"Bearer "}, 401},
		{[]string{"Bearer"}, 401},
		{[]string{""}, 401},
		{[]string{"Bearer  "}, 401},
		{[]string{"Bearer s3cre"}, 401},
		{[]string{"Bearer s3cretX"}, 401},
		{[]string{"Bearer s3cret,other-token"}, 401},
		{[]string{"Bearer s3cret other-token"}, 401},
		{[]string{"Basic czNjcmV0"}, 401},
		{[]string{"s3cret"}, 401},
		{[]string{"Bearer\ts3cret"}, 401},
		{[]string{"Bearer wrong", "Bearer s3cret"}, 401}, // only the first header counts
		{[]string{"Bearer s3cret"}, 200},
		{[]string{"Bearer   s3cret"}, 200},
		{[]string{"Bearer s3cret \t"}, 200},
		{[]string{"Bearer other-token"}, 200},
	}
	for _, tt := range tests {
		req, err := http.NewRequest("GET", f.srv.URL+"/v1/policies", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range tt.auth {
			req.Header.Add("Authorization", v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("Authorization %q: %d, want %d", tt.auth, resp.StatusCode, tt.status)
		}
		if tt.status == 401 && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("Authorization %q: 401 without WWW-Authenticate", tt.auth)
		}
	}
}

// Rounds held in Redis need sorted sets, which the embedded store refuses:
// schedules: redis without a Redis is refused at start, naming the setting.
func TestHeldRoundsNeedARealRedis(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{}
	cfg.Redis.Schedules = "redis"
	cfg.Embedded.DataDir = t.TempDir()
	connectFails(t, cfg, "redis.schedules", "embedded store")
}
