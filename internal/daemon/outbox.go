package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/config"
	"github.com/coalesce-io/coalesce/internal/redact"
	"github.com/coalesce-io/coalesce/outbox"
)

// outboxMetrics are the relay's series, registered only when an outbox is
// configured.
type outboxMetrics struct {
	rows    *prometheus.CounterVec
	lag     *prometheus.HistogramVec
	backlog prometheus.Gauge
	oldest  prometheus.Gauge
}

func newOutboxMetrics(m *Metrics) *outboxMetrics {
	om := &outboxMetrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coalesce_outbox_rows_total",
			Help: "Outbox rows handled by the relay, by job type and result (relayed: decided and removed; dead: moved to coalesce_outbox_dead; retried: left for a later pass by a Redis or NATS outage)."}, []string{"type", "result"}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coalesce_outbox_lag_seconds",
			Help:    "From an outbox row's insert (the database's clock) to its decision.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}}, []string{"type"}),
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{Name: "coalesce_outbox_backlog_rows",
			Help: "Rows waiting in coalesce_outbox, counted every few seconds."}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{Name: "coalesce_outbox_oldest_row_seconds",
			Help: "Age of the oldest row waiting in coalesce_outbox."}),
	}
	m.Registry.MustRegister(om.rows, om.lag, om.backlog, om.oldest)
	m.later = append(m.later, om.rows, om.lag, om.backlog, om.oldest)
	return om
}

func (om *outboxMetrics) hooks(m *Metrics) outbox.Hooks {
	return outbox.Hooks{
		Relayed: func(row outbox.Row, _ debounce.Decision, lag time.Duration) {
			t := m.typ(row.Event.Type)
			om.rows.WithLabelValues(t, "relayed").Inc()
			om.lag.WithLabelValues(t).Observe(lag.Seconds())
		},
		Dead:  func(row outbox.Row, _ error) { om.rows.WithLabelValues(m.typ(row.Event.Type), "dead").Inc() },
		Retry: func(row outbox.Row, _ error) { om.rows.WithLabelValues(m.typ(row.Event.Type), "retried").Inc() },
		Backlog: func(rows int64, oldest time.Duration) {
			om.backlog.Set(float64(rows))
			om.oldest.Set(oldest.Seconds())
		},
	}
}

// StartOutbox starts the relay of cfg.Outbox, if one is configured, on a
// Coalescer of its own whose policies fail closed (a Redis outage keeps the
// rows in the outbox; a bypass would take them out unreserved). stop ends
// it after its pass under way.
func StartOutbox(ctx context.Context, cfg *config.Config, c *Conns, m *Metrics, log *slog.Logger) (stop func(), err error) {
	oc := cfg.Outbox
	if oc.Postgres == "" {
		return func() {}, nil
	}
	durable, err := outboxStore(ctx, cfg, c, log)
	if err != nil {
		return nil, err
	}
	where := redact.URL(oc.Postgres)
	pool, err := pgxpool.New(ctx, oc.Postgres)
	if err != nil {
		return nil, fmt.Errorf("outbox.postgres: %s: %w", where, err)
	}
	fail := func(err error) (func(), error) {
		pool.Close()
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		return fail(fmt.Errorf("outbox.postgres: %s: %w (check the address, credentials and TLS settings)", where, err))
	}
	if oc.Migrate {
		if err := outbox.Migrate(pctx, pool); err != nil {
			return fail(fmt.Errorf("outbox.postgres: %s: %w", where, err))
		}
	} else if err := outboxTablesExist(pctx, pool); err != nil {
		return fail(fmt.Errorf("outbox.postgres: %s: %w", where, err))
	}
	dcfg := debounce.Config{Redis: c.Redis, Publisher: c.Publisher, Policies: outbox.FailClosed(cfg.Policies),
		Prefix: cfg.Redis.Prefix, Logger: log}
	cfg.Local.Apply(&dcfg)
	cfg.Redis.Replicas.Apply(&dcfg)
	cfg.Redis.ApplySchedules(&dcfg)
	if m != nil {
		dcfg.Hooks = m.DebounceHooks()
	}
	co, err := debounce.New(dcfg)
	if err != nil {
		return fail(err)
	}
	rcfg := outbox.Config{Pool: pool, Coalescer: co, BatchSize: oc.BatchSize, Concurrency: oc.Concurrency,
		PollEvery: oc.PollEvery, Logger: log}
	if durable != nil {
		rcfg.Durable = func(ctx context.Context) error {
			// Locally joined rows reach the store with the flush.
			if err := co.Flush(ctx); err != nil {
				return err
			}
			return durable()
		}
	}
	if m != nil {
		rcfg.Hooks = newOutboxMetrics(m).hooks(m)
	}
	relay, err := outbox.New(rcfg)
	if err != nil {
		return fail(err)
	}
	rctx, cancelRelay := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { _ = relay.Run(rctx) })
	log.Info("outbox relay started", "postgres", where, "table", "coalesce_outbox", "channel", outbox.Channel)
	var once sync.Once
	return func() {
		once.Do(func() {
			cancelRelay()
			wg.Wait()
			// The relay's locally joined rows' counts go to Redis.
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = co.Flush(fctx)
			cancel()
			pool.Close()
		})
	}, nil
}

// outboxStore checks that the store the relay decides into keeps what it
// is told: the relay deletes a row once decided, so a store that loses the
// decision loses the row's event for good. The embedded Redis is durable
// once its journal is fsynced: durable is that barrier, for the relay to
// call before it deletes rows. A Redis with neither AOF nor RDB, or one
// that does not say, is refused unless outbox.allow_non_durable_redis.
func outboxStore(ctx context.Context, cfg *config.Config, c *Conns, log *slog.Logger) (durable func() error, err error) {
	if c.Embedded {
		if c.Dev == nil || !c.Dev.RedisPersisted() {
			return nil, errors.New("outbox: the embedded Redis keeps its data in memory only, so the relay would delete rows whose decisions a restart loses; give it a data folder (embedded.data_dir)")
		}
		return c.Dev.SyncRedis, nil
	}
	info, _ := debounce.CheckServer(ctx, c.Redis) // its eviction and version findings are Connect's
	allow := cfg.Outbox.AllowNonDurableRedis
	var problem string
	switch p := info.Persistence; {
	case p == nil:
		problem = "the relay cannot tell whether Redis keeps its data across a restart (CONFIG GET appendonly/save is not answered)"
	case p.None():
		problem = "Redis has neither AOF nor RDB persistence (appendonly no, save \"\"), so a restart of it loses the decisions of rows the relay has already deleted"
	case !p.AOF:
		log.Warn("outbox: Redis keeps its data in RDB snapshots only (save "+p.Save+"): a restart of it loses the decisions made since the last snapshot, whose rows the relay has deleted; turn on appendonly yes",
			"redis_persistence", p.String())
	}
	switch {
	case problem == "":
		return nil, nil
	case allow:
		log.Warn("outbox: " + problem + "; relaying anyway because outbox.allow_non_durable_redis is true: committed events can be lost")
		return nil, nil
	}
	return nil, fmt.Errorf("outbox: %s. Turn on appendonly yes (appendfsync everysec, or always to survive a crash of the machine too) on that Redis, or, knowing that committed events can then be lost, set outbox.allow_non_durable_redis: true", problem)
}

// outboxTablesExist refuses to relay from a database the migration has not
// set up, saying how to set it up.
func outboxTablesExist(ctx context.Context, pool *pgxpool.Pool) error {
	var outboxOK, deadOK, deadKeyed bool
	err := pool.QueryRow(ctx, `SELECT to_regclass('coalesce_outbox') IS NOT NULL, to_regclass('coalesce_outbox_dead') IS NOT NULL,
		EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('coalesce_outbox_dead') AND attname = 'dead_id' AND NOT attisdropped)`).Scan(&outboxOK, &deadOK, &deadKeyed)
	if err != nil {
		return err
	}
	if !outboxOK || !deadOK {
		return fmt.Errorf("the outbox tables do not exist there: run `coalesce outbox migrate --postgres URL` (or apply outbox/schema.sql with your migrations), or set outbox.migrate: true")
	}
	if !deadKeyed {
		// Schema 1 keyed dead rows by the outbox id: once the outbox's ids
		// start over, a poison row would leave both tables.
		return fmt.Errorf("the outbox tables there are schema 1 (coalesce_outbox_dead has no dead_id); this relay needs schema %d: run `coalesce outbox migrate --postgres URL` (or apply outbox/schema.sql), or set outbox.migrate: true", outbox.SchemaVersion)
	}
	return nil
}
