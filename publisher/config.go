package publisher

import (
	"cmp"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/coalesce-io/coalesce/debounce"
)

// Defaults of Config, taken where a field is zero.
const (
	DefaultStream     = "COALESCE"
	DefaultPrefix     = "co"
	DefaultReplicas   = 1
	DefaultDuplicates = 10 * time.Minute // Nats-Msg-Id window: a re-publish of a round version inside it is dropped
	DefaultRetention  = RetentionWorkQueue
	DefaultStorage    = StorageFile
	// DefaultMaxAge is how long the stream keeps a job no worker has taken
	// (debounce.DefaultMaxAge): rounds live as long, so a job that starts
	// within it finds its round's data.
	DefaultMaxAge       = debounce.DefaultMaxAge
	DefaultAckTimeout   = 5 * time.Second // wait for one publish ack before trying again
	DefaultMaxAttempts  = 5
	DefaultRetryBackoff = 50 * time.Millisecond // first pause between attempts; doubles up to MaxRetryBackoff
	MaxRetryBackoff     = 2 * time.Second
	// MinServerVersion is the oldest nats-server with message schedules
	// (ADR-51). Older servers store schedule messages and never fire them.
	MinServerVersion = "2.12.0"
)

// Retention is the stream's retention policy.
type Retention string

// Retention policies. Interest is refused: the server never fires the
// schedules of an Interest stream.
const (
	RetentionWorkQueue Retention = "workqueue" // a job is removed once a worker acks it
	RetentionLimits    Retention = "limits"    // jobs stay until MaxAge (or other limits)
	RetentionInterest  Retention = "interest"  // refused
)

// Storage is where the stream keeps its messages.
type Storage string

// Storage kinds.
const (
	StorageFile   Storage = "file"
	StorageMemory Storage = "memory" // lost, with every pending schedule, when the server restarts
)

// Config configures a Publisher. The zero value takes the defaults above.
type Config struct {
	Stream     string        // stream name; DefaultStream
	Prefix     string        // subject prefix; DefaultPrefix (see Subjects)
	Replicas   int           // stream replicas; DefaultReplicas
	Duplicates time.Duration // duplicate (Nats-Msg-Id) window; DefaultDuplicates
	Retention  Retention     // DefaultRetention; Limits allowed, Interest refused
	Storage    Storage       // DefaultStorage
	// MaxAge is the oldest message kept (jobs waiting for a worker, dead
	// letters): DefaultMaxAge, at most debounce.MaxMaxAge. The Coalescer
	// keeps each round as long past its due time (debounce.Config.MaxAge).
	MaxAge time.Duration

	AckTimeout   time.Duration // per-attempt wait for the stream's ack; DefaultAckTimeout
	MaxAttempts  int           // attempts per publish on stalls, timeouts and no responders; DefaultMaxAttempts
	RetryBackoff time.Duration // first pause between attempts; DefaultRetryBackoff

	Logger    *slog.Logger      // nil discards
	OnPublish func(PublishInfo) // metrics hook, called once per Publish after it ends; must not block
	Now       func() time.Time  // clock deciding whether a due time has passed; time.Now
}

// PublishInfo describes one finished Publish, for metrics.
type PublishInfo struct {
	JobType   string
	Subject   string        // schedule subject, or job subject when published at once
	Scheduled bool          // sent as a message schedule
	Duplicate bool          // the stream already held this round version (Nats-Msg-Id)
	Attempts  int           // sends, 1 when nothing was retried
	Latency   time.Duration // from the call to the ack or the final error
	Err       error
}

func (c Config) withDefaults() Config {
	c.Stream = cmp.Or(c.Stream, DefaultStream)
	c.Prefix = cmp.Or(c.Prefix, DefaultPrefix)
	c.Replicas = cmp.Or(c.Replicas, DefaultReplicas)
	c.Duplicates = cmp.Or(c.Duplicates, DefaultDuplicates)
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	c.MaxAge = cmp.Or(c.MaxAge, DefaultMaxAge)
	c.Storage = cmp.Or(c.Storage, DefaultStorage)
	c.AckTimeout = cmp.Or(c.AckTimeout, DefaultAckTimeout)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, DefaultRetryBackoff)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// validate says what is wrong with a config that has its defaults.
func (c Config) validate() error {
	if c.Stream == "" || len(c.Stream) > 255 || strings.ContainsAny(c.Stream, ".*>/\\ \t\r\n") {
		return fmt.Errorf("%w: Stream %q must be 1-255 characters without . * > / \\ or whitespace", ErrInvalidConfig, c.Stream)
	}
	if err := validatePrefix(c.Prefix); err != nil {
		return err
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		return fmt.Errorf("%w: Replicas %d must be 1 to 5", ErrInvalidConfig, c.Replicas)
	}
	if c.Duplicates < 0 {
		return fmt.Errorf("%w: Duplicates %v must not be negative", ErrInvalidConfig, c.Duplicates)
	}
	if c.MaxAge < time.Second || c.MaxAge > debounce.MaxMaxAge {
		return fmt.Errorf("%w: MaxAge %v must be between 1s and %v (0 takes the default %v): rounds live as long as their jobs wait in the stream, and no longer than that", ErrInvalidConfig, c.MaxAge, debounce.MaxMaxAge, DefaultMaxAge)
	}
	if c.MaxAge > 0 && c.Duplicates > c.MaxAge {
		return fmt.Errorf("%w: Duplicates %v must not exceed MaxAge %v", ErrInvalidConfig, c.Duplicates, c.MaxAge)
	}
	switch c.Retention {
	case RetentionWorkQueue, RetentionLimits:
	case RetentionInterest:
		return fmt.Errorf("%w: Retention %q never fires message schedules; use %q or %q", ErrInvalidConfig, c.Retention, RetentionWorkQueue, RetentionLimits)
	default:
		return fmt.Errorf("%w: Retention %q is not %q or %q", ErrInvalidConfig, c.Retention, RetentionWorkQueue, RetentionLimits)
	}
	if c.Storage != StorageFile && c.Storage != StorageMemory {
		return fmt.Errorf("%w: Storage %q is not %q or %q", ErrInvalidConfig, c.Storage, StorageFile, StorageMemory)
	}
	if c.AckTimeout < 0 || c.RetryBackoff < 0 || c.MaxAttempts < 0 {
		return fmt.Errorf("%w: AckTimeout, RetryBackoff and MaxAttempts must not be negative", ErrInvalidConfig)
	}
	return nil
}

// streamConfig is the stream Provision creates or updates.
func (c Config) streamConfig() jetstream.StreamConfig {
	sc := jetstream.StreamConfig{
		Name:              c.Stream,
		Description:       "coalesce: round schedules, jobs and dead letters",
		Subjects:          Subjects{Prefix: c.Prefix}.Stream(),
		Retention:         jetstream.WorkQueuePolicy,
		Storage:           jetstream.FileStorage,
		Replicas:          c.Replicas,
		Duplicates:        c.Duplicates,
		MaxAge:            c.MaxAge,
		Discard:           jetstream.DiscardOld, // the server refuses DiscardNew with schedules
		AllowMsgSchedules: true,
		AllowRollup:       true, // implied by schedules; set so the echoed config matches
	}
	if c.Retention == RetentionLimits {
		sc.Retention = jetstream.LimitsPolicy
	}
	if c.Storage == StorageMemory {
		sc.Storage = jetstream.MemoryStorage
	}
	return sc
}
