package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/coalesce-io/coalesce/internal/config"
	"github.com/coalesce-io/coalesce/internal/daemon"
	"github.com/coalesce-io/coalesce/internal/telemetry"
)

// serverFlags are the flags of every command that talks to Redis and NATS.
type serverFlags struct {
	config, redis, nats string
}

func (s *serverFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.config, "config", "", "YAML configuration file (policies, servers, HTTP, cron)")
	fs.StringVar(&s.redis, "redis", "", "Redis URL, overriding the file (redis://host:6379/0)")
	fs.StringVar(&s.nats, "nats", "", "NATS URL(s), comma-separated, overriding the file (nats://host:4222)")
}

// load reads the configuration with the flag overrides applied on top of the
// file and the environment.
func (s *serverFlags) load() (*config.Config, error) {
	env := os.Getenv
	if s.redis != "" || s.nats != "" {
		env = func(k string) string {
			switch {
			case k == "COALESCE_REDIS_URL" && s.redis != "":
				return s.redis
			case k == config.SourceOf("COALESCE_REDIS_URL") && s.redis != "":
				return "--redis"
			case k == "COALESCE_REDIS_ADDRS" && s.redis != "":
				return ""
			case k == "COALESCE_NATS_URL" && s.nats != "":
				return s.nats
			case k == config.SourceOf("COALESCE_NATS_URL") && s.nats != "":
				return "--nats"
			}
			return os.Getenv(k)
		}
	}
	cfg, err := config.Load(s.config, env)
	if err != nil {
		return nil, err
	}
	if s.redis != "" {
		cfg.Redis.Addrs, cfg.Redis.SentinelMaster = nil, ""
	}
	return cfg, nil
}

// localDaemonServers points a client command with no servers configured at
// the embedded servers of a `coalesce serve` on this machine.
// It reads where they listen from the data folder's servers file (written
// by serve, so a daemon moved with --redis-listen or --nats-listen is
// found), else takes the default addresses. It returns where it looked.
func localDaemonServers(cfg *config.Config) string {
	if !cfg.UsesEmbedded() {
		return ""
	}
	// Only the halves that are not configured: a daemon on a real Redis
	// with the embedded NATS (or the reverse) is found the same way.
	redisURL := "redis://" + cfg.Embedded.RedisListen + "/0"
	natsURL := "nats://" + cfg.Embedded.NATSListen
	from := "the default addresses"
	if f, err := daemon.ReadServersFile(cfg.Embedded.DataDir); err == nil {
		redisURL, natsURL = f.Redis, f.NATS
		from = filepath.Join(cfg.Embedded.DataDir, daemon.ServersFileName)
	}
	if cfg.EmbeddedRedis() {
		cfg.Redis.URL = redisURL
	}
	if cfg.EmbeddedNATS() {
		cfg.NATS.URLs = []string{natsURL}
	}
	return from
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, usagef("--log-format %q: use text or json", format)
	}
}

const serveSynopsis = `serve [--config FILE] [--redis URL --nats URL] [--http ADDR]

Runs the coalescing daemon: HTTP API v1 (POST /v1/events, /v1/events:batch,
/v1/explain, GET/DELETE /v1/rounds/{type}/{key}, GET /v1/policies, /metrics,
/healthz, /readyz), NATS intake (request/reply on <prefix>.events.<type>, and
with nats.ingest.durable the stream <prefix>.ingest.<type>), and cron rules.

With no Redis and no NATS configured it runs in single-node development mode:
an in-process NATS JetStream (store in --data) and an in-process Redis, on
--nats-listen and --redis-listen, so workers and CLIs on this machine connect
to them as to real servers. For production give --redis and --nats (NATS 2.12
or later; Redis 7 with maxmemory-policy noeviction), or redis/nats in the file.

SIGTERM or Ctrl-C: stop taking events, finish the decisions under way, exit.`

// envHelp lists the environment overrides, for --help.
func envHelp() string {
	var b strings.Builder
	b.WriteString("\n\nEnvironment (wins over the file; keep secrets here):")
	for _, v := range config.EnvVars() {
		fmt.Fprintf(&b, "\n  %-24s %s", v.Name, v.Description)
	}
	return b.String()
}

func runServe(ctx context.Context, args []string, _ io.Reader, _, stderr io.Writer) error {
	fs := newFlags("serve", serveSynopsis+envHelp(), stderr)
	var sf serverFlags
	sf.register(fs)
	httpAddr := fs.String("http", "", "HTTP listen address (default from the file, else 127.0.0.1:8080)")
	natsListen := fs.String("nats-listen", "", "development mode: where the in-process NATS listens (default 127.0.0.1:4222)")
	redisListen := fs.String("redis-listen", "", "development mode: where the in-process Redis listens (default 127.0.0.1:6379)")
	dataDir := fs.String("data", "", "development mode: the NATS store folder (default ./coalesce-data)")
	reapEvery := fs.Duration("reap-every", 0, "how often to release rounds reserved and never published (a producer died in between), and look for rounds whose job the stream lost; default 1m")
	repairAfter := fs.Duration("repair-after", 0, "a round not taken this long past its due time is looked up in the stream, and its job published again if the stream lost it; default 1m")
	refuse := fs.Bool("refuse-eviction", false, "refuse to start when Redis may evict keys (maxmemory-policy allkeys-*); default: warn")
	refusePersist := fs.Bool("refuse-no-persistence", false, "refuse to start when Redis has neither AOF nor RDB persistence (a restart would lose every round); default: warn")
	record := fs.String("record", "", "append every event accepted to this file (NDJSON), an event log for coalesce simulate; off by default")
	recordLimit := fs.String("record-limit", "1GiB", "stop recording when the --record file reaches this size (1GiB, 100MB, ...)")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	cfg, err := sf.load()
	if err != nil {
		return err
	}
	if *httpAddr != "" {
		cfg.HTTP.Listen = *httpAddr
	}
	if *natsListen != "" {
		cfg.Embedded.NATSListen = *natsListen
	}
	if *redisListen != "" {
		cfg.Embedded.RedisListen = *redisListen
	}
	if *dataDir != "" {
		cfg.Embedded.DataDir = *dataDir
	}
	if *refusePersist {
		cfg.Redis.Persistence = config.EvictionRefuse
	}
	if len(cfg.Policies) == 0 {
		log.Warn("no policies configured: every event will be refused with 404 no_policy; add policies to a --config file (see README)")
	}
	limit, ok := config.ParseSize(*recordLimit)
	if !ok || limit <= 0 {
		return usagef("--record-limit %q: give a size such as 1GiB or 100MB", *recordLimit)
	}
	tracing, err := telemetry.FromEnv(ctx, "coalesce")
	if err != nil {
		return err
	}
	defer shutdownTracing(tracing, log)
	err = daemon.Run(ctx, daemon.Options{Config: cfg, Logger: log, RefuseEviction: *refuse, ReapEvery: *reapEvery, RepairAfter: *repairAfter, Tracing: tracing,
		Record: *record, RecordLimit: limit})
	if err != nil {
		return fmt.Errorf("%s", strings.TrimSpace(err.Error()))
	}
	return nil
}
