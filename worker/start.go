package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// StartAction is what a delivery of a job does once StartDelivery closed
// its round.
type StartAction string

const (
	// StartRun: run the handler, then Finish the round and ack.
	StartRun StartAction = "run"
	// StartAck: ack without running; Started.Result says why (the round
	// was extended and published again for its new due time, or its job
	// runs or ran from another message).
	StartAck StartAction = "ack"
	// StartRetry: nak the delivery, to come again after Started.Delay;
	// it was no attempt.
	StartRetry StartAction = "retry"
	// StartDead: finish the round as failed for good (Finish with final)
	// and dead-letter the delivery (Started.Reason): it was started too
	// often without finishing.
	StartDead StartAction = "dead"
)

// Started is StartDelivery's verdict.
type Started struct {
	Action StartAction
	Result JobResult     // StartAck: JobRescheduled, JobSuperseded or JobDone
	Delay  time.Duration // StartRetry
	Reason string        // StartDead, StartRetry
}

// MaxDeliveries bounds the deliveries of one job whatever its attempts: a
// job whose round counts its attempts may be delivered more often than
// maxDeliver when workers die with it unstarted, but not without end: ten
// times maxDeliver, at least 50.
func MaxDeliveries(maxDeliver int) int { return max(10*maxDeliver, 50) }

// StartDelivery closes job's round at the start of one delivery, the way
// every coalesce worker does (the Go Worker, --exec, --post, and the
// daemon's start operation for workers in other languages), and says what
// the delivery must do. job.Attempt is the delivery's count from JetStream
// on entry; on StartRun it is the attempt (deliveries that reached the
// round), and job.Release and job.Summary are set. pub republishes an
// extended round that is not due yet; retryIn is the wait before a delivery
// comes again when that publish fails. An error means the round could not be
// closed (Redis): retry the delivery later, without running it.
func StartDelivery(ctx context.Context, co *debounce.Coalescer, pub debounce.Publisher, job *Job, maxDeliver int, retryIn time.Duration) (Started, error) {
	deliveries := job.Attempt
	rel, err := co.Start(ctx, job.Job)
	if err != nil {
		return Started{}, err
	}
	switch rel.Result {
	case debounce.ReleaseNotDue:
		// An extended round fired before its new due time: no attempt,
		// never dead-lettered (that would strand the round). Publish it
		// again for its due time; if that fails, the delivery comes back
		// and Start hands out the next version.
		next := job.Job
		next.DueAt, next.Version = rel.DueAt, rel.Version
		if pub == nil {
			return Started{Action: StartRetry, Delay: time.Until(rel.DueAt), Reason: "extended round not due, and no publisher to reschedule it"}, nil
		}
		if err := pub.Publish(ctx, next); err != nil {
			return Started{Action: StartRetry, Delay: retryIn, Reason: "rescheduling the extended round failed: " + err.Error()}, nil
		}
		return Started{Action: StartAck, Result: JobRescheduled}, nil
	case debounce.ReleaseSuperseded, debounce.ReleaseDone:
		// Another message of the round took it, or its job finished:
		// running this one would run the round twice.
		return Started{Action: StartAck, Result: JobResult(rel.Result)}, nil
	}
	job.Release, job.Summary = rel.Result, rel.Summary
	if deliveries > MaxDeliveries(maxDeliver) {
		return Started{Action: StartDead, Reason: fmt.Sprintf("delivered %d times without finishing", deliveries-1)}, nil
	}
	if rel.Starts > 0 {
		// The round counts the deliveries that reached it: one that died
		// before (in a killed worker's prefetch buffer) is no attempt.
		job.Attempt = rel.Starts
	}
	if job.Attempt > maxDeliver {
		// Attempts that never finished (the worker died mid-job) count too.
		return Started{Action: StartDead, Reason: fmt.Sprintf("started %d times without finishing", job.Attempt-1)}, nil
	}
	return Started{Action: StartRun}, nil
}
