package worker

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
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
	Result JobResult     // StartAck: JobRescheduled, JobSuperseded or JobDone; StartRetry: JobKeyBusy when the key is
	Delay  time.Duration // StartRetry
	Reason string        // StartDead, StartRetry
	// Lease, for StartRun of an exclusive job, is the owner of its key's
	// lease: refresh it while the job runs (Coalescer.RefreshKey, within
	// the policy's Lease) and release it when the job ends
	// (Coalescer.ReleaseKey). Waits and Waited say how long the job waited
	// for its key. Every other action gave the lease up already.
	Lease  string
	Waits  int
	Waited time.Duration
	// Note, for StartRun, is worth a warning: the job's Redis lost its data
	// since the job's round opened.
	Note string
}

// otherStoreWait is how long a job reserved in another Redis waits before
// it is delivered again (to this worker or, better, a correctly connected
// one).
const otherStoreWait = 10 * time.Second

// keyWait is how long a delivery that found its key busy waits before it
// comes again: at most keyPoll (plus jitter), less when the holder's lease
// lapses sooner.
func keyWait(left time.Duration) time.Duration {
	return min(left, keyPoll) + time.Duration(rand.Int64N(int64(keyPoll/2)))
}

const keyPoll = 500 * time.Millisecond

func newOwner() string {
	var b [12]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
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
	// The job's Redis first: closing a round in another Redis finds it
	// missing, runs the job without its data, and leaves the real round
	// open for events whose job already ran.
	var sc debounce.StoreCheck
	if job.Replay == "" { // a replay has no round left, in any Redis
		var err error
		sc, err = co.CheckStore(ctx, job.Job)
		if errors.Is(err, debounce.ErrOtherStore) {
			return Started{Action: StartRetry, Result: JobOtherStore, Delay: otherStoreWait, Reason: err.Error()}, nil
		}
		if err != nil {
			return Started{}, err
		}
	}
	s, err := startExclusive(ctx, co, pub, job, maxDeliver, retryIn)
	if sc.Note != "" {
		s.Note = sc.Note
	}
	return s, err
}

func startExclusive(ctx context.Context, co *debounce.Coalescer, pub debounce.Publisher, job *Job, maxDeliver int, retryIn time.Duration) (Started, error) {
	if _, exclusive := co.LeaseOf(job.Job); !exclusive {
		return startDelivery(ctx, co, pub, job, maxDeliver, retryIn)
	}
	// An exclusive key: its lease first. A delivery that finds it busy
	// leaves the round alone (it takes in events until its job starts) and
	// comes again shortly; its wait is no attempt and no delivery the
	// backstop counts.
	owner := newOwner()
	asked := time.Now() // the lease, once granted, lasts at least until asked + its length
	kl, err := co.TakeKeyFor(ctx, job.Job, job.Replay, owner)
	if err != nil && job.Token == 0 {
		// Published without a reservation because Redis was down (fail
		// open): it runs without the lease too, rather than wait for
		// Redis; its policy chose availability. Its waits for the key are
		// counted in Redis, out of reach now, so its deliveries say
		// nothing of its attempts (five waits, then an outage, would
		// dead-letter it unrun: chaos 7a's long form): it runs as a first
		// attempt, and only the backstop on deliveries ends it.
		if job.Attempt > MaxDeliveries(maxDeliver) {
			return Started{Action: StartDead, Reason: fmt.Sprintf("delivered %d times without finishing", job.Attempt-1)}, nil
		}
		job.Attempt = 1
		s, serr := startDelivery(ctx, co, pub, job, maxDeliver, retryIn)
		s.Note = "an exclusive job published without a reservation (fail open) runs without its key's lease: Redis is unavailable"
		return s, serr
	}
	if err != nil {
		return Started{}, err
	}
	if !kl.Taken {
		return Started{Action: StartRetry, Result: JobKeyBusy, Delay: keyWait(kl.Left), Reason: "its key is busy: another job of the key is running"}, nil
	}
	// The waits are counted per job identity (a round's token, a bypassed
	// job's Bypass) and, for a replay, per dead letter: they are this
	// message's deliveries that only waited for the key, no attempts.
	job.Attempt = max(job.Attempt-kl.Waits, 1)
	s, err := startDelivery(ctx, co, pub, job, maxDeliver, retryIn)
	if err != nil || s.Action != StartRun {
		if _, rerr := co.ReleaseKey(context.WithoutCancel(ctx), job.Job, owner); rerr != nil && err == nil {
			err = rerr // the lease lapses on its own; the delivery comes again
		}
		return s, err
	}
	if f := afterKeyTaken.Load(); f != nil {
		(*f)()
	}
	if lease, _ := co.LeaseOf(job.Job); time.Since(asked) >= lease/2 {
		// The start took long (Redis stalled): the lease may have lapsed
		// meanwhile and another job of the key started. It is confirmed
		// (and extended) before the job runs; lapsed, the job does not run
		// now: its round is taken, and the next delivery of this message
		// finds it so (retry) once the key is free.
		held, rerr := co.RefreshKey(ctx, job.Job, owner)
		switch {
		case rerr != nil && job.Token == 0:
			// Published without a reservation (fail open), and Redis is
			// unavailable again: it runs without the lease, as when the
			// lease could not be taken at all.
			s.Note = "an exclusive job published without a reservation (fail open) runs without its key's lease: Redis became unavailable while it started"
		case rerr != nil || !held:
			// No attempt: the job did not fail, the store was slow. Its
			// start is taken back (a bypassed job's delivery counts as a
			// wait); where Redis cannot even do that, it is one.
			_ = co.NotRun(context.WithoutCancel(ctx), job.Job, job.Replay)
			return Started{Action: StartRetry, Result: JobKeyBusy, Delay: keyWait(keyPoll),
				Reason: "its key's lease lapsed while its round was taken (a slow start): it runs once the key is free"}, nil
		}
	}
	s.Lease, s.Waits, s.Waited = owner, kl.Waits, kl.Waited
	return s, nil
}

// afterKeyTaken, set by tests, runs between an exclusive job's start and
// the check that its key's lease is still held.
var afterKeyTaken atomic.Pointer[func()]

func startDelivery(ctx context.Context, co *debounce.Coalescer, pub debounce.Publisher, job *Job, maxDeliver int, retryIn time.Duration) (Started, error) {
	if job.Replay != "" {
		// A dead letter replayed: its round ended when it died; it runs
		// with the summary the dead letter kept, attempts counted afresh.
		job.Release = ReleaseReplayed
		if job.Attempt > maxDeliver {
			return Started{Action: StartDead, Reason: fmt.Sprintf("replayed, then started %d times without finishing", job.Attempt-1)}, nil
		}
		return Started{Action: StartRun}, nil
	}
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
		if rel.Version == 0 {
			// A fixed due time this worker's clock has not reached
			// (the clocks are apart): the same message, later.
			return Started{Action: StartRetry, Delay: max(rel.DueAt.Sub(co.Now()), 10*time.Millisecond), Reason: "round not due yet by this worker's clock"}, nil
		}
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
	// The backstop only where nothing counts the starts (a job published
	// without a reservation): elsewhere the deliveries include the retries
	// of an outage and the waits for a busy key, which are no attempts.
	if rel.Starts == 0 && deliveries > MaxDeliveries(maxDeliver) {
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
