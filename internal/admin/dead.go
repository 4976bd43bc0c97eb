package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/fingerprint"
	"github.com/coalesce-io/coalesce/publisher"
	"github.com/coalesce-io/coalesce/worker"
)

// Dead letters are the jobs a worker gave up on (publisher.Subjects.Dead:
// <prefix>.dead.<type>, with Coalesce-Error and, when it fit,
// Coalesce-Summary) and the stored events the durable intake could never
// decide (<prefix>.dead._ingest.<type>). They stay in the job stream until
// replayed or purged. Listing reads them by sequence without consuming
// them (a work-queue stream deletes what a consumer acks).

// DeadLetter is one dead letter.
type DeadLetter struct {
	Seq      uint64            `json:"seq"`
	Subject  string            `json:"subject"`
	Type     string            `json:"type"`
	Key      string            `json:"key,omitempty"`
	Round    string            `json:"round,omitempty"`
	Reason   string            `json:"reason"`
	Code     string            `json:"code,omitempty"` // Coalesce-Error-Code: why (worker.Dead*, or the intake's error code)
	Attempts int               `json:"attempts,omitempty"`
	Stored   time.Time         `json:"stored"`
	Age      string            `json:"age"`
	Summary  *debounce.Summary `json:"summary,omitempty"`
	// ReplayOf is set on the dead letter of a replayed job that failed
	// again: the sequence of the dead letter it was replayed from.
	ReplayOf uint64            `json:"replay_of,omitempty"`
	Args     json.RawMessage   `json:"args,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"` // show only
}

// ErrNoDeadLetter: no dead letter at that sequence (of that type).
var ErrNoDeadLetter = errors.New("no such dead letter")

// ErrInvalidType: a job type filter that is no job type (a NATS wildcard,
// say: "*" or ">" would reach every type's dead letters).
var ErrInvalidType = errors.New("invalid job type")

// CheckType says what is wrong with a dead letters' type filter: a job type
// (fingerprint's form, and a NATS subject token: no "..", no trailing "."),
// optionally "_ingest." before it (the durable intake's dead letters).
func CheckType(jobType string) error {
	t := strings.TrimPrefix(jobType, "_ingest.")
	if err := fingerprint.ValidateType(t); err != nil {
		return fmt.Errorf("%w %q: %w", ErrInvalidType, jobType, err)
	}
	if strings.Contains(t, "..") || strings.HasSuffix(t, ".") {
		return fmt.Errorf("%w %q: an empty subject token (\"..\" or a trailing \".\")", ErrInvalidType, jobType)
	}
	return nil
}

// ErrUnreplayable: the dead letter cannot be replayed as it is (a job
// message coalesce cannot decode); its headers say why.
var ErrUnreplayable = errors.New("dead letter cannot be replayed")

// Dead reads and acts on the dead letters of one stream.
type Dead struct {
	JS       jetstream.JetStream
	Stream   string
	Subjects publisher.Subjects
}

func (d Dead) stream(ctx context.Context) (jetstream.Stream, error) {
	return d.JS.Stream(ctx, d.Stream)
}

// filter is the subject of jobType's dead letters; "" is every type's.
// jobType has passed CheckType.
func (d Dead) filter(jobType string) string {
	if jobType == "" {
		return d.deadPrefix() + ">"
	}
	return d.Subjects.Dead(jobType)
}

// deadPrefix is "<prefix>.dead.".
func (d Dead) deadPrefix() string { return d.Subjects.Dead("") }

// replayedMark is the subject of the record Replay leaves of dead letter
// seq: "<prefix>.dead._replayed.<seq>", under the dead letters' subjects
// (the stream covers no other) and skipped by every listing.
func (d Dead) replayedMark(seq uint64) string {
	return d.deadPrefix() + replayedToken + strconv.FormatUint(seq, 10)
}

// replayedToken starts the subjects of replay records after the dead prefix.
const replayedToken = "_replayed."

// isMark: the message at subject is a replay record, no dead letter.
func (d Dead) isMark(subject string) bool {
	return strings.HasPrefix(subject, d.deadPrefix()+replayedToken)
}

// List returns up to limit dead letters of jobType ("" for all), oldest
// first, optionally only those of round.
func (d Dead) List(ctx context.Context, jobType, round string, limit int) ([]DeadLetter, error) {
	if jobType != "" {
		if err := CheckType(jobType); err != nil {
			return nil, err
		}
	}
	s, err := d.stream(ctx)
	if err != nil {
		return nil, err
	}
	var out []DeadLetter
	for seq := uint64(1); len(out) < limit; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(d.filter(jobType)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return out, err
		}
		seq = m.Sequence + 1
		if d.isMark(m.Subject) {
			continue
		}
		dl := d.letter(m, false)
		if round == "" || dl.Round == round {
			out = append(out, dl)
		}
	}
	return out, nil
}

// Show returns the dead letter at seq, headers and args included.
func (d Dead) Show(ctx context.Context, seq uint64) (DeadLetter, error) {
	m, err := d.get(ctx, seq)
	if err != nil {
		return DeadLetter{}, err
	}
	return d.letter(m, true), nil
}

func (d Dead) get(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error) {
	s, err := d.stream(ctx)
	if err != nil {
		return nil, err
	}
	m, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && (!strings.HasPrefix(m.Subject, d.deadPrefix()) || d.isMark(m.Subject)) {
		return nil, fmt.Errorf("%w at sequence %d of stream %s", ErrNoDeadLetter, seq, d.Stream)
	}
	return m, err
}

func (d Dead) letter(m *jetstream.RawStreamMsg, full bool) DeadLetter {
	h := m.Header
	dl := DeadLetter{Seq: m.Sequence, Subject: m.Subject, Type: h.Get(publisher.HeaderType), Key: h.Get(publisher.HeaderKey),
		Round: h.Get(publisher.HeaderRound), Reason: h.Get(worker.HeaderError), Stored: m.Time.UTC(),
		Age: time.Since(m.Time).Round(time.Second).String()}
	if dl.Type == "" {
		dl.Type = strings.TrimPrefix(m.Subject, d.deadPrefix())
	}
	dl.Code = h.Get(worker.HeaderErrorCode)
	if dl.Reason == "" {
		dl.Reason = dl.Code // an intake dead letter
	}
	dl.ReplayOf, _ = strconv.ParseUint(h.Get(worker.HeaderReplay), 10, 64)
	dl.Attempts, _ = strconv.Atoi(h.Get(worker.HeaderAttempts))
	if dl.Attempts == 0 {
		dl.Attempts, _ = strconv.Atoi(h.Get("Coalesce-Deliveries")) // an intake dead letter
	}
	args, sum, found, err := worker.UnpackSummary(h, m.Data)
	if found && err == nil {
		dl.Summary = &sum
	}
	if full {
		dl.Args = json.RawMessage(args)
		if !json.Valid(args) {
			dl.Args, _ = json.Marshal(string(args))
		}
		dl.Headers = map[string]string{}
		for k, v := range h {
			dl.Headers[k] = strings.Join(v, ", ")
		}
	}
	return dl
}

// Replayed is what Replay did with a dead letter.
type Replayed struct {
	Seq     uint64 `json:"replayed"` // the dead letter's sequence
	Subject string `json:"subject"`  // where its job was published again
	// Deduplicated: the dead letter had been replayed already; nothing was
	// published this time.
	Deduplicated bool `json:"deduplicated,omitempty"`
	// DeadAgain lists the dead letters of the replayed job, when it failed
	// again (each has ReplayOf Seq): replay those.
	DeadAgain []uint64 `json:"dead_again,omitempty"`
}

// Replay publishes the dead job at seq again, to its type's run subject,
// with its headers and a Coalesce-Replay header (workers then run it once
// more with the summary its dead letter kept, a fresh attempt count, and
// without its round, which ended when the job died), leaves a record of the
// replay (a small message on <prefix>.dead._replayed.<seq>, kept as long as
// the stream keeps messages), then deletes the dead letter. Replaying it
// again is deduplicated: the record answers it (Deduplicated, and DeadAgain
// when the replayed job failed again), and the replay's message id is the
// dead letter's, so a replay whose deletion failed is not published twice
// within the stream's duplicate window. A stored event the intake could not
// decide (dead._ingest) is republished to the intake subject instead.
func (d Dead) Replay(ctx context.Context, seq uint64) (Replayed, error) {
	m, err := d.get(ctx, seq)
	if errors.Is(err, ErrNoDeadLetter) {
		if r, ok, merr := d.replayedBefore(ctx, seq); merr != nil || ok {
			return r, merr
		}
	}
	if err != nil {
		return Replayed{}, err
	}
	out := nats.NewMsg("")
	for k, v := range m.Header {
		if strings.HasPrefix(k, "Nats-") || k == worker.HeaderError || k == worker.HeaderAttempts {
			continue
		}
		out.Header[k] = v
	}
	out.Data = m.Data
	out.Header.Set(jetstream.MsgIDHeader, "replay-"+d.Stream+"-"+strconv.FormatUint(seq, 10))
	jobType := m.Header.Get(publisher.HeaderType)
	if orig := m.Header.Get("Coalesce-Ingest-Subject"); orig != "" {
		out.Subject = orig
		for _, k := range []string{"Coalesce-Error-Code", "Coalesce-Ingest-Subject", "Coalesce-Deliveries"} {
			out.Header.Del(k)
		}
	} else {
		args, _, _, err := worker.UnpackSummary(m.Header, m.Data)
		if err != nil {
			return Replayed{}, fmt.Errorf("%w: dead letter %d: %w", ErrUnreplayable, seq, err)
		}
		dj, err := publisher.DecodeJob(m.Header, args)
		if err != nil {
			return Replayed{}, fmt.Errorf("%w: dead letter %d: %w", ErrUnreplayable, seq, err)
		}
		// The summary it kept goes with the replay, in a header or (too
		// large for one) in the body with the args.
		if out.Data, err = worker.RepackSummary(out.Header, m.Data); err != nil {
			return Replayed{}, fmt.Errorf("%w: dead letter %d: %w", ErrUnreplayable, seq, err)
		}
		if dj.Token == 0 && dj.Bypass == "" {
			// A bypassed job dead-lettered before its identity travelled
			// with it: one of its own, stable for this dead letter.
			sum := sha256.Sum256([]byte(d.Stream + "\ndead\n" + strconv.FormatUint(seq, 10)))
			dj.Bypass = "_" + hex.EncodeToString(sum[:8])
			out.Header.Set(publisher.HeaderBypass, dj.Bypass)
		}
		out.Subject = d.Subjects.RunOf(dj)
		out.Header.Set(worker.HeaderReplay, strconv.FormatUint(seq, 10))
		jobType = dj.Type
	}
	ack, err := d.JS.PublishMsg(ctx, out)
	if err != nil {
		return Replayed{}, fmt.Errorf("replay of dead letter %d: %w", seq, err)
	}
	r := Replayed{Seq: seq, Subject: out.Subject, Deduplicated: ack.Duplicate}
	mark := nats.NewMsg(d.replayedMark(seq))
	mark.Header.Set(jetstream.MsgIDHeader, "replayed-"+d.Stream+"-"+strconv.FormatUint(seq, 10))
	mark.Header.Set(markSubject, out.Subject)
	mark.Header.Set(markType, jobType)
	if _, err := d.JS.PublishMsg(ctx, mark); err != nil {
		return r, fmt.Errorf("replayed to %s, but the record of the replay could not be kept (the dead letter %d stays; a second replay is deduplicated for the stream's duplicate window): %w", out.Subject, seq, err)
	}
	s, err := d.stream(ctx)
	if err != nil {
		return r, err
	}
	if err := s.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return r, fmt.Errorf("replayed to %s, but the dead letter %d could not be deleted (a second replay is deduplicated for the stream's duplicate window): %w", out.Subject, seq, err)
	}
	return r, nil
}

// Headers of a replay record.
const (
	markSubject = "Coalesce-Replayed-To"
	markType    = "Coalesce-Type"
)

// replayedBefore answers the replay of a dead letter that is gone: ok when
// Replay left a record of it, with the dead letters of the replayed job if
// it failed again.
func (d Dead) replayedBefore(ctx context.Context, seq uint64) (Replayed, bool, error) {
	s, err := d.stream(ctx)
	if err != nil {
		return Replayed{}, false, err
	}
	m, err := s.GetLastMsgForSubject(ctx, d.replayedMark(seq))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Replayed{}, false, nil
	}
	if err != nil {
		return Replayed{}, false, err
	}
	r := Replayed{Seq: seq, Subject: m.Header.Get(markSubject), Deduplicated: true}
	typ := m.Header.Get(markType)
	if CheckType(typ) != nil {
		typ = "" // every type's
	}
	err = d.scan(ctx, typ, func(dl DeadLetter) error {
		if dl.ReplayOf == seq {
			r.DeadAgain = append(r.DeadAgain, dl.Seq)
		}
		return nil
	})
	return r, true, err
}

// Purge deletes the dead letter at seq, or (seq 0) every dead letter of
// jobType (of round, if given); it returns how many went.
func (d Dead) Purge(ctx context.Context, jobType, round string, seq uint64) (int, error) {
	s, err := d.stream(ctx)
	if err != nil {
		return 0, err
	}
	if seq != 0 {
		if _, err := d.get(ctx, seq); err != nil {
			return 0, err
		}
		return 1, s.DeleteMsg(ctx, seq)
	}
	if jobType == "" {
		return 0, errors.New("purge needs a type (or a sequence)")
	}
	if err := CheckType(jobType); err != nil {
		return 0, err // never a wildcard: "*" or ">" would purge every type's
	}
	if round == "" {
		before, err := d.count(ctx, s, jobType)
		if err != nil {
			return 0, err
		}
		return before, s.Purge(ctx, jetstream.WithPurgeSubject(d.filter(jobType)))
	}
	letters, err := d.List(ctx, jobType, round, 1<<20)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, dl := range letters {
		if err := s.DeleteMsg(ctx, dl.Seq); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func (d Dead) count(ctx context.Context, s jetstream.Stream, jobType string) (int, error) {
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(d.filter(jobType)))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range info.State.Subjects {
		n += int(c)
	}
	return n, nil
}
