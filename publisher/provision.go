package publisher

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// Provision creates the stream want describes, or brings an existing one
// to it without undoing an operator's edits: it sets the fields coalesce
// relies on (retention, duplicates window, max age, schedules) and keeps
// the rest of the stream's configuration, its extra subjects (want's are
// added), and more replicas than want asks for (never scaled down). It
// refuses, changing nothing, a storage other than want's (the server cannot
// change it) and a limit under which the stream would drop stored messages
// to make room (max messages, bytes, messages per subject with discard-old,
// the only discard policy message schedules allow): pending schedules or
// stored events would go without a trace.
//
// The daemon's durable intake stream is provisioned the same way.
func Provision(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, want.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		s, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return Provision(ctx, js, want) // created meanwhile by another replica
		}
		if err != nil {
			return nil, fmt.Errorf("%w: stream %s: %w", ErrProvision, want.Name, err)
		}
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("%w: stream %s: %w", ErrProvision, want.Name, err)
	}
	have := s.CachedInfo().Config
	merged, err := MergeStream(want, have)
	if err != nil {
		return nil, err
	}
	if streamConfigEqual(merged, have) {
		return s, nil
	}
	s, err = js.UpdateStream(ctx, merged)
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s: %w", ErrProvision, want.Name, err)
	}
	return s, nil
}

// MergeStream is the configuration Provision gives an existing stream: have
// with want's own fields set, or an ErrProvision saying what an operator
// must change first.
func MergeStream(want, have jetstream.StreamConfig) (jetstream.StreamConfig, error) {
	refuse := func(format string, args ...any) (jetstream.StreamConfig, error) {
		return have, fmt.Errorf("%w: stream %s: %s", ErrProvision, want.Name, fmt.Sprintf(format, args...))
	}
	if have.Storage != want.Storage {
		return refuse("it is stored in %s, the configuration asks for %s: the server cannot change a stream's storage; move the data to a new stream, or configure %s", have.Storage, want.Storage, have.Storage)
	}
	m := have
	for _, s := range want.Subjects {
		if !slices.Contains(m.Subjects, s) {
			m.Subjects = append(m.Subjects, s)
		}
	}
	m.Retention = want.Retention
	m.Duplicates = want.Duplicates
	m.MaxAge = want.MaxAge
	m.Replicas = max(have.Replicas, want.Replicas)
	if m.Description == "" {
		m.Description = want.Description
	}
	if want.AllowMsgSchedules {
		m.AllowMsgSchedules, m.AllowRollup, m.Discard = true, true, jetstream.DiscardOld
	}
	if err := CheckDropLimits(m); err != nil {
		return have, err
	}
	return m, nil
}

// CheckDropLimits returns an ErrProvision naming the first limit under which
// the stream c drops stored messages to make room (max messages, bytes or
// messages per subject, with discard-old): pending schedules and stored
// events would go without a trace. /readyz asks it of the running stream,
// which an operator may edit after the start.
func CheckDropLimits(c jetstream.StreamConfig) error {
	if c.Discard != jetstream.DiscardOld {
		return nil // discard-new refuses the publish instead: the sender hears of it
	}
	for _, l := range []struct {
		name string
		v    int64
	}{{"max_msgs", c.MaxMsgs}, {"max_bytes", c.MaxBytes}, {"max_msgs_per_subject", c.MaxMsgsPerSubject}} {
		if l.v > 0 {
			return fmt.Errorf("%w: stream %s: %s is %d: at that limit JetStream drops the oldest messages (discard old), pending schedules and stored events with them, and nobody hears of it; remove the limit (nats stream edit %s --%s=-1)",
				ErrProvision, c.Name, l.name, l.v, c.Name, flagName(l.name))
		}
	}
	return nil
}

// flagName is the nats CLI flag of a limit.
func flagName(limit string) string {
	switch limit {
	case "max_msgs":
		return "max-msgs"
	case "max_bytes":
		return "max-bytes"
	default:
		return "max-msgs-per-subject"
	}
}

// streamConfigEqual reports whether an update would change nothing.
func streamConfigEqual(a, b jetstream.StreamConfig) bool {
	return slices.Equal(a.Subjects, b.Subjects) && a.Retention == b.Retention && a.Duplicates == b.Duplicates &&
		a.MaxAge == b.MaxAge && a.Replicas == b.Replicas && a.Description == b.Description &&
		a.AllowMsgSchedules == b.AllowMsgSchedules && a.AllowRollup == b.AllowRollup && a.Discard == b.Discard
}
