package publisher

import "errors"

// Sentinel errors; match with errors.Is. Returned errors wrap them with the
// operation, the subject or stream and the server's own error.
var (
	// ErrServerTooOld: the NATS server predates message schedules (2.12). Such
	// a server stores schedule messages and never fires them, so nothing is
	// created on it.
	ErrServerTooOld = errors.New("publisher: nats server too old")
	// ErrSchedulesDisabled: the stream came back without AllowMsgSchedules
	// (a server that silently drops the setting); schedules would never fire.
	ErrSchedulesDisabled = errors.New("publisher: stream does not allow message schedules")
	// ErrInvalidConfig: a Config field cannot be used (the message names it).
	ErrInvalidConfig = errors.New("publisher: invalid config")
	// ErrProvision: the stream could not be created or updated.
	ErrProvision = errors.New("publisher: provisioning the stream failed")
	// ErrInvalidJob: a job cannot be published (its type makes no subject).
	ErrInvalidJob = errors.New("publisher: invalid job")
	// ErrPublish: the message was not acknowledged by the stream after the
	// configured attempts.
	ErrPublish = errors.New("publisher: publish failed")
	// ErrCancel: a pending schedule could not be purged.
	ErrCancel = errors.New("publisher: cancel failed")
	// ErrDecode: a message lacks a coalesce header or holds a malformed one.
	ErrDecode = errors.New("publisher: cannot decode job")
)
