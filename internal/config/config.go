// Package config reads the daemon's YAML configuration file and environment
// overrides, and refuses unknown keys and invalid values with the file, line,
// key path and what to change.
package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// Defaults, taken where the file and the environment leave a value unset.
const (
	DefaultRedisPrefix         = debounce.DefaultPrefix
	DefaultEviction            = EvictionWarn
	DefaultNATSStream          = "COALESCE" // as publisher.DefaultStream
	DefaultNATSPrefix          = "co"       // as publisher.DefaultPrefix
	DefaultNATSReplicas        = 1
	DefaultNATSStorage         = StorageFile
	DefaultNATSMaxAge          = debounce.DefaultMaxAge // a job waits this long for a worker; its round lives as long
	DefaultIngestStream        = "COALESCE_INGEST"
	DefaultHTTPListen          = "127.0.0.1:8080"
	DefaultBodyLimit           = 1 << 20 // 1 MiB
	DefaultReadTimeout         = 10 * time.Second
	DefaultWriteTimeout        = 30 * time.Second
	DefaultEmbeddedNATSListen  = "127.0.0.1:4222"
	DefaultEmbeddedRedisListen = "127.0.0.1:6379"
	DefaultDataDir             = "./coalesce-data"
	DefaultTimezone            = "UTC"
)

// Limits.
const (
	// MaxFileSize is the largest configuration file read; larger files are
	// refused before parsing.
	MaxFileSize = 1 << 20
	// MaxBodyLimit is the largest http.body_limit accepted.
	MaxBodyLimit = 1 << 30
	// maxAliasNodes is how many nodes YAML aliases may add to the document:
	// enough for any real use of anchors, too few for an alias bomb.
	maxAliasNodes = 100_000
	// maxAuxFile bounds the TLS, creds and nkey files read.
	maxAuxFile = 1 << 20
)

// Values of Redis.Eviction and Redis.Persistence.
const (
	EvictionWarn   = "warn"   // log a warning at start when Redis may evict reservations (or keeps nothing across a restart)
	EvictionRefuse = "refuse" // refuse to start
)

// Values of NATS.Storage.
const (
	StorageFile   = "file"
	StorageMemory = "memory" // lost, with every pending round, when the server restarts
)

// Config is the daemon's configuration: the file's values over the defaults,
// with environment overrides on top.
//
// The yaml tags name each field's key in the file and are all the decoder
// needs: a new key is a tagged field (a string or named string type, bool,
// int, time.Duration, []string, []time.Duration or a tagged struct; ",size"
// reads "1MiB" into an int64) and its check in validate.go. ",custom" marks
// the few keys decode.go reads by hand (policies, cron and its args, the
// Redis and NATS address lists). The fields' order is the order the
// "unknown key (known: ...)" messages list them in.
type Config struct {
	Redis    Redis    `yaml:"redis"`
	NATS     NATS     `yaml:"nats"`
	HTTP     HTTP     `yaml:"http"`
	Embedded Embedded `yaml:"embedded"`
	// Policies come from the `policies:` mapping, keyed by job type, in file
	// order, with debounce defaults applied (Policy.WithDefaults).
	Policies []debounce.Policy `yaml:"policies,custom"`
	Cron     []CronRule        `yaml:"cron,custom"`
	Worker   Worker            `yaml:"worker"`
	Local    LocalJoins        `yaml:"local_joins"`
	Outbox   Outbox            `yaml:"outbox"`
	Source   string            `yaml:"-"` // file the config came from ("" when none)
}

// TLS configures a client connection's TLS (YAML: enabled, ca_file,
// cert_file, key_file, insecure_skip_verify).
type TLS struct {
	Enabled            bool   `yaml:"enabled"`   // connect with TLS
	CAFile             string `yaml:"ca_file"`   // PEM roots to trust instead of the system's
	CertFile           string `yaml:"cert_file"` // PEM client certificate, with KeyFile
	KeyFile            string `yaml:"key_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"` // do not verify the server's certificate (tests only)
}

// Redis says where reservations are kept: a single node (URL), a Cluster
// (Addrs) or a Sentinel-managed primary (SentinelMaster with Addrs).
type Redis struct {
	URL            string   `yaml:"url"`             // redis://, rediss:// or unix:// (single node)
	Addrs          []string `yaml:"addrs,custom"`    // cluster seed addresses (host:port); mutually exclusive with URL
	SentinelMaster string   `yaml:"sentinel,custom"` // YAML sentinel.master; then Addrs (sentinel.addrs) are the sentinels
	Username       string   `yaml:"username"`        // overrides the URL's user
	Password       string   `yaml:"password"`        // overrides the URL's password
	DB             int      `yaml:"db"`              // overrides the URL's database; 0 with a Cluster
	TLS            TLS      `yaml:"tls"`             // a rediss:// URL turns TLS on by itself
	Prefix         string   `yaml:"prefix"`          // reservation key prefix, default DefaultRedisPrefix
	// Persistence: EvictionWarn (default) or EvictionRefuse when Redis has
	// neither AOF nor RDB persistence, so that a restart loses every round.
	Persistence string `yaml:"persistence"`
	Eviction    string `yaml:"eviction"` // EvictionWarn (default) or EvictionRefuse, when maxmemory-policy is allkeys-*
	// Replicas: whether a decision waits for Redis replicas to confirm it
	// (debounce.Config.Replication).
	Replicas RedisReplicas `yaml:"replicas"`
	// Schedules: where debounce rounds wait for their due time
	// (debounce.Config.Schedules): "auto" (the default: held in Redis on a
	// single node or Sentinel whose Redis has appendonly yes or replica
	// acks, else a JetStream schedule each), "redis" (held in Redis until
	// due whatever its persistence, a forwarder publishes them: 4-6x
	// faster openings; single node or Sentinel) or "jetstream".
	Schedules string `yaml:"schedules"`
}

// ApplySchedules sets where debounce rounds wait on a debounce.Config.
func (r Redis) ApplySchedules(c *debounce.Config) { c.Schedules = debounce.Schedules(r.Schedules) }

// RedisReplicas are the replication acks (debounce.Replication): YAML
// redis.replicas.acks is "auto" (the default: wait for one replica when the
// primary has one), "off", or a number of replicas; timeout bounds each
// wait (default 500ms).
type RedisReplicas struct {
	Acks    string        `yaml:"acks"`
	Timeout time.Duration `yaml:"timeout"`
}

// Values of RedisReplicas.Acks besides a number.
const (
	ReplicasAuto = "auto"
	ReplicasOff  = "off"
)

// Replication is the debounce setting (Acks checked by validation).
func (r RedisReplicas) Replication() debounce.Replication {
	rep := debounce.Replication{Timeout: r.Timeout}
	switch r.Acks {
	case "", ReplicasAuto:
		rep.Acks = debounce.ReplicationAuto
	case ReplicasOff:
		rep.Acks = debounce.ReplicationOff
	default:
		rep.Acks, _ = strconv.Atoi(r.Acks)
	}
	return rep
}

// Apply sets the replication acks on a debounce.Config.
func (r RedisReplicas) Apply(c *debounce.Config) { c.Replication = r.Replication() }

// NATS says which NATS servers carry the jobs and how the stream is set up.
type NATS struct {
	URLs      []string `yaml:"urls,custom"` // YAML `urls` (list) or `url` (a URL or comma-separated URLs)
	CredsFile string   `yaml:"creds_file"`  // user JWT and seed (.creds)
	NKeyFile  string   `yaml:"nkey_file"`   // nkey user seed
	User      string   `yaml:"user"`        // with password
	Password  string   `yaml:"password"`
	Token     string   `yaml:"token"`    // an authentication token
	TLS       TLS      `yaml:"tls"`      // tls:// and wss:// URLs turn TLS on by themselves
	Stream    string   `yaml:"stream"`   // the JetStream stream of schedules, jobs and dead letters
	Prefix    string   `yaml:"prefix"`   // subject prefix
	Replicas  int      `yaml:"replicas"` // 1 to 5
	Storage   string   `yaml:"storage"`  // StorageFile or StorageMemory
	// MaxAge is how long the stream keeps a job no worker has taken (and
	// dead letters); a round lives as long past its latest due time, so its
	// data is there whenever its job starts. DefaultNATSMaxAge, at most
	// debounce.MaxMaxAge.
	MaxAge time.Duration `yaml:"max_age"`
	Ingest Ingest        `yaml:"ingest"`
}

// Ingest says how events arrive over NATS.
type Ingest struct {
	// Subjects (YAML request_reply, default true): answer requests on
	// <prefix>.events.<type> with the decision.
	Subjects bool `yaml:"request_reply"`
	// Durable: also consume a durable ingest stream (at-least-once intake).
	Durable bool   `yaml:"durable"`
	Stream  string `yaml:"stream"` // the durable ingest stream, default DefaultIngestStream
}

// HTTP configures the daemon's HTTP API.
type HTTP struct {
	Listen string   `yaml:"listen"` // host:port, default DefaultHTTPListen
	Tokens []string `yaml:"tokens"` // bearer tokens; empty means no authentication
	// ReadTokens are bearer tokens that may read everything (GET routes,
	// explain, the dashboard's pages) and change nothing: a request with
	// one on a route that acts is refused with 403 read_only.
	ReadTokens []string `yaml:"read_tokens"`
	// UI serves the web dashboard at /ui/: UIAuto (default) serves it when
	// the daemon runs on its embedded servers, UIOn and UIOff always.
	UI string `yaml:"ui"`
	// PublicMetrics serves /metrics without a token even when Tokens are
	// set; by default /metrics takes one whenever the API does.
	PublicMetrics bool `yaml:"public_metrics"`
	// BodyLimit is the largest request body in bytes (YAML: "1MiB",
	// "512KiB", "10MB" or a byte count), default DefaultBodyLimit.
	BodyLimit    int64         `yaml:"body_limit,size"`
	ReadTimeout  time.Duration `yaml:"read_timeout"`
	WriteTimeout time.Duration `yaml:"write_timeout"`
}

// Values of http.ui.
const (
	UIAuto = "auto" // on with the embedded servers, off otherwise
	UIOn   = "on"
	UIOff  = "off"
)

// ServesUI reports whether the daemon serves the web dashboard at /ui/.
func (c *Config) ServesUI() bool {
	return c.HTTP.UI == UIOn || c.HTTP.UI == UIAuto && c.UsesEmbedded()
}

// Embedded configures the in-process NATS and Redis run when neither Redis
// nor NATS is configured (see UsesEmbedded).
type Embedded struct {
	NATSListen  string `yaml:"nats_listen"`  // host:port; port 0 picks a free port
	RedisListen string `yaml:"redis_listen"` // host:port; port 0 picks a free port
	DataDir     string `yaml:"data_dir"`     // JetStream store
}

// CronRule submits an event on a schedule, through the job type's policy.
type CronRule struct {
	Name string `yaml:"name"`
	// Schedule is a robfig/cron/v3 spec with a seconds field, such as
	// "0 */5 * * * *", or a descriptor such as "@every 1m" or "@daily".
	Schedule string          `yaml:"schedule"`
	Timezone string          `yaml:"timezone"`    // IANA name, default DefaultTimezone
	Type     string          `yaml:"type"`        // job type; it must have a policy
	Args     json.RawMessage `yaml:"args,custom"` // the YAML `args` as JSON; {} when absent
	Key      string          `yaml:"key"`         // optional explicit round key
}

// Worker tunes job consumption; zero values take the worker package's
// defaults.
type Worker struct {
	Concurrency int             `yaml:"concurrency"` // jobs run at once (worker.DefaultConcurrency)
	MaxDeliver  int             `yaml:"max_deliver"` // attempts before a job is dead-lettered (worker.DefaultMaxDeliver)
	AckWait     time.Duration   `yaml:"ack_wait"`    // a delivery silent this long is delivered again
	Backoff     []time.Duration `yaml:"backoff"`     // waits before the 2nd, 3rd, ... attempt (the last repeats)
}

// LocalJoins tunes the daemon's local joins (debounce.Config): events of a
// round the daemon knows pending answered without a Redis call, where that
// cannot lose an event, and flushed to Redis within FlushInterval.
type LocalJoins struct {
	Mode          debounce.LocalJoins `yaml:"mode"`           // auto (default) or off
	FlushInterval time.Duration       `yaml:"flush_interval"` // default debounce.DefaultFlushInterval
	ClockSkew     time.Duration       `yaml:"clock_skew"`     // default debounce.DefaultClockSkew
	MaxRounds     int                 `yaml:"max_rounds"`     // default debounce.DefaultMaxLocalRounds
}

// Apply sets these settings on a Coalescer's configuration.
func (l LocalJoins) Apply(c *debounce.Config) {
	c.LocalJoins, c.FlushInterval, c.ClockSkew, c.MaxLocalRounds = l.Mode, l.FlushInterval, l.ClockSkew, l.MaxRounds
}

// Outbox turns on the relay of a Postgres transactional outbox (package
// outbox): rows producers commit to coalesce_outbox are submitted through
// the policies, at least once. Zero values take the outbox package's
// defaults.
type Outbox struct {
	// Postgres is the database's URL (postgres://user:password@host/db, or
	// a key=value DSN); empty: no relay. COALESCE_OUTBOX_POSTGRES overrides it.
	Postgres string `yaml:"postgres"`
	// Migrate creates or upgrades the outbox tables at start; by default
	// the daemon only checks they exist (coalesce outbox migrate makes them).
	Migrate     bool          `yaml:"migrate"`
	BatchSize   int           `yaml:"batch_size"`  // rows claimed per pass
	Concurrency int           `yaml:"concurrency"` // round keys decided at once
	PollEvery   time.Duration `yaml:"poll_every"`  // a pass at least this often without a notification
	// AllowNonDurableRedis lets the relay run on a Redis that may lose its
	// decisions (neither AOF nor RDB, or one that does not say): it deletes
	// each row once decided, so a restart of such a Redis loses the rows'
	// events for good. By default the relay refuses to start there.
	AllowNonDurableRedis bool `yaml:"allow_non_durable_redis"`
}

// Load reads the configuration file at path ("" means none: defaults only),
// applies the environment overrides listed by EnvVars (env nil means
// os.Getenv; an empty variable counts as unset), and validates the result.
// Every problem is reported as an *Error naming the file (or variable), the
// line when known, the key path and what to change; the first one found is
// returned. Unknown keys are refused.
//
// YAML notes: a null value (`key:` or `key: ~`) leaves the default; anchors,
// aliases and merge keys (<<) work, but aliases may add at most 100,000
// nodes; only one document is read; durations are Go durations (30s, 5m,
// 1h30m) plus whole days (2d, 1d12h).
func Load(path string, env func(string) string) (*Config, error) {
	if env == nil {
		env = os.Getenv
	}
	if path == "" {
		return load(nil, "", env)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(data) > MaxFileSize {
		return nil, &Error{File: path, Msg: fmt.Sprintf("larger than %s; a configuration file is refused above that size", formatSize(MaxFileSize))}
	}
	return load(data, path, env)
}

// load parses data (the contents of file) over the defaults.
func load(data []byte, file string, env func(string) string) (*Config, error) {
	c := defaults()
	c.Source = file
	d := newDecoder(file)
	if len(bytes.TrimSpace(data)) > 0 {
		if err := d.document(data, c); err != nil {
			return nil, err
		}
	}
	if err := d.applyEnv(c, env); err != nil {
		return nil, err
	}
	if err := d.validate(c); err != nil {
		return nil, err
	}
	for i, p := range c.Policies {
		c.Policies[i] = p.WithDefaults()
	}
	return c, nil
}

// defaults returns the configuration of an empty file.
func defaults() *Config {
	return &Config{
		Redis: Redis{Prefix: DefaultRedisPrefix, Eviction: DefaultEviction, Persistence: DefaultEviction},
		NATS: NATS{
			Stream:   DefaultNATSStream,
			Prefix:   DefaultNATSPrefix,
			Replicas: DefaultNATSReplicas,
			Storage:  DefaultNATSStorage,
			MaxAge:   DefaultNATSMaxAge,
			Ingest:   Ingest{Subjects: true, Stream: DefaultIngestStream},
		},
		HTTP: HTTP{
			Listen:       DefaultHTTPListen,
			UI:           UIAuto,
			BodyLimit:    DefaultBodyLimit,
			ReadTimeout:  DefaultReadTimeout,
			WriteTimeout: DefaultWriteTimeout,
		},
		Embedded: Embedded{
			NATSListen:  DefaultEmbeddedNATSListen,
			RedisListen: DefaultEmbeddedRedisListen,
			DataDir:     DefaultDataDir,
		},
	}
}

// Types are the job types the policies name, in file order.
func (c *Config) Types() []string {
	out := make([]string, len(c.Policies))
	for i, p := range c.Policies {
		out[i] = p.Type
	}
	return out
}

// UsesEmbedded reports whether Redis or NATS is not configured, so the
// daemon runs an embedded development server for what is missing (both,
// or one beside the real other: EmbeddedRedis, EmbeddedNATS).
func (c *Config) UsesEmbedded() bool { return c.EmbeddedRedis() || c.EmbeddedNATS() }

// EmbeddedRedis reports whether no Redis is configured: the daemon runs an
// in-process one.
func (c *Config) EmbeddedRedis() bool { return !c.Redis.configured() }

// EmbeddedNATS reports whether no NATS is configured: the daemon runs an
// in-process JetStream server.
func (c *Config) EmbeddedNATS() bool { return !c.NATS.configured() }

func (r *Redis) configured() bool { return r.URL != "" || len(r.Addrs) > 0 }
func (n *NATS) configured() bool  { return len(n.URLs) > 0 }
