package debounce

import (
	"errors"
	"fmt"

	"github.com/coalesce-io/coalesce/fingerprint"
)

// Sentinel errors; match with errors.Is. Returned errors wrap them with the
// operation, job type and key.
var (
	// ErrStoreUnavailable: Redis could not be reached or failed; under
	// fail: closed nothing was published.
	ErrStoreUnavailable = errors.New("debounce: store unavailable")
	// ErrPublish: the round could not be published; its reservation was
	// released, so a retry of Submit can open it again (unless the failure
	// is ErrMaybePublished too).
	ErrPublish = errors.New("debounce: publish failed")
	// ErrMaybePublished: a Publisher's error when the message may have been
	// stored all the same (the ack did not come in time, the connection
	// dropped after sending). The round is then kept, unpublished: a retry
	// of the event joins it and publishes it again (idempotently), and the
	// reaper settles it by looking for its message.
	ErrMaybePublished = errors.New("debounce: the publish may have landed")
	// ErrJobTooLarge: the event's job would not fit one message of the
	// Publisher's transport (NATS max payload): it can never be published,
	// so retrying is pointless. Nothing is reserved.
	ErrJobTooLarge = errors.New("debounce: job too large for one message")
	// ErrInvalidConfig: a Config that New refuses (a missing Redis, a
	// client that resends commands, a MaxAge out of range).
	ErrInvalidConfig = errors.New("debounce: invalid config")
	// ErrInvalidPolicy: a policy cannot be used (see PolicyError).
	ErrInvalidPolicy = errors.New("debounce: invalid policy")
	// ErrNoPolicy: no policy is configured for the event's job type.
	ErrNoPolicy = errors.New("debounce: no policy for job type")
	// ErrInvalidEvent: the event's type, args or key are not acceptable.
	ErrInvalidEvent = errors.New("debounce: invalid event")
	// ErrInvalidToken: a round token is not 16 hex digits.
	ErrInvalidToken = errors.New("debounce: invalid round token")
	// ErrEvictionPolicy: Redis may evict keys (maxmemory-policy allkeys-*),
	// which silently ends reservations.
	ErrEvictionPolicy = errors.New("debounce: redis may evict reservations")
	// ErrNoPersistence: Redis keeps nothing across a restart (no AOF, no
	// RDB), so a restart loses every round's data.
	ErrNoPersistence = errors.New("debounce: redis has no persistence")
)

// EventError is why an event was refused (it matches ErrInvalidEvent with
// errors.Is): the field of the event it concerns and a stable code, the
// ones the daemon answers with, so a caller needs no string matching.
//
//	var ee *debounce.EventError
//	if errors.As(err, &ee) { log.Printf("%s: %s (%s)", ee.Field, ee.Msg, ee.Code) }
type EventError struct {
	// Field is "type", "args" (or a path into them such as
	// "args.tenant_id"), "key" or "traceparent".
	Field string
	// Code is "invalid_event", "invalid_traceparent", or the code of the
	// fingerprint.Error in Err (for example "unsafe_integer",
	// "missing_key_field", "invalid_type").
	Code string
	// Msg says what is wrong and, where it can, what to send instead.
	Msg string
	// Err is the fingerprint.Error behind it, or nil.
	Err error
}

func (e *EventError) Error() string { return ErrInvalidEvent.Error() + ": " + e.Msg }

// Is makes an EventError match ErrInvalidEvent.
func (e *EventError) Is(target error) bool { return target == ErrInvalidEvent }

func (e *EventError) Unwrap() error { return e.Err }

// eventError refuses an event for a reason of its own.
func eventError(field, code, format string, args ...any) *EventError {
	return &EventError{Field: field, Code: code, Msg: fmt.Sprintf(format, args...)}
}

// fingerprintError refuses an event for what the fingerprint found in it;
// prefix, when set, is put before the message (for example "item_field: ").
func fingerprintError(err error, prefix string) *EventError {
	ee := &EventError{Field: "args", Code: "invalid_event", Msg: prefix + err.Error(), Err: err}
	var fe *fingerprint.Error
	if errors.As(err, &fe) {
		ee.Field, ee.Code = fe.Path, fe.Code()
		if ee.Code == "invalid_type" {
			ee.Field = "type"
		}
	}
	return ee
}
