package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/coalesce-io/coalesce/debounce"
)

// noEnv is an environment with nothing set.
func noEnv(string) string { return "" }

// envOf is an environment holding vars.
func envOf(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// writeConfig writes a configuration file into a new temp dir.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "coalesce.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// tlsFiles writes a self-signed CA certificate (which also serves as the
// client certificate) and its key into dir.
func tlsFiles(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "coalesce test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	ca, cert, key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	for name, b := range map[string][]byte{ca: certPEM, cert: certPEM, key: keyPEM} {
		if err := os.WriteFile(name, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return ca, cert, key
}

// loadSample loads testdata/coalesce.example.yaml with its /etc/coalesce/
// files replaced by generated ones.
func loadSample(t *testing.T, env func(string) string) (*Config, error) {
	t.Helper()
	sample, err := os.ReadFile("testdata/coalesce.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "tls"), 0o700); err != nil {
		t.Fatal(err)
	}
	tlsFiles(t, filepath.Join(dir, "tls"))
	return Load(writeConfig(t, strings.ReplaceAll(string(sample), "/etc/coalesce/", dir+"/")), env)
}

func TestSampleLoads(t *testing.T) {
	t.Parallel()
	c, err := loadSample(t, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.UsesEmbedded() {
		t.Error("UsesEmbedded: the sample configures redis and nats")
	}
	if got, want := len(c.Policies), 3; got != want {
		t.Errorf("%d policies, want %d", got, want)
	}
	if got, want := len(c.Cron), 2; got != want {
		t.Errorf("%d cron rules, want %d", got, want)
	}
	if _, err := c.RedisClient(); err != nil {
		t.Errorf("RedisClient: %v", err)
	}
}

// TestSampleShowsEveryKey keeps the sample complete: every key the decoder
// knows appears in it, set or commented out.
func TestSampleShowsEveryKey(t *testing.T) {
	t.Parallel()
	sample, err := os.ReadFile("testdata/coalesce.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, c := newDecoder(""), defaults()
	var p debounce.Policy
	var r CronRule
	sections := map[string][]field{
		"":               d.tagged(c),
		"redis":          d.tagged(&c.Redis),
		"redis.sentinel": d.sentinelFields(&c.Redis),
		"redis.tls":      d.tagged(&c.Redis.TLS),
		"nats":           d.tagged(&c.NATS),
		"nats.tls":       d.tagged(&c.NATS.TLS),
		"nats.ingest":    d.tagged(&c.NATS.Ingest),
		"http":           d.tagged(&c.HTTP),
		"embedded":       d.tagged(&c.Embedded),
		"policies.*":     d.tagged(&p),
		"cron[*]":        d.tagged(&r),
		"worker":         d.tagged(&c.Worker),
		"outbox":         d.tagged(&c.Outbox),
	}
	for section, fs := range sections {
		for _, f := range fs {
			re := regexp.MustCompile(`(?m)^[ \t]*(#[ \t]*)?(- )?` + regexp.QuoteMeta(f.key) + `:`)
			if !re.Match(sample) {
				t.Errorf("testdata/coalesce.example.yaml does not show %s", join(section, f.key))
			}
		}
	}
}

func TestLoadDefaults(t *testing.T) {
	t.Parallel()
	want := &Config{
		Redis: Redis{Prefix: "c", Eviction: "warn", Persistence: "warn"},
		NATS: NATS{Stream: "COALESCE", Prefix: "co", Replicas: 1, Storage: "file", MaxAge: 7 * 24 * time.Hour,
			Ingest: Ingest{Subjects: true, Stream: "COALESCE_INGEST"}},
		HTTP:     HTTP{Listen: "127.0.0.1:8080", UI: UIAuto, BodyLimit: 1 << 20, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second},
		Embedded: Embedded{NATSListen: "127.0.0.1:4222", RedisListen: "127.0.0.1:6379", DataDir: "./coalesce-data"},
	}
	tests := []struct {
		name    string
		content *string // nil: no file
	}{
		{"no file", nil},
		{"empty file", new("")},
		{"comments only", new("# nothing yet\n\n")},
		{"null document", new("~\n")},
		{"empty sections", new("redis:\nnats:\nhttp: ~\npolicies:\ncron:\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := ""
			if tt.content != nil {
				path = writeConfig(t, *tt.content)
			}
			got, err := Load(path, noEnv)
			if err != nil {
				t.Fatal(err)
			}
			w := *want
			w.Source = path
			if !reflect.DeepEqual(got, &w) {
				t.Errorf("Load:\n got %+v\nwant %+v", got, &w)
			}
			if !got.UsesEmbedded() {
				t.Error("UsesEmbedded = false with nothing configured")
			}
		})
	}
}

// TestLoadFull sets every key that can be set together and checks each
// lands in its field.
func TestLoadFull(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, cert, key := tlsFiles(t, dir)
	content := strings.NewReplacer("CA", ca, "CERT", cert, "KEY", key).Replace(`
redis:
  url: redis://redis.internal:6379/2
  username: app
  password: "0123"
  db: 2
  tls: {enabled: true, ca_file: CA, cert_file: CERT, key_file: KEY, insecure_skip_verify: true}
  prefix: co:r
  eviction: refuse
  persistence: refuse
nats:
  urls: [nats://a:4222, tls://b:4222]
  user: app
  password: secret
  tls: {enabled: true, ca_file: CA, cert_file: CERT, key_file: KEY, insecure_skip_verify: false}
  stream: JOBS
  prefix: acme.co
  replicas: 3
  storage: memory
  max_age: 3d
  ingest: {request_reply: false, durable: true, stream: INTAKE}
http:
  listen: ":9090"
  tokens: [t1, t2]
  body_limit: 512KiB
  read_timeout: 5s
  write_timeout: 1m
embedded:
  nats_listen: 127.0.0.1:0
  redis_listen: "[::1]:6380"
  data_dir: /var/lib/coalesce
policies:
  recompute:
    mode: debounce
    window: 30s
    extend: true
    max_wait: 5m
    payload: accumulate
    max_items: 50
    item_field: id
    key_fields: [tenant_id]
    fail: closed
  welcome:
    mode: dedup
    until: expiry
    ttl: 1d12h
  reindex:
    mode: throttle
    window: 1m
    trailing: true
cron:
  - name: nightly
    schedule: "0 30 2 * * *"
    timezone: Europe/Paris
    type: recompute
    args: {tenant_id: 7, id: [1, 2.5, -3e2, 0x1F], note: "a < b", when: 2024-01-02, none: ~, ok: true}
    key: nightly
  - name: sweep
    schedule: "@every 15m"
    type: welcome
worker:
  concurrency: 8
  max_deliver: 7
  ack_wait: 45s
  backoff: [1s, 1m]
`)
	path := writeConfig(t, content)
	got, err := Load(path, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	tlsBlock := TLS{Enabled: true, CAFile: ca, CertFile: cert, KeyFile: key}
	redisTLS := tlsBlock
	redisTLS.InsecureSkipVerify = true
	want := &Config{
		Redis: Redis{URL: "redis://redis.internal:6379/2", Username: "app", Password: "0123", DB: 2,
			TLS: redisTLS, Prefix: "co:r", Eviction: "refuse", Persistence: "refuse"},
		NATS: NATS{URLs: []string{"nats://a:4222", "tls://b:4222"}, User: "app", Password: "secret",
			TLS: tlsBlock, Stream: "JOBS", Prefix: "acme.co", Replicas: 3, Storage: "memory", MaxAge: 72 * time.Hour,
			Ingest: Ingest{Subjects: false, Durable: true, Stream: "INTAKE"}},
		HTTP: HTTP{Listen: ":9090", Tokens: []string{"t1", "t2"}, UI: UIAuto, BodyLimit: 512 << 10,
			ReadTimeout: 5 * time.Second, WriteTimeout: time.Minute},
		Embedded: Embedded{NATSListen: "127.0.0.1:0", RedisListen: "[::1]:6380", DataDir: "/var/lib/coalesce"},
		Policies: []debounce.Policy{
			{Type: "recompute", Mode: debounce.ModeDebounce, Window: 30 * time.Second,
				Extend: true, MaxWait: 5 * time.Minute, Payload: debounce.PayloadAccumulate, MaxItems: 50,
				ItemField: "id", KeyFields: []string{"tenant_id"}, Fail: debounce.FailClosed},
			{Type: "welcome", Mode: debounce.ModeDedup, Until: debounce.UntilExpiry, TTL: 36 * time.Hour,
				Payload: debounce.PayloadFirst, Fail: debounce.FailOpen},
			{Type: "reindex", Mode: debounce.ModeThrottle, Window: time.Minute, TTL: time.Minute, Trailing: true,
				Payload: debounce.PayloadFirst, Fail: debounce.FailOpen},
		},
		Cron: []CronRule{
			{Name: "nightly", Schedule: "0 30 2 * * *", Timezone: "Europe/Paris", Type: "recompute",
				Args: json.RawMessage(`{"tenant_id":7,"id":[1,2.5,-3e2,31],"note":"a < b","when":"2024-01-02","none":null,"ok":true}`),
				Key:  "nightly"},
			{Name: "sweep", Schedule: "@every 15m", Timezone: "UTC", Type: "welcome", Args: json.RawMessage(`{}`)},
		},
		Worker: Worker{Concurrency: 8, MaxDeliver: 7, AckWait: 45 * time.Second, Backoff: []time.Duration{time.Second, time.Minute}},
		Source: path,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load:\n got %+v\nwant %+v", got, want)
		for i := range min(len(got.Cron), len(want.Cron)) {
			if g, w := string(got.Cron[i].Args), string(want.Cron[i].Args); g != w {
				t.Errorf("cron[%d].args = %s, want %s", i, g, w)
			}
		}
	}
	if got.UsesEmbedded() {
		t.Error("UsesEmbedded = true with redis and nats configured")
	}
}

func TestLoadAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		yaml  string
		check func(t *testing.T, c *Config)
	}{
		{"merge keys and anchors", `
policies:
  a: &base {mode: debounce, window: 30s, fail: closed}
  b:
    <<: *base
    window: 1m
  c:
    <<: [{payload: last}, *base]
    payload: first
`, func(t *testing.T, c *Config) {
			b, cc := c.Policies[1], c.Policies[2]
			if b.Mode != debounce.ModeDebounce || b.Window != time.Minute || b.Fail != debounce.FailClosed {
				t.Errorf("b = %+v", b)
			}
			if cc.Payload != debounce.PayloadFirst || cc.Window != 30*time.Second {
				t.Errorf("c = %+v", cc)
			}
		}},
		{"nats url as one string", "redis: {url: redis://r}\nnats: {url: 'nats://a:4222, nats://b:4222'}\n", func(t *testing.T, c *Config) {
			if want := []string{"nats://a:4222", "nats://b:4222"}; !reflect.DeepEqual(c.NATS.URLs, want) {
				t.Errorf("URLs = %q, want %q", c.NATS.URLs, want)
			}
		}},
		{"sentinel", "redis:\n  sentinel: {master: mymaster, addrs: ['s1:26379', 's2:26379']}\n  db: 3\nnats: {urls: [n:4222]}\n", func(t *testing.T, c *Config) {
			if c.Redis.SentinelMaster != "mymaster" || len(c.Redis.Addrs) != 2 || c.Redis.DB != 3 {
				t.Errorf("Redis = %+v", c.Redis)
			}
		}},
		{"cluster", "redis: {addrs: ['r1:6379', 'r2:6379']}\nnats: {urls: [n:4222]}\n", func(t *testing.T, c *Config) {
			if len(c.Redis.Addrs) != 2 || c.Redis.SentinelMaster != "" {
				t.Errorf("Redis = %+v", c.Redis)
			}
		}},
		{"body limit as a byte count", "http: {body_limit: 2048}\n", func(t *testing.T, c *Config) {
			if c.HTTP.BodyLimit != 2048 {
				t.Errorf("BodyLimit = %d", c.HTTP.BodyLimit)
			}
		}},
		{"body limit in decimal units", "http: {body_limit: 10MB}\n", func(t *testing.T, c *Config) {
			if c.HTTP.BodyLimit != 10_000_000 {
				t.Errorf("BodyLimit = %d", c.HTTP.BodyLimit)
			}
		}},
		{"cron args scalar and list", `
policies: {p: {mode: dedup}}
cron:
  - {name: a, schedule: "@hourly", type: p, args: [x, 1]}
  - {name: b, schedule: "@hourly", type: p, args: just text}
`, func(t *testing.T, c *Config) {
			if g := string(c.Cron[0].Args); g != `["x",1]` {
				t.Errorf("args = %s", g)
			}
			if g := string(c.Cron[1].Args); g != `"just text"` {
				t.Errorf("args = %s", g)
			}
		}},
		{"a second empty document", "http: {listen: ':1'}\n---\n", func(t *testing.T, c *Config) {
			if c.HTTP.Listen != ":1" {
				t.Errorf("Listen = %q", c.HTTP.Listen)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Load(writeConfig(t, tt.yaml), noEnv)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

// ext is a minimal external setup, for cases that need one.
const ext = "redis:\n  url: redis://r:6379\nnats:\n  urls: ['nats://n:4222']\n"

func TestLoadRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, _, key := tlsFiles(t, dir)
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	bomb := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	for i, prev := range []string{"a", "b", "c", "d", "e", "f"} {
		name := string(rune('b' + i))
		bomb += name + ": &" + name + " [" + strings.Repeat("*"+prev+", ", 9) + "*" + prev + "]\n"
	}
	dedup := "policies:\n  recompute: {mode: dedup}\n"

	tests := []struct {
		name string
		yaml string
		env  map[string]string
		want string // FILE stands for the file's path
	}{
		// Keys.
		{"unknown top-level key", "redsi:\n  url: x\n",
			nil, `FILE:1: redsi: unknown key (known: redis, nats, http, embedded, policies, cron, worker, local_joins, outbox)`},
		{"unknown policy key", "policies:\n  recompute:\n    mode: debounce\n    mood: happy\n",
			nil, `FILE:4: policies.recompute.mood: unknown key (known: mode, window, ttl, extend, max_wait, payload, max_items, item_field, key_fields, until, trailing, fail, exclusive, lease, local_joins)`},
		{"unknown nested key", "nats:\n  ingest:\n    durabel: true\n",
			nil, `FILE:3: nats.ingest.durabel: unknown key (known: request_reply, durable, stream)`},
		{"odd key is quoted", "http:\n  \"list en\": x\n",
			nil, `FILE:2: http."list en": unknown key (known: listen, tokens, read_tokens, ui, public_metrics, body_limit, read_timeout, write_timeout)`},
		{"duplicate key", "http:\n  listen: :8080\n  listen: :9090\n",
			nil, `FILE:3: http.listen: mapping key "listen" already defined at line 2`},
		{"duplicate policy", "policies:\n  a: {mode: dedup}\n  a: {mode: dedup}\n",
			nil, `FILE:3: policies.a: mapping key "a" already defined at line 2`},

		// Shapes and scalars.
		{"top level is a list", "- redis\n",
			nil, `FILE:1: the file must be a mapping of keys (redis, nats, http, embedded, policies, cron, worker, local_joins, outbox) to values, not a list`},
		{"section is a string", "redis: localhost\n",
			nil, `FILE:1: redis: must be a mapping of keys to values, not a string`},
		{"policies is a list", "policies:\n  - recompute\n",
			nil, `FILE:2: policies: must be a mapping of keys to values, not a list`},
		{"bad duration", "policies:\n  recompute_financials:\n    mode: debounce\n    window: 3x\n",
			nil, `FILE:4: policies.recompute_financials.window: "3x" is not a duration (use e.g. 30s, 5m)`},
		{"duration without unit", "http: {read_timeout: 30}\n",
			nil, `FILE:1: http.read_timeout: "30" is not a duration (use e.g. 30s, 5m)`},
		{"negative duration", "policies:\n  recompute:\n    mode: debounce\n    window: -5s\n",
			nil, `FILE:4: policies.recompute.window: "-5s" must not be negative`},
		{"negative number", "worker:\n  concurrency: -1\n",
			nil, `FILE:2: worker.concurrency: -1 must not be negative`},
		{"not a number", "nats:\n  replicas: three\n",
			nil, `FILE:2: nats.replicas: "three" is not a whole number`},
		{"fraction", "redis:\n  db: 1.5\n",
			nil, `FILE:2: redis.db: "1.5" is not a whole number`},
		{"not a boolean", "nats:\n  ingest:\n    durable: yes\n",
			nil, `FILE:3: nats.ingest.durable: "yes" is not true or false`},
		{"string is a mapping", "redis:\n  password: {a: b}\n",
			nil, `FILE:2: redis.password: must be a string, not a mapping`},
		{"binary string", "redis:\n  password: !!binary aGVsbG8=\n",
			nil, `FILE:2: redis.password: must be a string, not a value tagged !!binary`},
		{"list expected", "http:\n  tokens: abc\n",
			nil, `FILE:2: http.tokens: must be a list, not a string`},
		{"list item", "worker:\n  backoff: [1s, soon]\n",
			nil, `FILE:2: worker.backoff[1]: "soon" is not a duration (use e.g. 30s, 5m)`},
		{"outbox not a URL", "outbox:\n  postgres: db.internal\n",
			nil, `FILE:2: outbox.postgres: is neither a postgres:// URL nor a key=value connection string (use e.g. postgres://user:password@host:5432/db)`},
		{"outbox batch", "outbox:\n  batch_size: 200000\n",
			nil, `FILE:2: outbox.batch_size: 200000 must be between 1 and 100000 (0 or unset: the default, 500)`},
		{"outbox poll", "outbox:\n  poll_every: 1ms\n",
			nil, `FILE:2: outbox.poll_every: 1ms must be at least 10ms (unset: 1s)`},
		{"outbox env", "", map[string]string{"COALESCE_OUTBOX_POSTGRES": "nope"},
			`COALESCE_OUTBOX_POSTGRES: outbox.postgres: is neither a postgres:// URL nor a key=value connection string (use e.g. postgres://user:password@host:5432/db)`},

		// YAML itself.
		{"syntax error", "redis:\n  url: [a\n",
			nil, `FILE:2: invalid YAML: did not find expected ',' or ']'`},
		{"bad indentation", "redis:\n  url: a\n prefix: b\n",
			nil, `FILE:3: invalid YAML: did not find expected key`},
		{"bad indentation, nested", "policies:\n  recompute:\n    mode: debounce\n    window: 1s\n   key_fields: [tenant_id]\n",
			nil, `FILE:5: invalid YAML: did not find expected key (this line is indented 3 spaces, as no key or item above it is)`},
		{"bad indentation of an item", "policies:\n  a:\n    mode: dedup\n    key_fields:\n      - x\n     - y\n",
			nil, `FILE:6: invalid YAML: did not find expected key (this line is indented 5 spaces, as no key or item above it is)`},
		{"tab", "redis:\n\turl: a\n",
			nil, `FILE:2: invalid YAML: found character that cannot start any token`},
		{"two documents", "http: {}\n---\nredis: {}\n",
			nil, `FILE:2: a second YAML document (after ---); keep the whole configuration in one`},
		{"alias bomb", bomb,
			nil, `FILE:1: aliases expand the document by more than 100000 nodes; write the values out instead`},
		{"alias cycle", "cron: &x [*x]\n",
			nil, `FILE:1: alias *x refers to a node that contains it`},
		{"merge of a list of scalars", "policies:\n  a:\n    <<: [x]\n",
			nil, `FILE:3: policies.a: << must merge a mapping or a list of mappings, not a string`},

		// Enums and ranges.
		{"bad storage", "nats:\n  storage: disk\n",
			nil, `FILE:2: nats.storage: "disk" is not file or memory`},
		{"bad eviction", "redis:\n  eviction: ignore\n",
			nil, `FILE:2: redis.eviction: "ignore" is not warn or refuse`},
		{"bad replica acks", "redis:\n  replicas:\n    acks: two\n",
			nil, `FILE:3: redis.replicas.acks: "two" is not auto, off or a number of replicas from 1 to 16`},
		{"replica acks timeout", "redis:\n  replicas:\n    timeout: 5s\n",
			nil, `FILE:3: redis.replicas.timeout: 5s must be between 0 (the default, 500ms) and 2s (below the client's 3s read timeout)`},
		{"bad schedules", "redis:\n  schedules: nats\n",
			nil, `FILE:2: redis.schedules: "nats" is not auto, redis or jetstream`},
		{"redis schedules on a cluster", "redis:\n  addrs: [127.0.0.1:7000, 127.0.0.1:7001]\n  schedules: redis\n",
			nil, `FILE:3: redis.schedules: redis needs a single node or Sentinel: on a Cluster a type's due list cannot share a slot with its rounds; use auto or jetstream`},
		{"replicas", "nats:\n  replicas: 7\n",
			nil, `FILE:2: nats.replicas: 7 must be 1 to 5`},
		{"bad mode", "policies:\n  recompute:\n    mode: sometimes\n",
			nil, `FILE:3: policies.recompute.mode: "sometimes" is not a mode; use dedup, throttle or debounce`},
		{"body limit unit", "http:\n  body_limit: 10XB\n",
			nil, `FILE:2: http.body_limit: "10XB" is not a size (use e.g. 1MiB, 512KiB, 10MB or a byte count)`},
		{"body limit too large", "http:\n  body_limit: 2GiB\n",
			nil, `FILE:2: http.body_limit: 2GiB is more than the 1GiB limit`},
		{"body limit zero", "http:\n  body_limit: 0\n",
			nil, `FILE:2: http.body_limit: must be more than 0`},
		{"zero timeout", "http:\n  write_timeout: 0s\n",
			nil, `FILE:2: http.write_timeout: must be more than 0`},
		{"bad listen", "http:\n  listen: localhost\n",
			nil, `FILE:2: http.listen: "localhost" is not host:port (e.g. 127.0.0.1:8080 or :8080): missing port in address`},
		{"bad port", "embedded:\n  redis_listen: 127.0.0.1:99999\n",
			nil, `FILE:2: embedded.redis_listen: "127.0.0.1:99999" is not host:port (e.g. 127.0.0.1:4222): the port "99999" is not a number from 0 to 65535`},
		{"empty token", "http:\n  tokens: [ok, '']\n",
			nil, `FILE:2: http.tokens[1]: empty; remove it or give a token`},
		{"stream names", "nats:\n  stream: my.jobs\n",
			nil, `FILE:2: nats.stream: "my.jobs" must be 1-255 characters without . * > / \ or whitespace`},
		{"same streams", "nats:\n  stream: X\n  ingest: {stream: X}\n",
			nil, `FILE:3: nats.ingest.stream: "X" is the job stream's name too; give the ingest stream its own`},
		{"subject prefix", "nats:\n  prefix: 'co.*'\n",
			nil, `FILE:2: nats.prefix: "co.*" must be dot-separated subject tokens without empty tokens, wildcards (* >) or whitespace`},
		{"redis prefix", "redis:\n  prefix: 'a{b}'\n",
			nil, `FILE:2: redis.prefix: "a{b}" must not contain { } * ? [ ] or \`},
		{"ack wait", "worker:\n  ack_wait: 100ms\n",
			nil, `FILE:2: worker.ack_wait: 100ms is shorter than 300ms`},
		{"local joins mode", "local_joins:\n  mode: sometimes\n",
			nil, `FILE:2: local_joins.mode: "sometimes" is not a mode; use auto or off`},
		{"local joins flush interval", "local_joins:\n  flush_interval: 2s\n",
			nil, `FILE:2: local_joins.flush_interval: 2s is outside 1ms to 1s`},
		{"local joins clock skew", "local_joins:\n  clock_skew: 2m\n",
			nil, `FILE:2: local_joins.clock_skew: 2m0s is outside 1ms to 1m`},
		{"policy local joins", "policies:\n  recompute:\n    mode: debounce\n    window: 1s\n    local_joins: never\n",
			nil, `FILE:5: policies.recompute.local_joins: "never" is not a setting; use auto, on or off`},

		// Policies.
		{"debounce without window", "policies:\n  recompute:\n    mode: debounce\n",
			nil, `FILE:2: policies.recompute.window: required: how long to wait for more events, e.g. window: 30s`},
		{"ttl on debounce", "policies:\n  recompute:\n    mode: debounce\n    window: 30s\n    ttl: 10s\n",
			nil, `FILE:5: policies.recompute.ttl: no longer applies to debounce: a round lives until its job starts (up to the stream's max_age after its due time, so no TTL can expire it while workers are away); remove ttl`},
		{"ttl on dedup until start", "policies:\n  notify:\n    mode: dedup\n    ttl: 1h\n",
			nil, `FILE:4: policies.notify.ttl: only applies with until: expiry (the dedup window); with until: start the reservation lives until its job starts, up to the stream's max_age, so no TTL can end it while workers are away: remove ttl`},
		{"max age too short", "nats:\n  max_age: 10s\n",
			nil, `FILE:2: nats.max_age: 10s must be between 1m and 720h0m0s: it is how long a job waits for a worker, and how long past its due time a round keeps its data`},
		{"extend without max_wait", "policies:\n  recompute:\n    mode: debounce\n    window: 30s\n    extend: true\n",
			nil, `FILE:2: policies.recompute.max_wait: required with extend: without it a key that never goes quiet is never run; e.g. max_wait: 5m`},
		{"null policy", "policies:\n  recompute:\n",
			nil, `FILE:2: policies.recompute.mode: missing; set dedup, throttle or debounce`},
		{"bad job type", "policies:\n  \"re compute\": {mode: dedup}\n",
			nil, `FILE:2: policies."re compute": not a valid job type: "re compute" has ' ' at byte 2; a job type is 1-128 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit`},

		// Cron.
		{"cron bad spec", dedup + "cron:\n  - name: nightly\n    schedule: '*/5 * * * *'\n    type: recompute\n",
			nil, `FILE:5: cron[0].schedule: "*/5 * * * *" is not a cron schedule: expected exactly 6 fields, found 5: [*/5 * * * *] (use 6 fields with seconds first, e.g. "0 */5 * * * *", or a descriptor such as "@every 1m")`},
		{"cron TZ in spec", dedup + "cron:\n  - name: nightly\n    schedule: 'TZ=UTC'\n    type: recompute\n",
			nil, `FILE:5: cron[0].schedule: put the time zone in timezone, not in the schedule`},
		{"cron without schedule", dedup + "cron:\n  - name: nightly\n    type: recompute\n",
			nil, `FILE:4: cron[0].schedule: required: when to submit (use 6 fields with seconds first, e.g. "0 */5 * * * *", or a descriptor such as "@every 1m")`},
		{"cron unknown timezone", dedup + "cron:\n  - name: nightly\n    schedule: '@daily'\n    timezone: Mars/Olympus\n    type: recompute\n",
			nil, `FILE:6: cron[0].timezone: "Mars/Olympus" is not a time zone (use an IANA name such as Europe/Paris, or UTC)`},
		{"cron type without policy", dedup + "cron:\n  - name: nightly\n    schedule: '@daily'\n    type: reindex\n",
			nil, `FILE:6: cron[0].type: no policy for job type "reindex"; add it under policies`},
		{"cron duplicate name", dedup + "cron:\n  - {name: nightly, schedule: '@daily', type: recompute}\n  - {name: nightly, schedule: '@hourly', type: recompute}\n",
			nil, `FILE:5: cron[1].name: "nightly" is already the name of cron[0]`},
		{"cron without name", dedup + "cron:\n  - {schedule: '@daily', type: recompute}\n",
			nil, `FILE:4: cron[0].name: required: a name for the rule, unique among the rules`},
		{"cron null rule", dedup + "cron:\n  -\n",
			nil, `FILE:4: cron[0]: an empty rule; give it name, schedule and type`},
		{"cron args without key field", "policies:\n  recompute: {mode: dedup, key_fields: [tenant_id]}\ncron:\n  - name: n\n    schedule: '@daily'\n    type: recompute\n    args: {x: 1}\n",
			nil, `FILE:7: cron[0].args.tenant_id: key field "tenant_id" is missing; every key field must be present in args`},
		{"cron args binary", dedup + "cron:\n  - name: n\n    schedule: '@daily'\n    type: recompute\n    args:\n      blob: !!binary aGVsbG8=\n",
			nil, `FILE:8: cron[0].args.blob: binary values have no JSON form; pass the base64 text as a string (quote it without !!binary)`},
		{"cron args number key", dedup + "cron:\n  - name: n\n    schedule: '@daily'\n    type: recompute\n    args: {1: one}\n",
			nil, `FILE:7: cron[0].args.1: key "1" is a number, but JSON object keys are strings; quote it`},
		{"cron args infinity", dedup + "cron:\n  - name: n\n    schedule: '@daily'\n    type: recompute\n    args: {x: .inf}\n",
			nil, `FILE:7: cron[0].args.x: ".inf" has no JSON form; quote it to pass a string`},
		{"cron args custom tag", dedup + "cron:\n  - name: n\n    schedule: '@daily'\n    type: recompute\n    args: {x: !secret abc}\n",
			nil, `FILE:7: cron[0].args.x: values tagged !secret have no JSON form`},
		{"cron accumulate without item", "policies:\n  r: {mode: debounce, window: 1m, payload: accumulate, item_field: id}\ncron:\n  - name: n\n    schedule: '@daily'\n    type: r\n    args: {x: 1}\n",
			nil, `FILE:7: cron[0].args: has no member "id", the policy's item_field`},

		// Redis and NATS.
		{"redis url and addrs", "redis:\n  url: redis://r:6379\n  addrs: ['r1:6379']\nnats: {urls: [n]}\n",
			nil, `FILE:3: redis.addrs: redis.url is set too; use url for a single node, addrs for a Cluster or sentinel.addrs for Sentinel`},
		{"redis addrs and sentinel addrs", "redis:\n  addrs: ['r1:6379']\n  sentinel:\n    master: m\n    addrs: ['s:26379']\n",
			nil, `FILE:5: redis.sentinel.addrs: redis.addrs is set too; use addrs for a Cluster, sentinel.addrs for Sentinel`},
		{"sentinel without master", "redis:\n  sentinel:\n    addrs: ['s:26379']\nnats: {urls: [n]}\n",
			nil, `FILE:2: redis.sentinel.master: required with sentinel.addrs: the name the sentinels monitor the primary under`},
		{"cluster with a db", "redis:\n  addrs: ['r1:6379']\n  db: 1\nnats: {urls: [n]}\n",
			nil, `FILE:3: redis.db: Redis Cluster has only database 0; remove db`},
		{"redis bad url", "redis:\n  url: http://user:hunter2@r\nnats: {urls: [n]}\n",
			nil, `FILE:2: redis.url: not a Redis URL: invalid URL scheme: http (use e.g. redis://host:6379/0 or rediss://host:6380)`},
		{"redis unparsable url", "redis:\n  url: 'redis://user:hunter2@r:port'\nnats: {urls: [n]}\n",
			nil, `FILE:2: redis.url: not a Redis URL: invalid port ":port" after host (use e.g. redis://host:6379/0 or rediss://host:6380)`},
		{"redis db differs from url", "redis:\n  url: redis://r/1\n  db: 2\nnats: {urls: [n]}\n",
			nil, `FILE:3: redis.db: 2 differs from database 1 in redis.url; set it in one place`},
		{"bad cluster address", "redis:\n  addrs: ['r1:6379', 'r2']\nnats: {urls: [n]}\n",
			nil, `FILE:2: redis.addrs[1]: "r2" is not host:port: missing port in address`},
		{"nats url and urls", "nats:\n  url: nats://a\n  urls: [nats://b]\n",
			nil, `FILE:3: nats.urls: nats.url is set too; use one of url and urls`},
		{"nats bad scheme", "redis: {url: 'redis://r'}\nnats:\n  urls: ['http://n:4222']\n",
			nil, `FILE:3: nats.urls[0]: not a NATS URL: the scheme "http" is not nats, tls, ws or wss (use e.g. nats://host:4222 or tls://host:4222)`},
		{"nats two auth methods", ext + "  token: abc\n  user: app\n",
			nil, `FILE:5: nats.token: nats.user is set too; use one way to authenticate: creds_file, nkey_file, user and password, or token`},
		{"nats password without user", ext + "  password: abc\n",
			nil, `FILE:5: nats.password: needs nats.user`},
		{"nats creds missing", ext + "  creds_file: /nonexistent/app.creds\n",
			nil, `FILE:5: nats.creds_file: "/nonexistent/app.creds" does not exist`},
		{"nats nkey not a seed", ext + "  nkey_file: " + notPEM + "\n",
			nil, `FILE:5: nats.nkey_file: "` + notPEM + `" is not an nkey user seed file: nkeys: no nkey seed found`},
		{"nats creds is a directory", ext + "  creds_file: " + dir + "\n",
			nil, `FILE:5: nats.creds_file: "` + dir + `" is not a regular file`},

		// TLS.
		{"missing TLS file", "redis:\n  tls:\n    enabled: true\n    ca_file: /nonexistent/ca.pem\n",
			nil, `FILE:4: redis.tls.ca_file: "/nonexistent/ca.pem" does not exist`},
		{"TLS file while TLS is off", "redis:\n  url: redis://r\n  tls:\n    ca_file: " + ca + "\nnats: {urls: [n]}\n",
			nil, `FILE:4: redis.tls.ca_file: is set but TLS is off; set redis.tls.enabled: true or use a rediss:// URL`},
		{"key without cert", "nats:\n  tls:\n    enabled: true\n    key_file: " + key + "\n",
			nil, `FILE:2: nats.tls.cert_file: required with key_file`},
		{"CA file without PEM", "nats:\n  tls:\n    enabled: true\n    ca_file: " + notPEM + "\n",
			nil, `FILE:4: nats.tls.ca_file: "` + notPEM + `" holds no PEM certificate`},
		{"key pair mismatch", "nats:\n  tls:\n    enabled: true\n    cert_file: " + ca + "\n    key_file: " + notPEM + "\n",
			nil, `FILE:4: nats.tls.cert_file: "` + ca + `" with "` + notPEM + `": tls: failed to find any PEM data in key input`},

		// Environment.
		{"env bad url", "nats: {urls: [n]}\n", map[string]string{"COALESCE_REDIS_URL": "http://user:hunter2@r"},
			`COALESCE_REDIS_URL: redis.url: not a Redis URL: invalid URL scheme: http (use e.g. redis://host:6379/0 or rediss://host:6380)`},
		{"env url and addrs", "", map[string]string{"COALESCE_REDIS_URL": "redis://r", "COALESCE_REDIS_ADDRS": "a:1"},
			`COALESCE_REDIS_ADDRS: COALESCE_REDIS_URL is set too; set one of them`},
		{"env addrs item", "nats: {urls: [n]}\nredis:\n  addrs: ['r1:6379']\n", map[string]string{"COALESCE_REDIS_ADDRS": "a:1,b"},
			`COALESCE_REDIS_ADDRS: redis.addrs[1]: "b" is not host:port: missing port in address`},
		{"env auth methods clash", ext, map[string]string{"COALESCE_NATS_TOKEN": "t", "COALESCE_NATS_USER": "u"},
			`COALESCE_NATS_TOKEN: nats.token: nats.user is set too; use one way to authenticate: creds_file, nkey_file, user and password, or token`},
		{"env password without user", ext + "  token: abc\n", map[string]string{"COALESCE_NATS_PASSWORD": "p"},
			`COALESCE_NATS_PASSWORD: nats.password: needs nats.user`},
		{"env token", "", map[string]string{"COALESCE_HTTP_TOKENS": "a b"},
			`COALESCE_HTTP_TOKENS: http.tokens[0]: holds whitespace or control characters`},
		{"read token also a write token", "http:\n  tokens: [a]\n  read_tokens: [r, a]\n", nil,
			`FILE:3: http.read_tokens[1]: is also in http.tokens; a token is either read-only or not`},
		{"read tokens alone", "http:\n  read_tokens: [r]\n", nil,
			`FILE:2: http.read_tokens: read-only tokens without http.tokens would leave the API open to anyone without a token; set http.tokens too`},
		{"env read token", "http:\n  tokens: [a]\n", map[string]string{"COALESCE_HTTP_READ_TOKENS": "r,a"},
			`COALESCE_HTTP_READ_TOKENS: http.read_tokens[1]: is also in http.tokens; a token is either read-only or not`},
		{"ui value", "http:\n  ui: yes\n", nil,
			`FILE:2: http.ui: "yes": use auto (the dashboard at /ui/ with the embedded servers only), on or off`},
		// A list variable that is set must list something: a blank one
		// once dropped the file's tokens and turned authentication off.
		{"env tokens blank", "http:\n  tokens: [secret]\n", map[string]string{"COALESCE_HTTP_TOKENS": " "},
			`COALESCE_HTTP_TOKENS: is set but lists nothing; give comma-separated values, or unset it to keep http.tokens`},
		{"env tokens only commas", "http:\n  tokens: [secret]\n", map[string]string{"COALESCE_HTTP_TOKENS": ","},
			`COALESCE_HTTP_TOKENS: item 1 of 2 is empty; give comma-separated values with none empty, or unset it to keep http.tokens`},
		{"env tokens empty item", "", map[string]string{"COALESCE_HTTP_TOKENS": "t1,,t2"},
			`COALESCE_HTTP_TOKENS: item 2 of 3 is empty; give comma-separated values with none empty, or unset it to keep http.tokens`},
		// An override never turns TLS off or drops a password without saying so.
		{"env addrs over a TLS url", "nats: {urls: [n]}\nredis:\n  url: rediss://r:6380\n", map[string]string{"COALESCE_REDIS_ADDRS": "a:1,b:2"},
			`COALESCE_REDIS_ADDRS: replaces redis.url, a rediss:// URL, and would connect without TLS; set redis.tls.enabled: true in the file to keep it`},
		{"env url over a TLS url", "nats: {urls: [n]}\nredis:\n  url: rediss://r:6380\n", map[string]string{"COALESCE_REDIS_URL": "redis://r:6379"},
			`COALESCE_REDIS_URL: replaces redis.url, a rediss:// URL, and would connect without TLS; use a rediss:// URL, or set redis.tls.enabled: true in the file`},
		{"env addrs drop the url's password", "nats: {urls: [n]}\nredis:\n  url: redis://:hunter2@r:6379\n", map[string]string{"COALESCE_REDIS_ADDRS": "a:1"},
			`COALESCE_REDIS_ADDRS: replaces redis.url, which carries the credentials, and would connect without them; set COALESCE_REDIS_PASSWORD (and COALESCE_REDIS_USERNAME for an ACL user), or redis.password, too`},
		{"env bare nats host over tls urls", "redis: {url: redis://r}\nnats:\n  urls: [tls://n1:4222]\n", map[string]string{"COALESCE_NATS_URL": "n2:4222"},
			`COALESCE_NATS_URL: replaces nats.urls, tls:// or wss:// URLs, and would connect without TLS; use tls:// URLs, or set nats.tls.enabled: true in the file`},
		{"env nats urls blank", "", map[string]string{"COALESCE_NATS_URL": " , "},
			`COALESCE_NATS_URL: item 1 of 2 is empty; give comma-separated values with none empty, or unset it to keep nats.urls`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeConfig(t, tt.yaml)
			c, err := Load(path, envOf(tt.env))
			if err == nil {
				t.Fatalf("Load accepted it: %+v", c)
			}
			want := strings.ReplaceAll(tt.want, "FILE", path)
			if got := err.Error(); got != want {
				t.Errorf("Load error:\n got %s\nwant %s", got, want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error shows a password: %v", err)
			}
		})
	}
}

func TestLoadPolicyErrorUnwraps(t *testing.T) {
	t.Parallel()
	_, err := Load(writeConfig(t, "policies:\n  a: {mode: debounce}\n"), noEnv)
	var pe *debounce.PolicyError
	if !errors.As(err, &pe) || pe.Field != "window" {
		t.Fatalf("errors.As(%v, *PolicyError) = %v, %+v", err, errors.As(err, &pe), pe)
	}
	if !errors.Is(err, debounce.ErrInvalidPolicy) {
		t.Errorf("errors.Is(%v, debounce.ErrInvalidPolicy) = false", err)
	}
}

func TestLoadFileLimits(t *testing.T) {
	t.Parallel()
	t.Run("too large", func(t *testing.T) {
		t.Parallel()
		path := writeConfig(t, "# "+strings.Repeat("x", MaxFileSize)+"\n")
		_, err := Load(path, noEnv)
		if want := path + ": larger than 1MiB; a configuration file is refused above that size"; err == nil || err.Error() != want {
			t.Errorf("Load error = %v, want %s", err, want)
		}
	})
	t.Run("just under the limit", func(t *testing.T) {
		t.Parallel()
		content := "http: {listen: ':1'}\n"
		content += "#" + strings.Repeat("x", MaxFileSize-len(content)-2) + "\n"
		if _, err := Load(writeConfig(t, content), noEnv); err != nil {
			t.Error(err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		t.Parallel()
		_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"), noEnv)
		if !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "config: open ") {
			t.Errorf("Load error = %v, want a not-exist error", err)
		}
	})
}

func TestEnvOverrides(t *testing.T) {
	t.Parallel()
	file := `
redis:
  addrs: ['r1:6379']
  username: file-user
  password: file-pass
nats:
  urls: [nats://file:4222]
  user: file-user
  password: file-pass
http:
  tokens: [file-token]
`
	env := map[string]string{
		"COALESCE_REDIS_URL":      "redis://env:6379/1",
		"COALESCE_REDIS_USERNAME": "env-user",
		"COALESCE_REDIS_PASSWORD": "env-pass",
		"COALESCE_NATS_URL":       "nats://e1:4222, nats://e2:4222",
		"COALESCE_NATS_USER":      "env-user",
		"COALESCE_NATS_PASSWORD":  "env-pass",
		"COALESCE_HTTP_TOKENS":    "t1,t2",
		"COALESCE_NATS_TOKEN":     "", // empty: ignored
	}
	c, err := Load(writeConfig(t, file), envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	wantRedis := Redis{URL: "redis://env:6379/1", Username: "env-user", Password: "env-pass", Prefix: "c", Eviction: "warn", Persistence: "warn"}
	if !reflect.DeepEqual(c.Redis, wantRedis) {
		t.Errorf("Redis = %+v, want %+v", c.Redis, wantRedis)
	}
	if want := []string{"nats://e1:4222", "nats://e2:4222"}; !reflect.DeepEqual(c.NATS.URLs, want) {
		t.Errorf("NATS.URLs = %q, want %q", c.NATS.URLs, want)
	}
	if c.NATS.User != "env-user" || c.NATS.Password != "env-pass" || c.NATS.Token != "" {
		t.Errorf("NATS auth = %q %q %q", c.NATS.User, c.NATS.Password, c.NATS.Token)
	}
	if want := []string{"t1", "t2"}; !reflect.DeepEqual(c.HTTP.Tokens, want) {
		t.Errorf("HTTP.Tokens = %q, want %q", c.HTTP.Tokens, want)
	}

	t.Run("an override that keeps TLS and credentials", func(t *testing.T) {
		t.Parallel()
		file := "redis:\n  url: rediss://:pw@r:6380\n  tls:\n    enabled: true\nnats:\n  urls: [tls://n1:4222]\n  tls:\n    enabled: true\n"
		c, err := Load(writeConfig(t, file), envOf(map[string]string{
			"COALESCE_REDIS_ADDRS": "a:1,b:2", "COALESCE_REDIS_PASSWORD": "pw", "COALESCE_NATS_URL": "n2:4222"}))
		if err != nil {
			t.Fatal(err)
		}
		if !c.Redis.TLS.Enabled || c.Redis.Password != "pw" || !c.NATS.TLS.Enabled {
			t.Errorf("Redis %+v NATS TLS %+v", c.Redis, c.NATS.TLS)
		}
		if _, err := Load(writeConfig(t, "redis:\n  url: rediss://r:6380\nnats:\n  urls: [tls://n1:4222]\n"), envOf(map[string]string{
			"COALESCE_REDIS_URL": "rediss://other:6380", "COALESCE_NATS_URL": "tls://n2:4222"})); err != nil {
			t.Errorf("TLS URLs over TLS URLs: %v", err)
		}
	})
	t.Run("credentials replace the file's", func(t *testing.T) {
		t.Parallel()
		c, err := Load(writeConfig(t, ext+"  creds_file: /nonexistent.creds\n  user: app\n"), envOf(map[string]string{"COALESCE_NATS_TOKEN": "tok"}))
		if err != nil {
			t.Fatal(err)
		}
		if n := c.NATS; n.Token != "tok" || n.CredsFile != "" || n.User != "" {
			t.Errorf("NATS = %+v", n)
		}
	})
	t.Run("a password keeps the file's user", func(t *testing.T) {
		t.Parallel()
		c, err := Load(writeConfig(t, ext+"  user: app\n"), envOf(map[string]string{"COALESCE_NATS_PASSWORD": "pw"}))
		if err != nil {
			t.Fatal(err)
		}
		if n := c.NATS; n.User != "app" || n.Password != "pw" {
			t.Errorf("NATS = %+v", n)
		}
	})
	t.Run("url replaces the file's sentinel", func(t *testing.T) {
		t.Parallel()
		file := "redis:\n  sentinel: {master: m, addrs: ['s:26379']}\nnats: {urls: [n]}\n"
		c, err := Load(writeConfig(t, file), envOf(map[string]string{"COALESCE_REDIS_URL": "redis://r"}))
		if err != nil {
			t.Fatal(err)
		}
		if r := c.Redis; r.URL != "redis://r" || r.SentinelMaster != "" || r.Addrs != nil {
			t.Errorf("Redis = %+v", r)
		}
	})
	t.Run("addrs replace the file's url", func(t *testing.T) {
		t.Parallel()
		c, err := Load(writeConfig(t, ext), envOf(map[string]string{"COALESCE_REDIS_ADDRS": "a:1, b:2"}))
		if err != nil {
			t.Fatal(err)
		}
		if c.Redis.URL != "" || !reflect.DeepEqual(c.Redis.Addrs, []string{"a:1", "b:2"}) {
			t.Errorf("Redis = %+v", c.Redis)
		}
	})
	t.Run("environment only", func(t *testing.T) {
		t.Parallel()
		c, err := Load("", envOf(map[string]string{"COALESCE_REDIS_URL": "redis://r", "COALESCE_NATS_URL": "n:4222"}))
		if err != nil {
			t.Fatal(err)
		}
		if c.UsesEmbedded() || c.Source != "" {
			t.Errorf("UsesEmbedded = %v, Source = %q", c.UsesEmbedded(), c.Source)
		}
	})
}

func TestEnvVars(t *testing.T) {
	t.Parallel()
	var names []string
	for _, v := range EnvVars() {
		if v.Description == "" {
			t.Errorf("%s has no description", v.Name)
		}
		names = append(names, v.Name)
	}
	want := []string{"COALESCE_REDIS_URL", "COALESCE_REDIS_ADDRS", "COALESCE_REDIS_USERNAME", "COALESCE_REDIS_PASSWORD",
		"COALESCE_NATS_URL", "COALESCE_NATS_CREDS", "COALESCE_NATS_NKEY", "COALESCE_NATS_USER", "COALESCE_NATS_PASSWORD",
		"COALESCE_NATS_TOKEN", "COALESCE_HTTP_TOKENS", "COALESCE_HTTP_READ_TOKENS", "COALESCE_OUTBOX_POSTGRES"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("EnvVars names = %q, want %q", names, want)
	}
	EnvVars()[0].Name = "changed"
	if EnvVars()[0].Name != want[0] {
		t.Error("EnvVars returns shared state")
	}
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"30s", 30 * time.Second, true},
		{"1h30m", 90 * time.Minute, true},
		{"2d", 48 * time.Hour, true},
		{"1d12h", 36 * time.Hour, true},
		{"-1d", -24 * time.Hour, true},
		{"0", 0, true},
		{"d", 0, false},
		{"1d-1h", 0, false},
		{"--1d", 0, false},
		{"1dx", 0, false},
		{"30", 0, false},
		{"99999999999999999999d", 0, false},
		{"106752d", 0, false},
	}
	for _, tt := range tests {
		got, err := parseDuration(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1MiB", 1 << 20, true},
		{"512KiB", 512 << 10, true},
		{"10MB", 10_000_000, true},
		{"10 mb", 10_000_000, true},
		{"1GiB", 1 << 30, true},
		{"1024", 1024, true},
		{"7B", 7, true},
		{"10XB", 0, false},
		{"MiB", 0, false},
		{"1.5MiB", 0, false},
		{"-1", 0, false},
		{"99999999999GiB", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseSize(tt.in)
		if ok != tt.ok || got != tt.want {
			t.Errorf("parseSize(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// TestKnownKeysInOrder pins every section's keys in the order the
// "unknown key (known: ...)" messages list them: the order of the tagged
// fields, which a reordering of a struct would change.
func TestKnownKeysInOrder(t *testing.T) {
	t.Parallel()
	d, c := newDecoder(""), defaults()
	var p debounce.Policy
	var r CronRule
	for _, tt := range []struct {
		section string
		fs      []field
		want    string
	}{
		{"", d.tagged(c), "redis, nats, http, embedded, policies, cron, worker, local_joins, outbox"},
		{"redis", d.tagged(&c.Redis), "url, addrs, sentinel, username, password, db, tls, prefix, persistence, eviction, replicas, schedules"},
		{"redis.replicas", d.tagged(&c.Redis.Replicas), "acks, timeout"},
		{"redis.sentinel", d.sentinelFields(&c.Redis), "master, addrs"},
		{"tls", d.tagged(&c.Redis.TLS), "enabled, ca_file, cert_file, key_file, insecure_skip_verify"},
		{"nats", d.tagged(&c.NATS), "url, urls, creds_file, nkey_file, user, password, token, tls, stream, prefix, replicas, storage, max_age, ingest"},
		{"nats.ingest", d.tagged(&c.NATS.Ingest), "request_reply, durable, stream"},
		{"http", d.tagged(&c.HTTP), "listen, tokens, read_tokens, ui, public_metrics, body_limit, read_timeout, write_timeout"},
		{"embedded", d.tagged(&c.Embedded), "nats_listen, redis_listen, data_dir"},
		{"policies.*", d.tagged(&p), "mode, window, ttl, extend, max_wait, payload, max_items, item_field, key_fields, until, trailing, fail, exclusive, lease, local_joins"},
		{"local_joins", d.tagged(&c.Local), "mode, flush_interval, clock_skew, max_rounds"},
		{"cron[*]", d.tagged(&r), "name, schedule, timezone, type, args, key"},
		{"worker", d.tagged(&c.Worker), "concurrency, max_deliver, ack_wait, backoff"},
		{"outbox", d.tagged(&c.Outbox), "postgres, migrate, batch_size, concurrency, poll_every, allow_non_durable_redis"},
	} {
		if got := keyList(tt.fs); got != tt.want {
			t.Errorf("section %q knows %s, want %s", tt.section, got, tt.want)
		}
	}
}

// TestTaggedFieldsDecodeByType: a tagged field is decoded by its Go type,
// with the same checks and messages as every other key of that type, and
// a type the decoder does not know is refused loudly (a panic naming the
// field), not skipped.
func TestTaggedFieldsDecodeByType(t *testing.T) {
	t.Parallel()
	type inner struct {
		On bool `yaml:"on"`
	}
	type all struct {
		S    string          `yaml:"s"`
		Mode debounce.Mode   `yaml:"mode"`
		B    bool            `yaml:"b"`
		N    int             `yaml:"n"`
		D    time.Duration   `yaml:"d"`
		L    []string        `yaml:"l"`
		DL   []time.Duration `yaml:"dl"`
		Size int64           `yaml:"size,size"`
		In   inner           `yaml:"in"`
		Skip string          `yaml:"-"`
		None string
	}
	decode := func(src string) (all, error) {
		var v all
		d := newDecoder("t.yaml")
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
			t.Fatal(err)
		}
		return v, d.fields(doc.Content[0], "", d.tagged(&v))
	}
	got, err := decode("s: 0123\nmode: throttle\nb: true\nn: 7\nd: 90s\nl: [a, b]\ndl: [1s, 2m]\nsize: 2KiB\nin: {on: true}\n")
	if err != nil {
		t.Fatal(err)
	}
	want := all{S: "0123", Mode: debounce.ModeThrottle, B: true, N: 7, D: 90 * time.Second, L: []string{"a", "b"},
		DL: []time.Duration{time.Second, 2 * time.Minute}, Size: 2048, In: inner{On: true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded %+v, want %+v", got, want)
	}
	for src, msg := range map[string]string{
		"n: -1\n":        "t.yaml:1: n: -1 must not be negative",
		"d: soon\n":      `t.yaml:1: d: "soon" is not a duration (use e.g. 30s, 5m)`,
		"size: lots\n":   `t.yaml:1: size: "lots" is not a size (use e.g. 1MiB, 512KiB, 10MB or a byte count)`,
		"in: {off: 1}\n": "t.yaml:1: in.off: unknown key (known: on)",
		"skip: x\n":      "t.yaml:1: skip: unknown key (known: s, mode, b, n, d, l, dl, size, in)",
	} {
		if _, err := decode(src); err == nil || err.Error() != msg {
			t.Errorf("%q: got %v, want %s", src, err, msg)
		}
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "odd.F") {
			t.Errorf("a field of a type without a decoder: recovered %v, want a panic naming odd.F", r)
		}
	}()
	type odd struct {
		F float64 `yaml:"f"`
	}
	newDecoder("").tagged(&odd{})
}

// TestLoadHalfEmbedded: Redis without NATS, or NATS without Redis, is a
// development setup, not an error (issue 15: a user with only
// redis-server, whose Debian nats-server is too old, could not start):
// the daemon runs the embedded server for the missing half only.
func TestLoadHalfEmbedded(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, file             string
		env                    map[string]string
		embRedis, embNATS, any bool
	}{
		{"neither", "", nil, true, true, true},
		{"only redis", "redis:\n  url: redis://localhost:6379\n", nil, false, true, true},
		{"only nats", "nats:\n  url: nats://localhost:4222\n", nil, true, false, true},
		{"env redis only", "", map[string]string{"COALESCE_REDIS_URL": "redis://r"}, false, true, true},
		{"both", "redis: {url: redis://r}\nnats: {url: nats://n}\n", nil, false, false, false},
	} {
		path := writeConfig(t, c.file)
		cfg, err := Load(path, func(k string) string { return c.env[k] })
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if cfg.EmbeddedRedis() != c.embRedis || cfg.EmbeddedNATS() != c.embNATS || cfg.UsesEmbedded() != c.any {
			t.Errorf("%s: embedded redis %v, nats %v, any %v; want %v %v %v", c.name, cfg.EmbeddedRedis(), cfg.EmbeddedNATS(), cfg.UsesEmbedded(), c.embRedis, c.embNATS, c.any)
		}
	}
}
