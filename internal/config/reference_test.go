package config

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/coalesce-io/coalesce/debounce"
)

// TestReferenceIsCurrent: docs/config-reference.md is what the tagged
// structs and their comments generate; a key added, renamed or documented
// differently without `go generate ./internal/config` fails here.
func TestReferenceIsCurrent(t *testing.T) {
	t.Parallel()
	docs, err := FieldDocs(".", "../../debounce")
	if err != nil {
		t.Fatal(err)
	}
	want := Reference(docs)
	have, err := os.ReadFile("../../docs/config-reference.md")
	if err != nil {
		t.Fatalf("%v: run go generate ./internal/config", err)
	}
	if !bytes.Equal(have, want) {
		hl, wl := strings.Split(string(have), "\n"), strings.Split(string(want), "\n")
		for i := range max(len(hl), len(wl)) {
			var h, w string
			if i < len(hl) {
				h = hl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if h != w {
				t.Fatalf("docs/config-reference.md is stale (line %d):\n have %q\n want %q\nrun go generate ./internal/config", i+1, h, w)
			}
		}
	}
}

// TestReferenceListsEveryKey: every key the decoder reads has its row in
// the reference, and a few rows say what they must.
func TestReferenceListsEveryKey(t *testing.T) {
	t.Parallel()
	docs, err := FieldDocs(".", "../../debounce")
	if err != nil {
		t.Fatal(err)
	}
	ref := string(Reference(docs))
	d, c := newDecoder(""), defaults()
	var p debounce.Policy
	var r CronRule
	sections := map[string][]field{
		"redis": d.tagged(&c.Redis), "redis.sentinel": d.sentinelFields(&c.Redis), "redis.tls": d.tagged(&c.Redis.TLS),
		"redis.replicas": d.tagged(&c.Redis.Replicas), "nats": d.tagged(&c.NATS), "nats.tls": d.tagged(&c.NATS.TLS),
		"nats.ingest": d.tagged(&c.NATS.Ingest), "http": d.tagged(&c.HTTP), "embedded": d.tagged(&c.Embedded),
		"policies.<type>": d.tagged(&p), "cron[]": d.tagged(&r), "worker": d.tagged(&c.Worker),
		"local_joins": d.tagged(&c.Local), "outbox": d.tagged(&c.Outbox),
	}
	keys := map[string]bool{}
	for section, fs := range sections {
		for _, f := range fs {
			key := section + "." + f.key
			if _, ok := sections[key]; ok {
				continue // a section of its own
			}
			keys[key] = true
			if !strings.Contains(ref, "| `"+key+"` |") {
				t.Errorf("the reference has no row for %s", key)
			}
		}
	}
	for _, line := range strings.Split(ref, "\n") {
		if row, ok := strings.CutPrefix(line, "| `"); ok && !keys[row[:strings.IndexByte(row, '`')]] {
			t.Errorf("the reference has a row for %s, which the decoder does not read", row[:strings.IndexByte(row, '`')])
		}
	}
	for _, want := range []string{"| `http.listen` | string | `127.0.0.1:8080` |", "| `http.body_limit` | size | `1MiB` |",
		"| `redis.password` | string |  | `COALESCE_REDIS_PASSWORD` |", "| `nats.max_age` | duration | `7d` |"} {
		if !strings.Contains(ref, want) {
			t.Errorf("the reference lacks %q", want)
		}
	}
}
