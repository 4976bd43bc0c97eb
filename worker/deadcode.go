package worker

import "errors"

// HeaderErrorCode classifies a dead letter, so that they can be filtered
// and acted on together (coalesce dead, the dashboard): one of the Dead*
// codes. The durable intake's dead letters carry their decision's error
// code (invalid_args, no_policy, ...) in the same header.
const HeaderErrorCode = "Coalesce-Error-Code"

// Codes of a job's dead letter.
const (
	DeadPermanent   = "permanent"   // the handler said so (Permanent, a 4xx of work --post)
	DeadAttempts    = "attempts"    // it failed max_deliver times
	DeadRefused     = "refused"     // its start was refused for good (the round's data could not be read, ...)
	DeadUndecodable = "undecodable" // not a job document
)

// deadCode classifies why a job is dead-lettered.
func deadCode(jobType string, cause error, attempts, maxDeliver int) string {
	var perm permanentError
	switch {
	case jobType == "":
		return DeadUndecodable
	case errors.As(cause, &perm):
		return DeadPermanent
	case attempts >= maxDeliver:
		return DeadAttempts
	}
	return DeadRefused
}
