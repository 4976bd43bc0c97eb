package debounce

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coalesce-io/coalesce/fingerprint"
)

// Mode is how a job type's events become rounds.
type Mode string

// Modes.
const (
	// ModeDedup publishes the first event's job at once and drops the
	// duplicates that arrive while the reservation holds (see Until).
	ModeDedup Mode = "dedup"
	// ModeThrottle publishes the first event of each window at once (the
	// leading edge) and drops the rest, or with Trailing gathers them into
	// one more job at the window's end, whose start opens the next window:
	// the window stays closed until then (events in between join it).
	ModeThrottle Mode = "throttle"
	// ModeDebounce schedules one job Window after the first event; events
	// until it starts join it. With Extend, each event pushes the job to
	// Window after itself, but never past MaxWait after the first event.
	ModeDebounce Mode = "debounce"
)

// Payload is which args the job of a round receives.
type Payload string

// Payload kinds.
const (
	PayloadFirst Payload = "first" // args of the event that opened the round
	PayloadLast  Payload = "last"  // args of the latest event, taken at release
	// PayloadAccumulate: every distinct args (or ItemField of them). Reaching
	// MaxItems fires the round at once; items that arrive before its job
	// starts still join it, so MaxItems is a trigger, not a hard cap.
	PayloadAccumulate Payload = "accumulate"
)

// Until is when a dedup reservation is released.
type Until string

// Release points of a dedup reservation.
const (
	UntilStart   Until = "start"   // when the job starts: duplicates during the run are new work
	UntilSuccess Until = "success" // when the job succeeds: retries keep duplicates out
	UntilExpiry  Until = "expiry"  // never early: TTL is the dedup window
)

// FailMode is what Submit does when Redis cannot be reached.
type FailMode string

// Store failure modes.
const (
	FailOpen   FailMode = "open"   // publish anyway without a reservation (outcome bypassed): duplicates, nothing lost
	FailClosed FailMode = "closed" // return ErrStoreUnavailable and publish nothing
)

// Defaults and limits.
const (
	// DefaultMaxAge is how long a round waits for its job by default: the
	// stream keeps an unconsumed job this long (publisher.DefaultMaxAge), and
	// a round lives this long past its latest due time, so its data is there
	// whenever its job starts, however long the workers are away.
	DefaultMaxAge = 7 * 24 * time.Hour
	// MaxMaxAge is the longest MaxAge accepted.
	MaxMaxAge = 30 * 24 * time.Hour
	// MinWindow is the shortest debounce window or trailing throttle window:
	// schedules fire up to ~0.5 s late, so shorter windows cannot be honoured.
	MinWindow = time.Second
	// MaxWindow bounds a window or max_wait: a round's due time is at most
	// this far after its first event.
	MaxWindow = 30 * 24 * time.Hour
	// DefaultLease is an exclusive key's lease; MinLease and MaxLease
	// bound Policy.Lease.
	DefaultLease = 30 * time.Second
	MinLease     = time.Second
	MaxLease     = time.Hour
	// DefaultMaxItems caps an accumulated payload.
	DefaultMaxItems = 1000
	// MaxTTL is the longest dedup window (until expiry) accepted, and the
	// longest lifetime a job may carry (MaxWindow + MaxMaxAge).
	MaxTTL = MaxWindow + MaxMaxAge
)

// Policy says how the events of one job type become jobs. The zero values of
// the optional fields take the defaults above; Validate says what is wrong.
// The yaml tags are the keys of a policy in the daemon's configuration file
// (and the field names PolicyError uses); durations there are Go durations
// such as "30s".
type Policy struct {
	Type string `yaml:"-"`    // job type, as in fingerprint.ValidateType
	Mode Mode   `yaml:"mode"` // debounce, dedup or throttle (required)

	// Window: debounce delay (from the first event, or from each event with
	// Extend); throttle window length. Not used by dedup.
	Window time.Duration `yaml:"window"`
	// TTL is the dedup window of a dedup policy with Until expiry (required
	// there). Every other round lives until its job starts: Config.MaxAge
	// past its latest due time, so TTL must be left zero. Throttle: leave
	// zero; the window is the TTL.
	TTL time.Duration `yaml:"ttl"`
	// Extend (debounce only): each event pushes the due time to event+Window,
	// capped at first event+MaxWait. MaxWait is then required.
	Extend  bool          `yaml:"extend"`
	MaxWait time.Duration `yaml:"max_wait"`

	Payload   Payload `yaml:"payload"`    // default first
	MaxItems  int     `yaml:"max_items"`  // accumulate: reaching it fires the round now (default DefaultMaxItems); later items ride along until the job starts
	ItemField string  `yaml:"item_field"` // accumulate: collect this top-level member of args instead of the whole args

	// KeyFields: top-level members of args that identify the effect (say
	// tenant_id); empty means all of args. An event's explicit key overrides.
	KeyFields []string `yaml:"key_fields"`

	Until    Until    `yaml:"until"`    // dedup only; default start
	Trailing bool     `yaml:"trailing"` // throttle only: one more job at the window's end for the events dropped
	Fail     FailMode `yaml:"fail"`     // default open

	// Exclusive: at most one job of a key runs at a time, across every
	// worker (exclusive.go). A job whose key is busy waits, without it
	// counting as an attempt, and starts after the running one ends. Its
	// round is still closed at start: events during the run open the next
	// round, whose job waits.
	Exclusive bool `yaml:"exclusive"`
	// Lease (exclusive only) is how long a running job holds its key
	// without refreshing it (workers refresh it while the job runs): a
	// crashed worker blocks the key at most this long. DefaultLease.
	Lease time.Duration `yaml:"lease"`

	// LocalJoins: "off" sends every event of this type to Redis; the
	// default ("auto") answers locally where that cannot lose an event
	// (local.go), unless Config.LocalJoins turns it off for all types;
	// "on" (payload last, fixed window) also answers an event once its
	// args are in its round's payload key, one plain SET instead of a
	// script (lastkey.go): every producer and worker of the type must run
	// a version with payload keys and this setting, on a single-node or
	// Sentinel Redis.
	LocalJoins LocalJoins `yaml:"local_joins"`
}

// PolicyError says which field of which policy is wrong and what to change.
type PolicyError struct {
	Type  string // job type of the policy ("" if that is what is missing)
	Field string // policy field, as in the daemon's YAML: mode, window, ttl, ...
	Msg   string
}

func (e *PolicyError) Error() string {
	t := e.Type
	if t == "" {
		t = "(no type)"
	}
	return fmt.Sprintf("policy %s: %s: %s", t, e.Field, e.Msg)
}

// Unwrap lets errors.Is match ErrInvalidPolicy.
func (e *PolicyError) Unwrap() error { return ErrInvalidPolicy }

// WithDefaults returns the policy with its zero optional fields filled in.
func (p Policy) WithDefaults() Policy {
	if p.Payload == "" {
		p.Payload = PayloadFirst
	}
	if p.Fail == "" {
		p.Fail = FailOpen
	}
	if p.Exclusive && p.Lease == 0 {
		p.Lease = DefaultLease
	}
	if p.Payload == PayloadAccumulate && p.MaxItems == 0 {
		p.MaxItems = DefaultMaxItems
	}
	switch p.Mode {
	case ModeDedup:
		if p.Until == "" {
			p.Until = UntilStart
		}
	case ModeThrottle:
		if p.TTL == 0 {
			p.TTL = p.Window
		}
	}
	return p
}

// latestDue is the longest a round can wait from its first event.
func (p Policy) latestDue() time.Duration {
	if p.Extend {
		return p.MaxWait
	}
	return p.Window
}

// Validate checks a policy, with its defaults filled in (WithDefaults), and
// returns a *PolicyError for the first problem, saying what to change.
func (p Policy) Validate() error {
	p = p.WithDefaults()
	bad := func(field, format string, args ...any) error {
		return &PolicyError{Type: p.Type, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if err := fingerprint.ValidateType(p.Type); err != nil {
		return bad("type", "%s", strings.TrimPrefix(err.Error(), "type: "))
	}
	switch p.Mode {
	case ModeDedup, ModeThrottle, ModeDebounce:
	case "":
		return bad("mode", "missing; set dedup, throttle or debounce")
	default:
		return bad("mode", "%q is not a mode; use dedup, throttle or debounce", p.Mode)
	}
	switch p.Payload {
	case PayloadFirst, PayloadLast, PayloadAccumulate:
	default:
		return bad("payload", "%q is not a payload; use first, last or accumulate", p.Payload)
	}
	switch p.Fail {
	case FailOpen, FailClosed:
	default:
		return bad("fail", "%q is not a failure mode; use open or closed", p.Fail)
	}
	for i, f := range p.KeyFields {
		if f == "" {
			return bad("key_fields", "entry %d is empty; list top-level member names such as tenant_id", i)
		}
		if slices.Contains(p.KeyFields[:i], f) {
			return bad("key_fields", "%q is listed twice", f)
		}
	}
	if p.TTL < 0 || p.Window < 0 || p.MaxWait < 0 {
		return bad("ttl", "durations must not be negative")
	}
	if p.TTL > MaxTTL {
		return bad("ttl", "%v is longer than the %v limit", p.TTL, MaxTTL)
	}
	if p.Window > MaxWindow {
		return bad("window", "%v is longer than the %v limit", p.Window, MaxWindow)
	}
	if p.MaxWait > MaxWindow {
		return bad("max_wait", "%v is longer than the %v limit", p.MaxWait, MaxWindow)
	}
	if p.Payload != PayloadAccumulate {
		if p.MaxItems != 0 {
			return bad("max_items", "only applies to payload accumulate; remove it or set payload: accumulate")
		}
		if p.ItemField != "" {
			return bad("item_field", "only applies to payload accumulate; remove it or set payload: accumulate")
		}
	} else if p.MaxItems < 1 {
		return bad("max_items", "%d must be at least 1", p.MaxItems)
	}
	switch p.LocalJoins {
	case LocalJoinsAuto, "auto", LocalJoinsOff:
	case LocalJoinsOn:
		if p.Mode != ModeDebounce || p.Payload != PayloadLast || p.Extend {
			return bad("local_joins", "on applies to debounce with payload last and a fixed window (no extend); use auto")
		}
	default:
		return bad("local_joins", "%q is not a setting; use auto, on or off", p.LocalJoins)
	}
	if !p.Exclusive && p.Lease != 0 {
		return bad("lease", "only applies to exclusive policies; remove it or set exclusive: true")
	}
	if p.Exclusive && (p.Lease < MinLease || p.Lease > MaxLease) {
		return bad("lease", "%v is outside %v to %v", p.Lease, MinLease, MaxLease)
	}
	if p.Mode != ModeDedup && p.Until != "" {
		return bad("until", "only applies to mode dedup; remove it")
	}
	if p.Mode != ModeThrottle && p.Trailing {
		return bad("trailing", "only applies to mode throttle; remove it")
	}
	if p.Mode != ModeDebounce && (p.Extend || p.MaxWait != 0) {
		field := "extend"
		if !p.Extend {
			field = "max_wait"
		}
		return bad(field, "only applies to mode debounce; remove it or set mode: debounce")
	}
	switch p.Mode {
	case ModeDedup:
		return p.validateDedup(bad)
	case ModeThrottle:
		return p.validateThrottle(bad)
	default:
		return p.validateDebounce(bad)
	}
}

type badFunc func(field, format string, args ...any) error

func (p Policy) validateDedup(bad badFunc) error {
	switch p.Until {
	case UntilStart, UntilSuccess, UntilExpiry:
	default:
		return bad("until", "%q is not a release point; use start, success or expiry", p.Until)
	}
	if p.Window != 0 {
		return bad("window", "dedup publishes at once and has no window; the dedup window is ttl")
	}
	if p.Until != UntilExpiry {
		if p.TTL != 0 {
			return bad("ttl", "only applies with until: expiry (the dedup window); with until: %s the reservation lives until its job %s, up to the stream's max_age, so no TTL can end it while workers are away: remove ttl", p.Until, map[Until]string{UntilStart: "starts", UntilSuccess: "succeeds"}[p.Until])
		}
	} else if p.TTL == 0 {
		return bad("ttl", "required with until: expiry (it is the dedup window), e.g. ttl: 24h")
	}
	if p.Until == UntilExpiry && p.TTL < time.Millisecond {
		return bad("ttl", "%v is shorter than 1ms", p.TTL)
	}
	if p.Payload != PayloadFirst {
		return bad("payload", "dedup publishes the first event at once; %s needs a delayed round: use mode debounce or throttle with trailing", p.Payload)
	}
	return nil
}

func (p Policy) validateThrottle(bad badFunc) error {
	if p.Window == 0 {
		return bad("window", "required: the throttle window, e.g. window: 10s")
	}
	if p.Window < time.Millisecond {
		return bad("window", "%v is shorter than 1ms", p.Window)
	}
	if p.TTL != p.Window {
		return bad("ttl", "throttle keeps its reservation for exactly the window; remove ttl")
	}
	if p.Trailing && p.Window < MinWindow {
		return bad("window", "%v is too short for a trailing round: schedules fire up to ~0.5s late; use at least %v or drop trailing", p.Window, MinWindow)
	}
	if !p.Trailing && p.Payload != PayloadFirst {
		return bad("payload", "%s only applies to the trailing round; set trailing: true or payload: first", p.Payload)
	}
	return nil
}

func (p Policy) validateDebounce(bad badFunc) error {
	if p.Window == 0 {
		return bad("window", "required: how long to wait for more events, e.g. window: 30s")
	}
	if p.Window < MinWindow {
		return bad("window", "%v is shorter than %v: JetStream schedules fire up to ~0.5s late, so the window could not be honoured; use at least %v, or mode dedup to publish at once", p.Window, MinWindow, MinWindow)
	}
	if !p.Extend && p.MaxWait != 0 {
		return bad("max_wait", "only applies with extend: true; remove it or set extend: true")
	}
	if p.Extend {
		if p.MaxWait == 0 {
			return bad("max_wait", "required with extend: without it a key that never goes quiet is never run; e.g. max_wait: 5m")
		}
		if p.MaxWait < p.Window {
			return bad("max_wait", "%v is shorter than the window %v; the round could never be extended", p.MaxWait, p.Window)
		}
	}
	if p.TTL != 0 {
		return bad("ttl", "no longer applies to debounce: a round lives until its job starts (up to the stream's max_age after its due time, so no TTL can expire it while workers are away); remove ttl")
	}
	return nil
}
