package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/config"
	"github.com/coalesce-io/coalesce/internal/daemon"
	"github.com/coalesce-io/coalesce/internal/devservers"
	"github.com/coalesce-io/coalesce/internal/loadgen"
	"github.com/coalesce-io/coalesce/publisher"
)

const benchSynopsis = `bench [--events N --keys K --concurrency C --mode M --window D --payload P --pending N] [--schedules S --nats-pid PID --drain] [--redis URL --nats URL | --config FILE] [--http URL [--batch N]]

A load generator: N events over K keys ("tenant-<i mod K>"), C in flight,
through the library (a Coalescer on the Redis and NATS given, publishing
real schedules), or with --http through a running daemon's batch endpoint
(--batch lines per request) or single endpoint (--batch 0). Prints one JSON
line: events_per_s, decision latency p50/p99 (per request with --http;
through the library also joined_p50/p99_us, the coalesced path without the
openings, which wait for their publish), rounds opened, jobs published, duplicate rounds, Redis CPU per event (INFO
cpu) and Redis bytes per round (INFO memory) — give it a Redis of its own.

With no servers given it uses in-process NATS and Redis (miniredis: no CPU
or memory figures). Modes: debounce, extend, dedup, throttle; payloads:
first, last, accumulate (--local-joins on: payload last joined by one SET).
--schedules redis|jetstream chooses where debounce
rounds wait (default: the configuration's, auto); --nats-pid PID adds the
nats-server's CPU per event; --drain then waits until every round's job is
published (with a short --window: rounds held in Redis are forwarded when
due) and reports how long that took.`

func runBench(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("bench", benchSynopsis, stderr)
	var sf serverFlags
	sf.register(fs)
	events := fs.Int("events", 100_000, "events to send")
	keys := fs.Int("keys", 1000, "distinct keys")
	conc := fs.Int("concurrency", 50, "events (or requests) in flight")
	mode := fs.String("mode", "debounce", "debounce, extend, dedup or throttle")
	window := fs.Duration("window", 5*time.Minute, "debounce window (extend: max wait is 2x) or throttle window; long keeps rounds pending through the run")
	payload := fs.String("payload", "first", "first, last or accumulate")
	localJoins := fs.String("local-joins", "auto", "library: the policy's local_joins: auto, on (payload last) or off")
	httpURL := fs.String("http", "", "send through a running daemon at this URL instead of the library")
	batch := fs.Int("batch", 1000, "with --http: events per batch request; 0 uses POST /v1/events")
	token := fs.String("token", "", "with --http: bearer token")
	jobType := fs.String("type", "bench", "job type (with --http, the daemon needs a policy for it)")
	prefix := fs.String("prefix", "b", "library: Redis key prefix (runs with one prefix within a window join each other's rounds)")
	idemKeys := fs.Bool("idempotency-keys", false, "give every event an idempotency key (a fresh one each), as the clients do")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the measured run to this file (go tool pprof)")
	pending := fs.Int("pending", 0, "library: open this many rounds of other keys first (as another producer), so the measured run meets a store holding them")
	schedules := fs.String("schedules", "", "library: where debounce rounds wait: auto (the configuration's, default), redis or jetstream")
	natsPID := fs.Int("nats-pid", 0, "the nats-server's process id: report its CPU per event")
	drain := fs.Bool("drain", false, "library: after the run, wait until every round's job is published (use a short --window) and report how long it took")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *events < 1 || *keys < 1 || *conc < 1 {
		return usagef("--events, --keys and --concurrency must be at least 1")
	}
	if *pending < 0 || (*pending > 0 && *httpURL != "") {
		return usagef("--pending must be a positive count of rounds, and works through the library (not with --http)")
	}
	p := debounce.Policy{Type: *jobType, Mode: debounce.Mode(*mode), Window: *window, Payload: debounce.Payload(*payload), KeyFields: []string{"tenant_id"},
		LocalJoins: debounce.LocalJoins(*localJoins)}
	if p.LocalJoins == "auto" {
		p.LocalJoins = debounce.LocalJoinsAuto
	}
	switch *mode {
	case "extend":
		p.Mode, p.Extend, p.MaxWait = debounce.ModeDebounce, true, 2**window
	case "dedup":
		p.Window, p.TTL = 0, *window
	}
	if p.Payload == debounce.PayloadAccumulate {
		p.ItemField, p.MaxItems = "seq", 1<<30
	}
	if err := p.WithDefaults().Validate(); err != nil {
		return usagef("%v", err)
	}
	nonce := time.Now().UnixNano()
	idemOf := func(i int) string {
		if !*idemKeys {
			return ""
		}
		return fmt.Sprintf("bench-%x-%d", nonce, i)
	}
	doc := func(i int) []byte {
		if *idemKeys {
			return fmt.Appendf(nil, `{"type":%q,"args":{"tenant_id":"tenant-%d","seq":%d},"idempotency_key":%q}`, *jobType, i%*keys, i, idemOf(i))
		}
		return fmt.Appendf(nil, `{"type":%q,"args":{"tenant_id":"tenant-%d","seq":%d}}`, *jobType, i%*keys, i)
	}

	res := loadgen.Result{Mode: *mode, Payload: *payload, Events: *events, Keys: *keys, Concurrency: *conc}
	var rdb redis.UniversalClient
	var co *debounce.Coalescer                               // library: to read its local-join stats
	var submit func(ctx context.Context, from, to int) error // decides events [from, to)
	var opened, published atomic.Int64
	var opens []bool // library: per event, whether it opened a round
	count := func(d debounce.Decision) {
		if d.Outcome == debounce.OutcomeScheduled || d.Outcome == debounce.OutcomePublished {
			opened.Add(1)
		}
	}
	if *httpURL != "" {
		cfg, err := sf.load()
		if err != nil {
			return err
		}
		localDaemonServers(cfg)
		if rdb, err = cfg.RedisClient(); err != nil {
			return err
		}
		defer rdb.Close()
		c := &clientFlags{server: *httpURL, token: *token, timeout: time.Minute}
		res.Via = "http-single"
		submit = func(ctx context.Context, from, to int) error {
			out, err := c.do(ctx, http.MethodPost, "/v1/events", "application/json", doc(from))
			if err != nil {
				return err
			}
			var d debounce.Decision
			_ = json.Unmarshal(out, &d)
			count(d)
			return nil
		}
		if *batch > 0 {
			res.Via = "http-batch"
			submit = func(ctx context.Context, from, to int) error {
				var body bytes.Buffer
				for i := from; i < to; i++ {
					body.Write(doc(i))
					body.WriteByte('\n')
				}
				out, err := c.do(ctx, http.MethodPost, "/v1/events:batch", "application/x-ndjson", body.Bytes())
				if err != nil {
					return err
				}
				// Count the openings from the outcome field alone: decoding
				// every decision would take the CPU the daemon is measured on.
				opened.Add(int64(bytes.Count(out, []byte(`{"outcome":"scheduled"`)) + bytes.Count(out, []byte(`{"outcome":"published"`))))
				if n := bytes.Count(out, []byte(`{"error":`)); n > 0 {
					return fmt.Errorf("%d events refused, e.g. %.200s", n, out)
				}
				return nil
			}
		}
	} else {
		// --redis alone: a real Redis, and an in-process NATS for the jobs.
		onlyRedis := sf.redis != "" && sf.nats == "" && sf.config == ""
		if onlyRedis {
			sf.nats = "nats://127.0.0.1:4222" // replaced below; lets the config check pass
		}
		cfg, err := sf.load()
		if err != nil {
			return err
		}
		if onlyRedis {
			cfg.NATS.URLs = nil
		}
		cfg.Policies = []debounce.Policy{p.WithDefaults()}
		if cfg.UsesEmbedded() || len(cfg.NATS.URLs) == 0 {
			dir, err := os.MkdirTemp("", "coalesce-bench-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			if len(cfg.NATS.URLs) == 0 && !cfg.UsesEmbedded() {
				// --redis alone: a real Redis, and an in-process NATS for the jobs.
				dev, err := devservers.Start(devservers.Options{NATSListen: "127.0.0.1:0", RedisListen: "127.0.0.1:0", DataDir: dir})
				if err != nil {
					return err
				}
				defer dev.Close()
				cfg.NATS.URLs = []string{dev.NATSURL}
			}
			cfg.Embedded = config.Embedded{NATSListen: "127.0.0.1:0", RedisListen: "127.0.0.1:0", DataDir: dir}
		}
		if cfg.NATS.Stream == config.DefaultNATSStream {
			cfg.NATS.Stream, cfg.NATS.Prefix = "COALESCE_BENCH", "cobench"
		}
		cfg.Redis.Prefix = *prefix
		if *schedules != "" {
			// Checked by Connect as the file's redis.schedules would be
			// (held rounds need a real Redis, not the embedded store).
			cfg.Redis.Schedules = *schedules
		}
		m := daemon.NewMetrics(cfg.Types()...)
		conns, err := daemon.Connect(ctx, cfg, nil, m, false)
		if err != nil {
			return err
		}
		defer conns.Close()
		// Count published jobs with a publisher of our own on the same stream.
		pub, err := publisher.New(ctx, conns.JetStream, &publisher.Config{Stream: cfg.NATS.Stream, Prefix: cfg.NATS.Prefix,
			OnPublish: func(info publisher.PublishInfo) {
				if info.Err == nil && !info.Duplicate {
					published.Add(1)
				}
			}})
		if err != nil {
			return err
		}
		dcfg := debounce.Config{Redis: conns.Redis, Publisher: pub, Policies: cfg.Policies, Prefix: cfg.Redis.Prefix}
		cfg.Local.Apply(&dcfg)
		cfg.Redis.Replicas.Apply(&dcfg)
		cfg.Redis.ApplySchedules(&dcfg)
		co, err = debounce.New(dcfg)
		if err != nil {
			return err
		}
		if *pending > 0 {
			// Another producer's rounds: the measured Coalescer starts
			// knowing none of them. Without local joins the opener keeps no
			// table of them in this process's heap (only the store does).
			ocfg := dcfg
			ocfg.LocalJoins = debounce.LocalJoinsOff
			other, err := debounce.New(ocfg)
			if err != nil {
				return err
			}
			if err := openPending(ctx, other, *jobType, *pending, *conc); err != nil {
				return err
			}
			res.Pending = *pending
			opened.Store(0)
			published.Store(0)
		}
		rdb = conns.Redis
		res.Via = "library"
		res.Schedules = string(debounce.SchedulesJetStream)
		if co.HoldsInRedis(ctx, *jobType) {
			res.Schedules = string(debounce.SchedulesRedis)
		}
		argsOf := func(i int) json.RawMessage {
			return fmt.Appendf(nil, `{"tenant_id":"tenant-%d","seq":%d}`, i%*keys, i)
		}
		opens = make([]bool, *events)
		submit = func(ctx context.Context, i, _ int) error {
			d, err := co.Submit(ctx, debounce.Event{Type: *jobType, Args: argsOf(i), IdempotencyKey: idemOf(i)})
			if err == nil {
				count(d)
				opens[i] = d.Outcome == debounce.OutcomeScheduled || d.Outcome == debounce.OutcomePublished
			}
			return err
		}
		*batch = 1
		defer func() { _ = purgeBenchStream(context.WithoutCancel(ctx), conns, cfg.NATS.Stream) }()
	}
	if *batch < 1 {
		*batch = 1
	}

	first, err := loadgen.Run(ctx, loadgen.Load{Events: *events, Batch: *batch, Concurrency: *conc, Submit: submit,
		Keys: *keys, Opened: &opened, Published: &published, Redis: rdb, Opens: opens,
		Allocs: res.Via == "library", CPUProfile: *cpuProfile, NATSPid: *natsPID}, &res)
	if err != nil {
		return err
	}
	if *drain && co != nil {
		if err := benchDrain(ctx, rdb, *natsPID, *window, &opened, &published, &res); err != nil {
			return err
		}
	}
	if co != nil {
		// Stopped (SIGTERM) or not, what was answered is flushed and told.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		ferr := co.Flush(fctx)
		cancel()
		if ferr != nil {
			return ferr
		}
		st := co.LocalStats()
		res.LocalJoined, res.Flushes, res.FlushedRounds, res.Resubmitted = &st.Joined, &st.Flushes, &st.FlushedKeys, &st.Resubmitted
		res.FlushAssists, res.LocalSkipped = &st.Assists, &st.Skipped
		waitMs := math.Round(float64(st.MaxWait.Microseconds())/100) / 10
		res.FlushWaitMaxMs = &waitMs
		mean := 0.0
		if st.Flushes > 0 {
			mean = math.Round(float64(st.FlushTime.Microseconds())/float64(st.Flushes)*10) / 10
		}
		res.FlushMeanUs = &mean
	}
	out, _ := json.Marshal(res)
	fmt.Fprintln(stdout, string(out))
	if res.Interrupted {
		fmt.Fprintf(stderr, "coalesce bench: stopped after %d of %d events; the figures are theirs\n", res.Sent, res.Events)
	}
	if first != nil {
		fmt.Fprintf(stderr, "coalesce bench: %d failed (first: %v)\n", res.Errors, first)
		return exitError{exitFailure}
	}
	return nil
}

// openPending opens n rounds of keys the measured run does not use.
func openPending(ctx context.Context, co *debounce.Coalescer, jobType string, n, conc int) error {
	next := atomic.Int64{}
	errs := make(chan error, conc)
	for range conc {
		go func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					errs <- nil
					return
				}
				args := fmt.Appendf(nil, `{"tenant_id":"pending-%d","seq":%d}`, i, i)
				if _, err := co.Submit(ctx, debounce.Event{Type: jobType, Args: args}); err != nil {
					errs <- fmt.Errorf("bench: opening the pending rounds: %w", err)
					return
				}
			}
		}()
	}
	var first error
	for range conc {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// purgeBenchStream drops the bench's jobs so they do not run anywhere.
func purgeBenchStream(ctx context.Context, conns *daemon.Conns, stream string) error {
	s, err := conns.JetStream.Stream(ctx, stream)
	if err != nil {
		return err
	}
	return s.Purge(ctx)
}

// benchDrain waits until a job was published for every round the run
// opened (rounds held in Redis are forwarded as they come due) and records
// how long that took, the forwarding rate from the first due time, and the
// nats-server's and Redis's CPU per job meanwhile.
func benchDrain(ctx context.Context, rdb redis.UniversalClient, natsPID int, window time.Duration, opened, published *atomic.Int64, res *loadgen.Result) error {
	start := time.Now()
	nats0, natsOK := loadgen.PIDCPU(natsPID)
	redis0, _, redisOK := loadgen.RedisUsage(ctx, rdb)
	pub0 := published.Load()
	deadline := start.Add(window + 10*time.Minute)
	for published.Load() < opened.Load() {
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: --drain: %d of %d rounds' jobs published after %v", published.Load(), opened.Load(), time.Since(start).Round(time.Second))
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	d := loadgen.Round(took.Seconds(), 3)
	res.DrainS = &d
	jobs := float64(published.Load() - pub0)
	if span := res.Seconds + took.Seconds() - window.Seconds(); span > 0 && jobs > 0 {
		rate := loadgen.Round(float64(opened.Load())/span, 0)
		res.ForwardedPerS = &rate
	}
	if jobs > 0 {
		if nats1, ok := loadgen.PIDCPU(natsPID); ok && natsOK && natsPID > 0 {
			v := loadgen.Round(float64((nats1-nats0).Microseconds())/jobs, 2)
			res.DrainNATSCPUusJob = &v
		}
		if redis1, _, ok := loadgen.RedisUsage(ctx, rdb); ok && redisOK {
			v := loadgen.Round((redis1-redis0)*1e6/jobs, 2)
			res.DrainRedisCPUusJob = &v
		}
	}
	return nil
}
