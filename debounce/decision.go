package debounce

import (
	"encoding/json"
	"time"

	"github.com/coalesce-io/coalesce/fingerprint"
)

// Event is one "this work should happen": a job type, its JSON args and,
// optionally, a key that names the effect instead of the args.
type Event struct {
	Type string          `json:"type"`
	Args json.RawMessage `json:"args"`
	// Key, when set, identifies the round instead of the fingerprint of the
	// args (1-1024 bytes of UTF-8).
	Key string `json:"key,omitempty"`
	// TraceParent is a W3C traceparent carried to the job's headers.
	TraceParent string `json:"traceparent,omitempty"`
	// IdempotencyKey, when set (1-255 bytes of visible ASCII, e.g. a UUID),
	// makes Submit safe to retry: the same event submitted again with the
	// same key within Config.IdempotencyWindow gets the first decision
	// back, Replayed, and counts nothing again (idempotency.go).
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// Outcome is what Submit did with an event. Every outcome is a success: the
// event is covered by a job that will start after it was accepted, or was
// dropped by design (throttled, duplicate).
type Outcome string

// Outcomes.
const (
	OutcomeScheduled Outcome = "scheduled" // opened a round: a job is due at DueAt
	OutcomeCoalesced Outcome = "coalesced" // joined the pending round
	OutcomeExtended  Outcome = "extended"  // joined and pushed the round's due time later
	OutcomePublished Outcome = "published" // an immediate job was published (dedup, throttle leading edge)
	OutcomeThrottled Outcome = "throttled" // dropped inside a throttle window, by design
	OutcomeDuplicate Outcome = "duplicate" // dropped while a dedup reservation holds, by design
	OutcomeBypassed  Outcome = "bypassed"  // Redis down, fail open: published with no reservation
)

// Decision is what Submit decided for one event.
type Decision struct {
	Outcome     Outcome                 `json:"outcome"`
	Type        string                  `json:"type"`
	Key         RoundKey                `json:"key"`
	Fingerprint fingerprint.Fingerprint `json:"fingerprint"`
	// Round is the token of the round the event opened or joined (for
	// throttled events, of the throttle window); zero when bypassed.
	Round Token `json:"round"`
	// DueAt is when the round's job is due; zero for immediate jobs and for
	// events dropped by design.
	DueAt time.Time `json:"due_at,omitzero"`
	// Events counts the events in the round (or throttle window) so far,
	// this one included; 1 when bypassed.
	Events int `json:"events"`
	// Replayed is true when this is the decision an earlier Submit of the
	// same event with the same IdempotencyKey got (nothing was counted).
	Replayed bool `json:"replayed,omitempty"`
}
