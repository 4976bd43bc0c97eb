package config

import (
	"encoding/json"
	"os"
	"testing"
)

// FuzzLoad feeds arbitrary bytes as the configuration file: Load returns a
// Config or an error, never panics, and an accepted Config has its defaults.
func FuzzLoad(f *testing.F) {
	sample, err := os.ReadFile("testdata/coalesce.example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		string(sample),
		"",
		"policies:\n  a: {mode: debounce, window: 30s, extend: true, max_wait: 5m}\n",
		"policies:\n  a: &b {mode: dedup}\n  c: {<<: *b, until: expiry, ttl: 1d}\n",
		"policies: {p: {mode: dedup}}\ncron:\n  - {name: n, schedule: '@every 1m', type: p, args: {a: [1, 2.5, x, ~, true, 0x1F]}}\n",
		"cron: &x [*x]\n",
		"a: &a [x, x]\nb: [*a, *a]\n",
		"redis: {url: 'redis://r', addrs: [a]}\n",
		"http: {body_limit: 10XB, listen: ':0'}\n",
		"nats: {url: nats://a, storage: memory}\n",
		"redis:\n\turl: a\n",
		"- x\n",
		"http: {}\n---\nredis: {}\n",
		"cron:\n  - {name: n, schedule: 'TZ=UTC', type: p}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > MaxFileSize {
			return
		}
		c, err := load(data, "fuzz.yaml", noEnv)
		if err != nil {
			if c != nil {
				t.Fatalf("load returned a Config and an error: %v", err)
			}
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if c.HTTP.BodyLimit <= 0 || c.NATS.Stream == "" || c.Redis.Prefix == "" {
			t.Fatalf("accepted a Config without its defaults: %+v", c)
		}
		for _, r := range c.Cron {
			if !json.Valid(r.Args) {
				t.Fatalf("cron %q args are not JSON: %s", r.Name, r.Args)
			}
		}
	})
}
