package main

import (
	"context"
	"io"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/coalesce-io/coalesce/internal/admin"
	"github.com/coalesce-io/coalesce/publisher"
)

const dedupeSynopsis = `dedupe-stream [--type T] [--fields T=a,b] [--apply] [--config FILE] [--nats URL]

A one-off clean-up of a job stream already flooded with duplicates (jobs
published before the producers went through coalesce): it compares the
fingerprints of the jobs still pending on <prefix>.jobs.<type> (and on
coalesce's <prefix>.run.<type>.<key>.<round>), keeps the oldest of each, and removes the confirmed duplicates. Jobs a worker has
received and not yet acknowledged are never touched.

A dry run by default: it prints what it would remove. --apply removes.
A job's identity is its Coalesce-Key header when it has one, else the fp1
fingerprint of its type and body (or of --fields, the key fields per type).`

func runDedupeStream(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("dedupe-stream", dedupeSynopsis, stderr)
	var sf serverFlags
	sf.register(fs)
	var types, fields stringList
	fs.Var(&types, "type", "job type to clean (repeat; default: every type in the stream)")
	fs.Var(&fields, "fields", "key fields of a type as TYPE=field1,field2 (repeat per type)")
	apply := fs.Bool("apply", false, "remove the duplicates (default: dry run, remove nothing)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	keyFields := map[string][]string{}
	for _, f := range fieldsByType(fields) {
		typ, list, ok := strings.Cut(f, "=")
		if !ok || typ == "" || list == "" {
			return usagef("--fields %q: use TYPE=field1,field2", f)
		}
		keyFields[typ] = strings.Split(list, ",")
	}
	if sf.nats != "" && sf.redis == "" && sf.config == "" {
		sf.redis = "redis://127.0.0.1:6379/0" // not used: only NATS is needed; lets the config check pass
	}
	cfg, err := sf.load()
	if err != nil {
		return err
	}
	localDaemonServers(cfg)
	nc, err := nats.Connect(strings.Join(cfg.NATS.URLs, ","), cfg.NATSOptions()...)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	report, err := admin.Dedupe(ctx, js, admin.DedupeOptions{
		Stream: cfg.NATS.Stream, Subjects: publisher.Subjects{Prefix: cfg.NATS.Prefix},
		Types: types, Fields: keyFields, Apply: *apply,
	})
	report.WriteText(stdout) // also on error: what was already removed
	return err
}

// fieldsByType undoes the comma split stringList applies, so
// "recompute=tenant_id,period" stays one entry.
func fieldsByType(parts stringList) []string {
	var out []string
	for _, p := range parts {
		if strings.Contains(p, "=") || len(out) == 0 {
			out = append(out, p)
			continue
		}
		out[len(out)-1] += "," + p
	}
	return out
}
