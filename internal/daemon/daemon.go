// Package daemon is `coalesce serve`: the HTTP API, NATS intake and cron
// rules in front of the debounce and publisher packages, with metrics,
// start-up checks, the embedded development servers and graceful shutdown.
package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/admin"
	"github.com/coalesce-io/coalesce/internal/config"
	"github.com/coalesce-io/coalesce/internal/devservers"
	"github.com/coalesce-io/coalesce/internal/redact"
	"github.com/coalesce-io/coalesce/internal/telemetry"
	"github.com/coalesce-io/coalesce/publisher"
)

// Options are what `coalesce serve` passes in.
type Options struct {
	Config *config.Config
	Logger *slog.Logger
	// RefuseEviction refuses to start on a Redis whose maxmemory-policy is
	// allkeys-* (default: warn), whatever the file says.
	RefuseEviction bool
	// Started, when set, is called once the daemon serves, with its HTTP
	// address (tests and the CLI use it).
	Started func(httpAddr string)
	// ReapEvery is the reaper's period (DefaultReapEvery): a round reserved
	// and never published is released within two periods.
	ReapEvery time.Duration
	// RepairAfter is how long past its due time a round not taken counts
	// as overdue, and is looked up in the stream (debounce.DefaultRepairAfter).
	RepairAfter time.Duration
	// Tracing, when set, traces requests, decisions, publishes and the
	// protocol's starts (internal/telemetry); nil: off.
	Tracing *telemetry.Tracing
	// Record, when set, appends every event accepted to this file, as an
	// event log for coalesce simulate (record.go), up to RecordLimit bytes
	// (DefaultRecordLimit when 0).
	Record      string
	RecordLimit int64
}

// DefaultReapEvery is how often the daemon looks for rounds reserved and
// never published (a producer died between the two steps).
const DefaultReapEvery = time.Minute

// reap runs reaper passes until ctx ends, and a reconcile pass at once (and
// again ReconcileAgain later) whenever a Redis primary changes
// (debounce.FailoverWatch, checked every FailoverCheckEvery).
func reap(ctx context.Context, co *debounce.Coalescer, every, repairAfter time.Duration, m *Metrics, log *slog.Logger) {
	r := co.NewReaper()
	if repairAfter > 0 {
		r.RepairAfter = repairAfter
	}
	failover := make(chan string, 1)
	go watchFailover(ctx, co, failover, m, log)
	t := time.NewTicker(every)
	defer t.Stop()
	var again <-chan time.Time
	var until time.Time
	for {
		reconcile := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-failover:
			reconcile, again, until = true, time.After(ReconcileAgain), time.Now().Add(ReconcileFor)
		case <-again:
			reconcile, again = true, nil
			if time.Now().Before(until) {
				again = time.After(ReconcileAgain)
			}
		}
		// A Redis that lost its data gets an identity again, so workers
		// run the jobs of rounds opened from now on (store.go).
		if _, err := co.EnsureStore(ctx); err != nil && ctx.Err() == nil {
			log.Warn("reaper: could not read or write the store identity", "err", err)
		}
		pass := r.Pass
		if reconcile {
			pass = r.Reconcile
		}
		rep, err := pass(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return // stopping: a pass cut short is no failure
			}
			m.reaper.WithLabelValues("error").Inc()
			log.Warn("reaper: pass failed", "err", err)
			continue
		}
		m.reaper.WithLabelValues("candidate").Add(float64(rep.Candidates))
		m.reaper.WithLabelValues("released").Add(float64(rep.Released))
		m.reaper.WithLabelValues("marked").Add(float64(rep.Marked))
		m.reaper.WithLabelValues("overdue").Add(float64(rep.Overdue))
		m.reaper.WithLabelValues("lookup").Add(float64(rep.Lookups))
		m.reaper.WithLabelValues("missing").Add(float64(rep.Missing))
		m.reaper.WithLabelValues("repaired").Add(float64(rep.Repaired))
		if rep.Released > 0 {
			log.Info("reaper: released rounds reserved and never published", "released", rep.Released)
		}
		if rep.Repaired > 0 {
			log.Warn("reaper: published again the jobs of rounds whose message the stream had lost", "repaired", rep.Repaired, "reconcile", reconcile)
		} else if reconcile {
			log.Info("reaper: reconciled after a change of Redis primary", "overdue", rep.Overdue, "lookups", rep.Lookups)
		}
	}
}

// Failover watching: how often the primaries are read, and how often
// reconcile passes follow the first, for how long: rounds just due at the
// failover are overdue by then, and a packed round brought back by it can be
// published again only once an event found it overdue and kept its identity.
const (
	FailoverCheckEvery = time.Second
	ReconcileAgain     = 5 * time.Second
	ReconcileFor       = time.Minute
)

// ReconcileOnFailover watches the Redis primaries and, when one changes,
// runs a reconcile pass (debounce.Reaper.Reconcile) at once and again
// ReconcileAgain later, until ctx ends: what a worker process runs (the
// daemon's reaper goes on for ReconcileFor; every worker scanning every
// round that long would cost more than it finds).
func ReconcileOnFailover(ctx context.Context, co *debounce.Coalescer, m *Metrics, log *slog.Logger) {
	r := co.NewReaper()
	failover := make(chan string, 1)
	go watchFailover(ctx, co, failover, m, log)
	var again <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-failover:
			again = time.After(ReconcileAgain)
		case <-again:
			again = nil
		}
		rep, err := r.Reconcile(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("reconcile after a change of Redis primary failed; the next change or the daemon's reaper tries again", "err", err)
		case rep.Repaired > 0:
			log.Warn("reconcile: published again the jobs of rounds past due whose message was gone", "repaired", rep.Repaired)
		}
	}
}

// watchFailover checks the primaries every FailoverCheckEvery and sends
// each change on to the reaper.
func watchFailover(ctx context.Context, co *debounce.Coalescer, to chan<- string, m *Metrics, log *slog.Logger) {
	w := co.NewFailoverWatch()
	t := time.NewTicker(FailoverCheckEvery)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, FailoverCheckEvery)
		changed, what, _ := w.Check(cctx) // a failed read: Redis is away; the next Check compares
		cancel()
		if changed {
			m.OnFailover()
			log.Warn("redis: a primary changed; reconciling the rounds past due now", "change", what)
			select {
			case to <- what:
			default: // one is queued already
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Conns are the connections a daemon (or a CLI command) works with.
type Conns struct {
	Redis     redis.UniversalClient
	NATS      *nats.Conn
	JetStream jetstream.JetStream
	Publisher *publisher.Publisher
	Coalescer *debounce.Coalescer
	Dev       *devservers.Servers // the embedded servers, when used
	Embedded  bool
}

// Close closes everything Connect opened: NATS is drained first, so
// publishes under way complete.
func (c *Conns) Close() {
	if c.Coalescer != nil {
		// The locally joined events' counts go to Redis before it closes.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = c.Coalescer.Flush(ctx)
		cancel()
	}
	if c.NATS != nil {
		_ = c.NATS.Drain()
		deadline := time.Now().Add(10 * time.Second)
		for !c.NATS.IsClosed() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		c.NATS.Close()
	}
	if c.Redis != nil {
		_ = c.Redis.Close()
	}
	if c.Dev != nil {
		c.Dev.Close()
	}
}

// Connect opens Redis and NATS as configured (or starts the embedded
// development servers), runs the start-up checks, provisions the stream and
// builds the Coalescer with the configured policies.
func Connect(ctx context.Context, cfg *config.Config, log *slog.Logger, m *Metrics, refuseEviction bool, tracing ...*telemetry.Tracing) (*Conns, error) {
	return connect(ctx, cfg, log, m, refuseEviction, tracing, nil)
}

// connect is Connect, with rec (when not nil) recording the events decided.
func connect(ctx context.Context, cfg *config.Config, log *slog.Logger, m *Metrics, refuseEviction bool, tracing []*telemetry.Tracing, rec *Recorder) (*Conns, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Conns{}
	fail := func(err error) (*Conns, error) {
		c.Close()
		return nil, err
	}
	redisURL, natsURLs := cfg.Redis.URL, cfg.NATS.URLs
	if cfg.EmbeddedRedis() && cfg.Redis.Schedules == string(debounce.SchedulesRedis) {
		return fail(errors.New("redis.schedules: redis needs a real Redis: the embedded store keeps no sorted sets (the due lists held rounds wait in); use auto or jetstream, or give a Redis with --redis"))
	}
	if cfg.UsesEmbedded() {
		c.Embedded = cfg.EmbeddedRedis() // the Redis is in-process (its client and persistence differ)
		if err := os.MkdirAll(cfg.Embedded.DataDir, 0o755); err != nil {
			return fail(fmt.Errorf("embedded: data folder %s: %w", cfg.Embedded.DataDir, err))
		}
		dev, err := devservers.Start(devservers.Options{NATSListen: cfg.Embedded.NATSListen, RedisListen: cfg.Embedded.RedisListen,
			DataDir: cfg.Embedded.DataDir, RedisDir: filepath.Join(cfg.Embedded.DataDir, EmbeddedRedisDir),
			LegacySnapshot: filepath.Join(cfg.Embedded.DataDir, legacyEmbeddedSnapshot), Logger: log,
			NoNATS: !cfg.EmbeddedNATS(), NoRedis: !cfg.EmbeddedRedis()})
		if errors.Is(err, devservers.ErrAddrInUse) {
			return fail(fmt.Errorf("%w; another server runs there: stop it, choose --nats-listen/--redis-listen, or point coalesce at it with --redis and --nats", err))
		}
		if err != nil {
			return fail(err)
		}
		c.Dev = dev
		if cfg.EmbeddedRedis() {
			redisURL = dev.RedisURL
		}
		if cfg.EmbeddedNATS() {
			natsURLs = []string{dev.NATSURL}
		}
		if err := WriteServersFile(cfg.Embedded.DataDir, ServersFile{Redis: redisURL, NATS: natsURLs[0]}); err != nil {
			log.Warn("embedded: could not write where the servers listen; coalesce work will look at the default addresses", "err", err)
		}
		switch {
		case cfg.EmbeddedRedis() && cfg.EmbeddedNATS():
			log.Warn("single-node development mode: no Redis or NATS configured, so coalesce runs an in-process NATS JetStream and an in-process Redis (miniredis), both kept in the data folder: schedules in the NATS store, reservations in a journal written before each answer and fsynced every second (a kill of the process loses nothing, a crash of the machine up to the last second)",
				"nats", redact.URL(dev.NATSURL), "redis", redact.URL(dev.RedisURL), "data_dir", cfg.Embedded.DataDir)
		case cfg.EmbeddedNATS():
			log.Warn("development mode: Redis is configured but NATS is not, so coalesce runs an in-process NATS JetStream beside your Redis, its store in the data folder",
				"nats", redact.URL(dev.NATSURL), "redis", redact.URL(redisURL), "data_dir", cfg.Embedded.DataDir)
		default:
			log.Warn("development mode: NATS is configured but Redis is not, so coalesce runs an in-process Redis (miniredis) beside your NATS, kept in a journal in the data folder (written before each answer, fsynced every second)",
				"redis", redact.URL(dev.RedisURL), "nats", redact.URL(natsURLs[0]), "data_dir", cfg.Embedded.DataDir)
		}
		log.Warn("for production point coalesce at real servers: --redis redis://host:6379/0 --nats nats://host:4222 (NATS 2.12 or later, Redis 7 with maxmemory-policy noeviction), or redis/nats in the config file")
	}

	var err error
	if c.Embedded {
		opt, perr := redis.ParseURL(redisURL)
		if perr != nil {
			return fail(perr)
		}
		opt.DisableIdentity = true
		opt.MaxRetries = -1 // never resend a lost opening: see config.RedisClient
		c.Redis = redis.NewClient(opt)
	} else if c.Redis, err = cfg.RedisClient(); err != nil {
		return fail(fmt.Errorf("redis: %w", err))
	}
	info, err := debounce.CheckServer(ctx, c.Redis)
	if err != nil && !errors.Is(err, debounce.ErrEvictionPolicy) && !errors.Is(err, debounce.ErrNoPersistence) {
		return fail(fmt.Errorf("redis: %w", err))
	}
	for _, check := range []struct {
		sentinel error
		refuse   bool
		hint     string
	}{
		{debounce.ErrEvictionPolicy, refuseEviction || cfg.Redis.Eviction == config.EvictionRefuse, "redis.eviction: refuse (or --refuse-eviction) refuses to start"},
		{debounce.ErrNoPersistence, cfg.Redis.Persistence == config.EvictionRefuse, "redis.persistence: refuse (or --refuse-no-persistence) refuses to start"},
	} {
		if !errors.Is(err, check.sentinel) {
			continue
		}
		msg := err.Error()
		for _, e := range unwrapJoined(err) {
			if errors.Is(e, check.sentinel) {
				msg = e.Error()
			}
		}
		if check.refuse {
			return fail(fmt.Errorf("redis: %s", msg))
		}
		log.Warn("redis: "+msg, "hint", check.hint)
	}
	if err := c.Redis.Ping(ctx).Err(); err != nil {
		return fail(fmt.Errorf("redis: %s: %w (check the address, credentials and TLS settings)", describeRedis(cfg, redisURL), err))
	}

	opts := cfg.NATSOptions()
	opts = append(opts, nats.Timeout(5*time.Second))
	if c.NATS, err = nats.Connect(joinURLs(natsURLs), opts...); err != nil {
		return fail(fmt.Errorf("nats: %s: %w (check the address, credentials and TLS settings)", redact.URLs(natsURLs), redact.Error(err)))
	}
	if c.JetStream, err = jetstream.New(c.NATS); err != nil {
		return fail(fmt.Errorf("nats: %w", err))
	}
	pcfg := &publisher.Config{
		Stream: cfg.NATS.Stream, Prefix: cfg.NATS.Prefix, Replicas: cfg.NATS.Replicas,
		Storage: publisher.Storage(cfg.NATS.Storage), MaxAge: cfg.NATS.MaxAge, Logger: log,
	}
	if m != nil {
		pcfg.OnPublish = m.OnPublish
	}
	if c.Publisher, err = publisher.New(ctx, c.JetStream, pcfg); err != nil {
		return fail(fmt.Errorf("nats: %w", err))
	}
	dcfg := debounce.Config{Redis: c.Redis, Publisher: c.Publisher, Policies: cfg.Policies, Prefix: cfg.Redis.Prefix, Logger: log}
	for _, t := range tracing {
		dcfg.Publisher = t.Publisher(dcfg.Publisher) // coalesce.publish spans
	}
	cfg.Local.Apply(&dcfg)
	cfg.Redis.Replicas.Apply(&dcfg)
	cfg.Redis.ApplySchedules(&dcfg)
	if m != nil {
		dcfg.Hooks = m.DebounceHooks()
	}
	if rec != nil {
		dcfg.Hooks.Event = rec.Record
	}
	if c.Coalescer, err = debounce.New(dcfg); err != nil {
		return fail(err)
	}
	if m != nil {
		m.WatchLocalJoins(c.Coalescer)
	}
	persistence := "unknown (the server does not say)"
	if info.Persistence != nil {
		persistence = info.Persistence.String()
	}
	if c.Embedded {
		persistence = "journal in the data folder: written before each answer, fsynced every second"
	}
	log.Info("connected", "redis_version", info.Version, "redis_eviction", info.EvictionPolicy, "redis_persistence", persistence,
		"redis_replica_acks", c.Coalescer.ReplicaAcks(ctx), "nats_version", c.Publisher.ServerVersion(), "stream", c.Publisher.Stream(), "policies", len(cfg.Policies))
	if c.Embedded {
		logRestore(ctx, c, log)
	}
	return c, nil
}

// unwrapJoined returns the errors joined in err (or err alone).
func unwrapJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// EmbeddedRedisDir is the in-process Redis's folder (snapshot and
// journal), in the data folder.
const EmbeddedRedisDir = "redis"

// legacyEmbeddedSnapshot is the one-file snapshot of builds before the
// journal, read once if found.
const legacyEmbeddedSnapshot = "redis.snapshot"

// logRestore says what the in-process Redis got back from its folder: how
// many rounds and keys, and up to when.
func logRestore(ctx context.Context, c *Conns, log *slog.Logger) {
	r := c.Dev.Restored
	if !r.Found {
		log.Info("embedded redis: nothing in the data folder yet; starting with no rounds")
		return
	}
	rounds, err := c.Coalescer.CountRounds(ctx)
	if err != nil {
		log.Warn("embedded redis: could not count the restored rounds", "err", err)
	}
	attrs := []any{"rounds", rounds, "keys", r.Keys, "expired_while_down", r.Expired, "journal_writes", r.Frames}
	if !r.SnapshotWritten.IsZero() {
		attrs = append(attrs, "snapshot_taken", r.SnapshotWritten.UTC().Format(time.RFC3339Nano))
	}
	if latest := r.Latest(); !latest.IsZero() {
		attrs = append(attrs, "last_write", latest.UTC().Format(time.RFC3339Nano), "last_write_age", time.Since(latest).Round(time.Millisecond))
	}
	if r.TornBytes > 0 {
		attrs = append(attrs, "torn_bytes_dropped", r.TornBytes)
	}
	if r.Legacy {
		attrs = append(attrs, "from", "the snapshot file of an older build (rewritten)")
	}
	log.Info("embedded redis: restored from its journal", attrs...)
}

func joinURLs(urls []string) string {
	s := ""
	for i, u := range urls {
		if i > 0 {
			s += ","
		}
		s += u
	}
	return s
}

func describeRedis(cfg *config.Config, url string) string {
	if url != "" {
		if opt, err := redis.ParseURL(url); err == nil {
			return opt.Addr
		}
		return "the configured URL"
	}
	return fmt.Sprint(cfg.Redis.Addrs)
}

// Run serves until ctx ends, then shuts down gracefully: stop intake (HTTP,
// NATS, cron), finish the decisions and publishes under way, close.
func Run(ctx context.Context, o Options) error {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := o.Config
	m := NewMetrics(cfg.Types()...)
	var rec *Recorder
	if o.Record != "" {
		var err error
		if rec, err = OpenRecorder(o.Record, o.RecordLimit, log); err != nil {
			return err
		}
		defer closeRecorder(rec, log)
		log.Info("recording the events accepted, for coalesce simulate", "file", o.Record, "limit", rec.limit)
	}
	c, err := connect(ctx, cfg, log, m, o.RefuseEviction, []*telemetry.Tracing{o.Tracing}, rec)
	if err != nil {
		return err
	}
	defer c.Close()

	ready := func(ctx context.Context) map[string]error {
		checks := map[string]error{"redis": c.Redis.Ping(ctx).Err(), "nats": nil, "stream": nil}
		if !c.NATS.IsConnected() {
			checks["nats"] = fmt.Errorf("not connected (%s)", c.NATS.Status())
		}
		s, err := c.JetStream.Stream(ctx, c.Publisher.Stream())
		if err == nil {
			var si *jetstream.StreamInfo
			if si, err = s.Info(ctx); err == nil {
				if !si.Config.AllowMsgSchedules {
					err = publisher.ErrSchedulesDisabled
				} else {
					err = publisher.CheckDropLimits(si.Config)
				}
			}
		}
		checks["stream"] = err
		return checks
	}
	if st, err := c.Coalescer.EnsureStore(ctx); err != nil {
		log.Warn("the store identity could not be read or written; jobs go without one until it can", "err", err)
	} else {
		log.Info("store", "id", st.ID, "created", time.UnixMilli(st.Created).UTC().Format(time.RFC3339), "redis", st.Addr)
	}
	pcfgp := ProtocolConfig{Coalescer: c.Coalescer, Publisher: c.Publisher, MaxDeliver: cfg.Worker.MaxDeliver, Metrics: m, Logger: log}
	if o.Tracing != nil {
		pcfgp.Span = o.Tracing.WorkerSpan
	}
	proto := NewProtocol(pcfgp)
	if err := proto.Subscribe(c.NATS, c.Publisher.Subjects().Prefix); err != nil {
		return err
	}
	defer proto.Stop()
	dead := &admin.Dead{JS: c.JetStream, Stream: c.Publisher.Stream(), Subjects: c.Publisher.Subjects()}
	dash, err := NewDashboard(c, m, cfg)
	if err != nil {
		return err
	}
	dashCtx, stopDash := context.WithCancel(ctx)
	defer stopDash()
	go dash.Run(dashCtx)
	if cfg.ServesUI() {
		log.Info("dashboard", "path", UIPath)
	}
	api := NewAPI(APIConfig{Dashboard: dash, UI: cfg.ServesUI(), Coalescer: c.Coalescer, Publisher: c.Publisher, Protocol: proto, Dead: dead, Ready: ready, Tokens: cfg.HTTP.Tokens, ReadTokens: cfg.HTTP.ReadTokens,
		BodyLimit: cfg.HTTP.BodyLimit, Metrics: m, PublicMetrics: cfg.HTTP.PublicMetrics, Logger: log,
		WriteTimeout: cfg.HTTP.WriteTimeout, ReadTimeout: cfg.HTTP.ReadTimeout, Tracer: o.Tracing.Tracer()})
	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http: listen %s: %w (choose another with --http)", cfg.HTTP.Listen, err)
	}
	srv := &http.Server{
		Handler:           api.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       cfg.HTTP.ReadTimeout,
		WriteTimeout:      cfg.HTTP.WriteTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	in, err := StartIngest(ctx, IngestConfig{Conn: c.NATS, JetStream: c.JetStream, Coalescer: c.Coalescer,
		Prefix: c.Publisher.Subjects().Prefix, Requests: cfg.NATS.Ingest.Subjects, Durable: cfg.NATS.Ingest.Durable,
		Stream: cfg.NATS.Ingest.Stream, Replicas: cfg.NATS.Replicas, Storage: streamStorage(cfg.NATS.Storage),
		Redis: c.Redis, RedisPrefix: cfg.Redis.Prefix, Metrics: m, Logger: log})
	if err != nil {
		_ = srv.Close()
		return err
	}
	rules := make([]CronRule, 0, len(cfg.Cron))
	for _, r := range cfg.Cron {
		loc, err := time.LoadLocation(r.Timezone)
		if err != nil {
			in.Stop()
			_ = srv.Close()
			return fmt.Errorf("cron %s: timezone %q: %w", r.Name, r.Timezone, err)
		}
		rules = append(rules, CronRule{Name: r.Name, Schedule: r.Schedule, Location: loc,
			Event: debounce.Event{Type: r.Type, Args: EventArgs(r.Args), Key: r.Key}})
	}
	cr, err := StartCron(rules, c.Coalescer, c.Redis, cfg.Redis.Prefix, m, log)
	if err != nil {
		in.Stop()
		_ = srv.Close()
		return err
	}
	reapCtx, stopReaper := context.WithCancel(ctx)
	defer stopReaper()
	every := o.ReapEvery
	if every <= 0 {
		every = DefaultReapEvery
	}
	go reap(reapCtx, c.Coalescer, every, o.RepairAfter, m, log)
	if c.Coalescer.Defers() {
		// Rounds held in Redis until due: their jobs are published from
		// here (and from every worker) as they come due.
		go func() { _ = c.Coalescer.NewForwarder(c.Publisher).Run(reapCtx) }()
	}
	stopOutbox, err := StartOutbox(ctx, cfg, c, m, log)
	if err != nil {
		cr.Stop()
		in.Stop()
		_ = srv.Close()
		return err
	}
	defer stopOutbox() // before the connections close: its pass under way finishes
	addr := ln.Addr().String()
	log.Info("serving", "http", addr, "events_subject", c.Publisher.Subjects().Prefix+".events.<type>",
		"worker_protocol", StartSubject(c.Publisher.Subjects().Prefix)+", "+ProgressSubject(c.Publisher.Subjects().Prefix)+", "+FinishSubject(c.Publisher.Subjects().Prefix),
		"durable_ingest", cfg.NATS.Ingest.Durable, "cron_rules", len(rules))
	if o.Started != nil {
		o.Started(addr)
	}

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		cr.Stop()
		in.Stop()
		return fmt.Errorf("http: %w", err)
	}
	log.Info("shutting down: no new events; finishing decisions under way")
	cr.Stop()
	shutCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	httpErr := srv.Shutdown(shutCtx)
	in.Stop()
	if httpErr != nil {
		return fmt.Errorf("http shutdown: %w", httpErr)
	}
	log.Info("stopped")
	return nil
}

// streamStorage is nats.storage as JetStream names it.
func streamStorage(s string) jetstream.StorageType {
	if s == config.StorageMemory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// ServersFileName is the file in the embedded data folder that says where
// the embedded servers listen, so that `coalesce work` and the other client
// commands find them when --nats-listen or --redis-listen moved them.
const ServersFileName = "servers.json"

// ServersFile is its content.
type ServersFile struct {
	Redis string `json:"redis"` // redis://host:port/0
	NATS  string `json:"nats"`  // nats://host:port
}

// WriteServersFile writes dir's servers file.
func WriteServersFile(dir string, f ServersFile) error {
	b, _ := json.Marshal(f)
	return os.WriteFile(filepath.Join(dir, ServersFileName), append(b, '\n'), 0o644)
}

// ReadServersFile reads dir's servers file.
func ReadServersFile(dir string) (ServersFile, error) {
	var f ServersFile
	b, err := os.ReadFile(filepath.Join(dir, ServersFileName))
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil || f.Redis == "" || f.NATS == "" {
		return f, fmt.Errorf("%s: not a servers file", filepath.Join(dir, ServersFileName))
	}
	return f, nil
}
