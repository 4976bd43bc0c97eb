package publisher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/fingerprint"
)

// RoundMessage is the message the stream holds for one round of a type: its
// pending schedule, or its job waiting for a worker (or held by one, until
// acknowledged).
type RoundMessage struct {
	Seq       uint64            // stream sequence: a listing's cursor
	Stored    time.Time         // when the stream stored it (a reschedule stores it anew)
	Scheduled bool              // a schedule not yet fired (else a job on its run subject)
	Job       debounce.Job      // decoded from the headers; Args are the message's body
	Due       time.Time         // when the schedule fires (Nats-Schedule), zero for a job
	Subject   string            // its subject
	Args      []byte            // the body: the args of the round's opening (or latest) event
	Err       error             // the message could not be decoded as a job (listed all the same)
	Key       debounce.RoundKey // from the subject, even when Err is set
}

// MaxRoundsPage bounds one Rounds call.
const MaxRoundsPage = 500

// Rounds lists the messages of jobType's rounds in stream order, from
// sequence after+1, up to limit of them (at most MaxRoundsPage), and returns
// the sequence to pass as after for the next page (0 when the stream holds
// no more). It reads message by message with the stream's subject filter
// (next-by-subject lookups, no consumer: consuming would delete jobs and
// schedules from the work-queue stream), so a page costs limit lookups
// whatever the number of rounds, and never reads the messages of other
// types. Bypassed jobs (no round) are skipped.
func (p *Publisher) Rounds(ctx context.Context, jobType string, after uint64, limit int) ([]RoundMessage, uint64, error) {
	// <prefix>.*.<type>.*.* covers <prefix>.sched.<type>.<key>.<round>
	// and <prefix>.run.<type>.<key>.<round>; subjects of other types have
	// another number of tokens or another type (a type's dots count), and
	// a dead letter of a type "<type>.x.y" is told apart by roundMessage.
	return p.list(ctx, jobType, p.subjects.prefix()+".*."+jobType+".*.*", after, limit)
}

// Jobs is Rounds for the jobs alone (fired schedules and immediate jobs,
// waiting for a worker or held by one), oldest first: the first ones not
// taken are the most overdue.
func (p *Publisher) Jobs(ctx context.Context, jobType string, after uint64, limit int) ([]RoundMessage, uint64, error) {
	return p.list(ctx, jobType, p.subjects.Runs(jobType), after, limit)
}

func (p *Publisher) list(ctx context.Context, jobType, filter string, after uint64, limit int) ([]RoundMessage, uint64, error) {
	if err := validateJobType(jobType); err != nil {
		return nil, 0, err
	}
	limit = min(max(limit, 1), MaxRoundsPage)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cmp.Or(p.js.Options().DefaultTimeout, 5*time.Second))
		defer cancel()
	}
	var out []RoundMessage
	seq := after + 1
	if after == 0 {
		// A filtered lookup from the stream's first sequence makes the
		// server count every subject the filter matches (its fast path for
		// a consumer's first fetch): 170 ms with 200,000 rounds. The first
		// message is read by its sequence instead, and the filtered
		// lookups start after it.
		info, err := p.stream.Info(ctx)
		if err != nil {
			return nil, 0, fmt.Errorf("publisher: list the rounds of %s on stream %s: %w", jobType, p.cfg.Stream, err)
		}
		first := info.State.FirstSeq
		if info.State.Msgs == 0 {
			return nil, 0, nil
		}
		m, err := p.stream.GetMsg(ctx, first)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound): // removed meanwhile
		case err != nil:
			return nil, 0, fmt.Errorf("publisher: list the rounds of %s on stream %s: %w", jobType, p.cfg.Stream, err)
		default:
			if rm, ok := p.roundMessage(jobType, m); ok && (!rm.Scheduled || filter != p.subjects.Runs(jobType)) {
				out = append(out, rm)
			}
		}
		seq = first + 1
	}
	for len(out) < limit {
		m, err := p.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, 0, nil
		}
		if err != nil {
			return out, 0, fmt.Errorf("publisher: list the rounds of %s on stream %s from sequence %d: %w", jobType, p.cfg.Stream, seq, err)
		}
		seq = m.Sequence + 1
		if rm, ok := p.roundMessage(jobType, m); ok {
			out = append(out, rm)
		}
	}
	return out, seq - 1, nil
}

// roundMessage reads a listed message; ok is false for a message that is
// not a round's (a bypassed job, another kind of subject).
func (p *Publisher) roundMessage(jobType string, m *jetstream.RawStreamMsg) (RoundMessage, bool) {
	pre := p.subjects.prefix()
	var sched bool
	rest, ok := strings.CutPrefix(m.Subject, pre+".sched."+jobType+".")
	if ok {
		sched = true
	} else if rest, ok = strings.CutPrefix(m.Subject, pre+".run."+jobType+"."); !ok {
		return RoundMessage{}, false
	}
	keyHex, round, ok := strings.Cut(rest, ".")
	if !ok || len(round) != 16 {
		return RoundMessage{}, false // a bypassed job's one-off token
	}
	key, err := fingerprint.Parse(keyHex)
	if err != nil {
		return RoundMessage{}, false
	}
	rm := RoundMessage{Seq: m.Sequence, Stored: m.Time, Scheduled: sched, Subject: m.Subject, Args: m.Data, Key: debounce.RoundKey(key)}
	rm.Job, rm.Err = DecodeJob(m.Header, m.Data)
	if at, ok := strings.CutPrefix(m.Header.Get(jetstream.ScheduleHeader), "@at "); ok && sched {
		rm.Due, _ = time.Parse(time.RFC3339Nano, at)
	}
	return rm, true
}
