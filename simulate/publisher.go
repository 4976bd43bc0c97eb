package simulate

import (
	"context"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/publisher"
)

// virtualPublisher is JetStream as the publisher uses it, in virtual time:
// an immediate job (or a first version already due) reaches the consumers
// at once; any other is a schedule on its round's subject that fires at
// its due time plus the lateness, and a later publish on that subject
// replaces it (the stream's rollup). A message id (key, token, version)
// published again within the duplicates window is dropped, as
// Nats-Msg-Id deduplication does.
type virtualPublisher struct {
	s         *sim
	schedules map[roundID]*action
	ids       map[msgID]time.Time // published at
	idOrder   []msgID             // in publish order, for forgetting them
}

var _ debounce.Publisher = (*virtualPublisher)(nil)

type msgID struct {
	key     debounce.RoundKey
	token   debounce.Token
	version int
}

// MaxAge is the stream's max age: the Coalescer keeps rounds as long.
func (p *virtualPublisher) MaxAge() time.Duration { return p.s.cfg.MaxAge }

// Publish publishes job now (virtually).
func (p *virtualPublisher) Publish(_ context.Context, job debounce.Job) error {
	s := p.s
	now := s.now
	if job.Token != 0 {
		id := msgID{job.Key, job.Token, job.Version}
		p.forget(now)
		if _, dup := p.ids[id]; dup {
			return nil
		}
		p.ids[id] = now
		p.idOrder = append(p.idOrder, id)
	}
	d := &delivery{job: job}
	if job.Immediate() || !job.DueAt.After(now) && job.Version == 0 {
		s.schedule(now, actDeliver, d)
		return nil
	}
	// A schedule (a reschedule too, even one due now): it replaces the
	// round's pending one and fires at its time, late by the lateness.
	t := s.byTyp[job.Type]
	id := roundID{t: t, key: job.Key, token: job.Token}
	if old := p.schedules[id]; old != nil {
		old.cancelled = true
	}
	at := job.DueAt
	if at.Before(now) {
		at = now
	}
	a := s.schedule(at.Add(s.cfg.Lateness), actDeliver, d)
	a.sched = &id
	p.schedules[id] = a
	return nil
}

// forget drops the message ids published before the duplicates window.
func (p *virtualPublisher) forget(now time.Time) {
	cut := now.Add(-publisher.DefaultDuplicates)
	i := 0
	for i < len(p.idOrder) && p.ids[p.idOrder[i]].Before(cut) {
		delete(p.ids, p.idOrder[i])
		i++
	}
	if i > 0 {
		p.idOrder = p.idOrder[i:]
	}
}
