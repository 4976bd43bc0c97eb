package debounce

import "errors"

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
