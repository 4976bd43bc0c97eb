package debounce

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/coalesce-io/coalesce/fingerprint"
)

// Token fences a round: every release, extend or cancel names the token of
// the round it means, and changes nothing when the round now in Redis has
// another. Its text form is 16 lowercase hex digits.
type Token uint64

// String returns the token as 16 lowercase hex digits ("" for the zero token).
func (t Token) String() string {
	if t == 0 {
		return ""
	}
	return string(t.appendHex(make([]byte, 0, 16)))
}

// appendHex appends the 16 hex digits String writes for t (a round's
// identity writes its token without the allocations of a String).
func (t Token) appendHex(b []byte) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, digits[uint64(t)>>shift&0xf])
	}
	return b
}

// MarshalText implements encoding.TextMarshaler.
func (t Token) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (t *Token) UnmarshalText(b []byte) error {
	p, err := ParseToken(string(b))
	if err != nil {
		return err
	}
	*t = p
	return nil
}

// ParseToken reads a token from its hex form; "" is the zero token.
func ParseToken(s string) (Token, error) {
	if s == "" {
		return 0, nil
	}
	if len(s) > 16 {
		return 0, fmt.Errorf("%w: round token %q is longer than 16 hex digits", ErrInvalidToken, s)
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: round token %q is not hex", ErrInvalidToken, s)
	}
	return Token(v), nil
}

// Job is one round made into a job: what a Publisher sends. The worker gets
// the same fields back from the message (see package worker).
type Job struct {
	Type        string
	Key         RoundKey                // identifies the round's key
	Fingerprint fingerprint.Fingerprint // fp1 of the opening event's args (or key fields)
	Token       Token                   // zero when bypassed (no reservation)
	Mode        Mode
	Payload     Payload
	Args        json.RawMessage // args of the opening event; last/accumulate payloads are taken at release
	OpenedAt    time.Time       // first event of the round
	DueAt       time.Time       // when the job should start; zero means now
	TTL         time.Duration   // reservation lifetime, for decoding the summary at release
	TraceParent string          // W3C traceparent of the opening event, if any
	// Version counts publishes of the same round (0 first): a reschedule
	// (extend, fire-now) publishes a new version so a message id made of
	// token and version is never swallowed as a duplicate of the last one.
	Version int
	// Lease, when set, says the job's key is exclusive, held for this long
	// (its policy's Lease, stamped at publish): a worker without the policy
	// honours it too.
	Lease time.Duration
	// Forward, set by a forwarder (deferred.go), names one forwarding of a
	// round held in Redis: it is part of the message id, so a round
	// forwarded again after a failover lost the first forward's writes (and
	// so its version) is not dropped as that forward's duplicate.
	Forward string
	// Store is the identity of the Redis the round was reserved in, and
	// StoreAddr that Redis as the producer reached it (store.go): a worker
	// on another Redis does not run the job. Empty: unknown.
	Store, StoreAddr string
	// Bypass identifies a bypassed job (Token zero: published without a
	// reservation, Redis down under fail open): "_" and 16 hex digits,
	// random per publish, carried by its message (the Coalesce-Bypass
	// header and the last token of its run subject). Empty for a round's
	// job. A Publisher sets one for a bypassed job that has none.
	Bypass string
}

// ID is the job's identity: "<round key>.<token>" for a round's job,
// "<round key>.<bypass>" for a bypassed one (see Bypass). It is the same
// for every delivery of the job and for its replay from the dead letters,
// and differs for every other job: an idempotency key for the job's
// effects. "" for a bypassed job whose Bypass is not known.
func (j Job) ID() string {
	switch {
	case j.Token != 0:
		return j.Key.String() + "." + j.Token.String()
	case j.Bypass != "":
		return j.Key.String() + "." + j.Bypass
	}
	return ""
}

// NewBypass returns a new Job.Bypass: "_" and 16 random hex digits.
func NewBypass() string {
	return fmt.Sprintf("_%016x", rand.Uint64())
}

// ValidBypass reports whether s has the form of a Job.Bypass.
func ValidBypass(s string) bool {
	if len(s) != 17 || s[0] != '_' {
		return false
	}
	for _, c := range s[1:] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Immediate reports whether the job is meant to run now rather than at DueAt.
func (j Job) Immediate() bool { return j.DueAt.IsZero() }

// Publisher sends jobs. The JetStream implementation is in package publisher;
// Submit calls Publish when an event opens a round (and, fail-open, when the
// store is down). Publish must be idempotent for the same Token and Version.
type Publisher interface {
	Publish(ctx context.Context, job Job) error
}

// PublisherFunc adapts a function to Publisher.
type PublisherFunc func(ctx context.Context, job Job) error

// Publish calls f.
func (f PublisherFunc) Publish(ctx context.Context, job Job) error { return f(ctx, job) }
