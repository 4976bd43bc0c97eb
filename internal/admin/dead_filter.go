package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// DeadFilter selects dead letters: of a type (empty: every type), of a
// round, with an error code; empty fields match everything.
type DeadFilter struct {
	Type  string `json:"type,omitempty"`
	Round string `json:"round,omitempty"`
	Code  string `json:"code,omitempty"`
}

func (f DeadFilter) match(dl DeadLetter) bool {
	return (f.Round == "" || dl.Round == f.Round) && (f.Code == "" || dl.Code == f.Code)
}

// MaxDeadScan bounds the dead letters one Match, ReplayMatching or
// PurgeMatching call reads.
const MaxDeadScan = 100_000

// ErrTooManyDeadLetters: more dead letters than MaxDeadScan match a filter:
// narrow it (a type, a code) or purge by type.
var ErrTooManyDeadLetters = errors.New("admin: more dead letters than can be read at once")

// Match returns the first limit dead letters the filter selects, oldest
// first, how many it selects in all, and the error codes met (code ->
// letters, over the filter's type, for a filter's choices).
func (d Dead) Match(ctx context.Context, f DeadFilter, limit int) (letters []DeadLetter, matching int, codes map[string]int, err error) {
	codes = map[string]int{}
	err = d.scan(ctx, f.Type, func(dl DeadLetter) error {
		codes[dl.Code]++
		if !f.match(dl) {
			return nil
		}
		matching++
		if len(letters) < limit {
			letters = append(letters, dl)
		}
		return nil
	})
	return letters, matching, codes, err
}

// scan reads every dead letter of jobType ("" for all), oldest first.
func (d Dead) scan(ctx context.Context, jobType string, each func(DeadLetter) error) error {
	if jobType != "" {
		if err := CheckType(jobType); err != nil {
			return err // never a wildcard: "*" or ">" would reach every type's
		}
	}
	s, err := d.stream(ctx)
	if err != nil {
		return err
	}
	n := 0
	for seq := uint64(1); ; n++ {
		if n >= MaxDeadScan {
			return fmt.Errorf("%w: over %d of %q; filter by type or purge by type", ErrTooManyDeadLetters, MaxDeadScan, jobType)
		}
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(d.filter(jobType)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		seq = m.Sequence + 1
		if d.isMark(m.Subject) {
			continue
		}
		if err := each(d.letter(m, false)); err != nil {
			return err
		}
	}
}

// ReplayMatching replays every dead letter the filter selects (Replay each)
// and returns how many were replayed; it stops at the first failure.
func (d Dead) ReplayMatching(ctx context.Context, f DeadFilter) (int, error) {
	seqs, err := d.matchingSeqs(ctx, f)
	if err != nil {
		return 0, err
	}
	for i, seq := range seqs {
		if _, err := d.Replay(ctx, seq); err != nil && !errors.Is(err, ErrNoDeadLetter) {
			return i, err
		}
	}
	return len(seqs), nil
}

// PurgeMatching deletes every dead letter the filter selects and returns how
// many went.
func (d Dead) PurgeMatching(ctx context.Context, f DeadFilter) (int, error) {
	if f.Type != "" && f.Round == "" && f.Code == "" {
		return d.Purge(ctx, f.Type, "", 0) // one subject purge
	}
	seqs, err := d.matchingSeqs(ctx, f)
	if err != nil {
		return 0, err
	}
	s, err := d.stream(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, seq := range seqs {
		if err := s.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return n, err
		}
		n++
	}
	return n, nil
}

func (d Dead) matchingSeqs(ctx context.Context, f DeadFilter) ([]uint64, error) {
	var seqs []uint64
	err := d.scan(ctx, f.Type, func(dl DeadLetter) error {
		if f.match(dl) {
			seqs = append(seqs, dl.Seq)
		}
		return nil
	})
	return seqs, err
}

// CountByType counts the dead letters of every type.
func (d Dead) CountByType(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	err := d.scan(ctx, "", func(dl DeadLetter) error {
		out[dl.Type]++
		return nil
	})
	return out, err
}
