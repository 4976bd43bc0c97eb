package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/coalesce-io/coalesce/internal/daemon"
	"github.com/coalesce-io/coalesce/internal/redact"
	"github.com/coalesce-io/coalesce/internal/telemetry"
	"github.com/coalesce-io/coalesce/worker"
)

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error {
	for p := range strings.SplitSeq(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*s = append(*s, p)
		}
	}
	return nil
}

// ExitPermanent is the exit status with which a --exec command says "do not
// retry": the job is dead-lettered at once.
const ExitPermanent = 100

const workSynopsis = `work --type T [--type T2] (--exec CMD | --post URL) [--config FILE] [--redis URL --nats URL]

A worker for any language: for each job of the types, it closes the job's
round (so new events open the next round), then runs CMD with sh -c and the
job as JSON on stdin, or POSTs the same JSON to URL:

  {"v":1,"type":"recompute_financials","args":{...},"key":"<64 hex>","fingerprint":"<64 hex>",
   "round":"<16 hex>","attempt":1,"release":"released",
   "summary":{"events":57,"first_seen":"...","last_seen":"...","payload":{...},"items":[...]}}

Exit status 0 acknowledges the job; any other retries it with backoff, and
after --max-deliver deliveries it goes to the dead-letter subject; exit status
100 dead-letters it at once. CMD's output goes to this command's stdout and stderr.
Environment for CMD: COALESCE_JOB_TYPE, COALESCE_ROUND_KEY, COALESCE_ATTEMPT.

With --post, a 2xx answer acknowledges; 408, 429, 5xx, no answer or a timeout
(--post-timeout) retries with backoff; any other status dead-letters at once.
Headers: Coalesce-Job-Type, Coalesce-Round, Coalesce-Round-Key,
Coalesce-Attempt, Coalesce-Release, Idempotency-Key (the job's id: the same
for every delivery of one job, another for every other job), traceparent; with
COALESCE_POST_TOKEN set, Authorization: Bearer <it>; with COALESCE_POST_SECRET,
Coalesce-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">.

With no servers configured it connects to a local ` + "`coalesce serve`" + `'s
development servers: where ./coalesce-data/servers.json (embedded.data_dir)
says they listen, else 127.0.0.1:6379 and 127.0.0.1:4222. Give it the same
--config as the daemon so it knows the policies (dedup until success needs it).
A job reserved in another Redis than the worker's (its store identity
differs) is not run: the worker logs both and leaves it for another worker.`

func runWork(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("work", workSynopsis, stderr)
	var sf serverFlags
	sf.register(fs)
	var types stringList
	fs.Var(&types, "type", "job type to run (repeat, or comma-separated)")
	execCmd := fs.String("exec", "", "command run per job (sh -c), job JSON on stdin")
	postURL := fs.String("post", "", "URL each job's JSON is POSTed to (instead of --exec)")
	postTimeout := fs.Duration("post-timeout", worker.DefaultPushTimeout, "longest a --post request may take")
	concurrency := fs.Int("concurrency", 0, "jobs run at once (default from the file, else 4)")
	maxDeliver := fs.Int("max-deliver", 0, "attempts before dead-lettering (default from the file, else 5)")
	ackWait := fs.Duration("ack-wait", 0, "redelivery after silence; progress is reported while CMD runs (default 30s)")
	metricsAddr := fs.String("metrics", "", "serve Prometheus /metrics on this address (e.g. 127.0.0.1:9091)")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if len(types) == 0 {
		return usagef("--type is required")
	}
	switch {
	case *execCmd == "" && *postURL == "":
		return usagef("--exec or --post is required")
	case *execCmd != "" && *postURL != "":
		return usagef("--exec and --post are both set; a worker runs jobs one way")
	}
	log, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	var onPush func(jobType, result string) // the metrics', once they exist
	handler := execHandler(*execCmd, stdout, stderr)
	if *postURL != "" {
		if handler, err = worker.Push(worker.PushConfig{URL: *postURL, Timeout: *postTimeout,
			Result: func(t, r string) { onPush(t, r) },
			Token:  os.Getenv("COALESCE_POST_TOKEN"), Secret: []byte(os.Getenv("COALESCE_POST_SECRET"))}); err != nil {
			return usagef("--post: %v", err)
		}
	}
	cfg, err := sf.load()
	if err != nil {
		return err
	}
	if from := localDaemonServers(cfg); from != "" {
		log.Info("no servers configured: using the local coalesce serve's embedded servers", "from", from, "redis", redact.URL(cfg.Redis.URL), "nats", redact.URL(cfg.NATS.URLs[0]))
	}
	m := daemon.NewMetrics(append(cfg.Types(), types...)...)
	onPush = m.OnPush
	tracing, err := telemetry.FromEnv(ctx, "coalesce-work")
	if err != nil {
		return err
	}
	defer shutdownTracing(tracing, log)
	conns, err := daemon.Connect(ctx, cfg, log, m, false, tracing)
	if err != nil {
		return err
	}
	defer conns.Close()
	wc := worker.Config{
		JetStream: conns.JetStream, Stream: conns.Publisher.Stream(), Subjects: conns.Publisher.Subjects(),
		Coalescer: conns.Coalescer, Publisher: conns.Publisher, Types: types,
		Concurrency: cfg.Worker.Concurrency, MaxDeliver: cfg.Worker.MaxDeliver, AckWait: cfg.Worker.AckWait,
		Backoff: cfg.Worker.Backoff, Logger: log,
	}
	jl := &jobLog{log: log}
	wc.Hooks = jl.hooks(m.WorkerHooks())
	if *concurrency > 0 {
		wc.Concurrency = *concurrency
	}
	if *maxDeliver > 0 {
		wc.MaxDeliver = *maxDeliver
	}
	if *ackWait > 0 {
		wc.AckWait = *ackWait
	}
	if tracing != nil {
		wc.Hooks.Span = tracing.WorkerSpan
	}
	w, err := worker.New(wc)
	if err != nil {
		return err
	}
	// A failover can bring back as pending a round whose job already ran
	// (without replication acks): reconcile at once, not at the daemon's
	// next reaper pass.
	go daemon.ReconcileOnFailover(ctx, conns.Coalescer, m, log)
	if *metricsAddr != "" {
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics %s: %w", *metricsAddr, err)
		}
		srv := &http.Server{Handler: promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		log.Info("metrics", "addr", ln.Addr().String())
	}
	if *postURL != "" {
		log.Info("working", "types", types.String(), "post", redact.URL(*postURL))
	} else {
		log.Info("working", "types", types.String(), "exec", *execCmd)
	}
	defer jl.stopping(ctx)()
	return w.Run(ctx, jl.handler(handler))
}

// execHandler runs cmd for each job, its output on ours.
func execHandler(cmdline string, stdout, stderr io.Writer) worker.Handler {
	return func(ctx context.Context, job *worker.Job) error {
		in, err := json.Marshal(job.Document())
		if err != nil {
			return worker.Permanent(err)
		}
		cmd := exec.CommandContext(ctx, "sh", "-c", cmdline)
		cmd.Stdin = bytes.NewReader(append(in, '\n'))
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.Env = append(os.Environ(),
			"COALESCE_JOB_TYPE="+job.Type,
			"COALESCE_ROUND_KEY="+job.Key.String(),
			"COALESCE_ATTEMPT="+strconv.Itoa(job.Attempt))
		err = cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return nil
		// The command is in the log's "working" line once; not in every
		// job's error.
		case errors.As(err, &ee) && ee.ExitCode() == ExitPermanent:
			return worker.Permanent(fmt.Errorf("the --exec command exited %d (permanent failure)", ExitPermanent))
		case errors.As(err, &ee):
			return fmt.Errorf("the --exec command exited %d", ee.ExitCode())
		default:
			return fmt.Errorf("the --exec command: %w", err)
		}
	}
}
