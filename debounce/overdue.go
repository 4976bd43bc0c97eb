package debounce

import (
	"context"
	"sync"
	"time"
)

// releasedByJob reports whether the policy's rounds end when their job
// starts (or succeeds), as opposed to a dedup window that ends by expiry: only
// those wait for a job, so only those can be overdue.
func (p *compiled) releasedByJob() bool {
	return !(p.Mode == ModeDedup && p.Until == UntilExpiry)
}

// dueOf is when a round's job is due: its due time, or for an immediate job
// (dedup) its opening.
func dueOf(job Job) time.Time {
	if job.DueAt.IsZero() {
		return job.OpenedAt
	}
	return job.DueAt
}

// noteAfter: a packed round joined this long past its due time has its
// identity kept. Schedules fire within about half a second, so by then its
// job should have started; the cost is one small call per such round.
const noteAfter = 500 * time.Millisecond

// noteIfOverdue writes the identity of a packed round that the event just
// joined when the round is past its due time and not taken. Either its job
// waits for a worker (then nothing comes of it) or the stream lost it (or, a
// Redis restored from an older snapshot, the job already ran), and the
// reaper needs the identity to publish it again once it is RepairAfter
// overdue. At most once per round and process every noteAgain (a failover
// can bring a round back without the identity written for it); a failure
// is retried by the next event.
func (c *Coalescer) noteIfOverdue(ctx context.Context, p *compiled, job Job, now time.Time) {
	if !now.After(dueOf(job).Add(noteAfter)) {
		return
	}
	rkey := c.jobRedisKey(job)
	id := rkey + "/" + job.Token.String()
	if c.overdue.has(id, now) {
		return
	}
	exp, rnd := job.Token.packedParts()
	err := c.eval(ctx, noteOverdueScript, []string{rkey, identityKey(rkey)}, exp, rnd, appendIdentity(nil, job)).Err()
	if err != nil {
		c.log.WarnContext(ctx, "could not keep the identity of an overdue round; the next event tries again",
			"job_type", p.Type, "key", job.Key.String(), "token", job.Token.String(), "err", err)
		return
	}
	c.overdue.add(id, now)
}

// noteAgain: an overdue round's identity is written again after this long,
// should an event still find it overdue: a failover without replica acks
// can bring back a round (its job ran, its take was lost) without the
// identity written before.
const noteAgain = 10 * time.Second

// overdueSet remembers, boundedly, the overdue rounds whose identity this
// process has written, and when.
type overdueSet struct {
	mu sync.Mutex
	m  map[string]time.Time
}

const maxOverdueRemembered = 1 << 16

func (s *overdueSet) has(id string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.m[id]
	return ok && now.Sub(at) < noteAgain
}

func (s *overdueSet) add(id string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || len(s.m) >= maxOverdueRemembered {
		s.m = make(map[string]time.Time, 64) // forget: writing again is harmless
	}
	s.m[id] = now
}

// reset forgets every round (a new primary: none of the identities written
// may be there).
func (s *overdueSet) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m = nil
}
