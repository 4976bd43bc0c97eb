package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/fingerprint"
	"github.com/coalesce-io/coalesce/publisher"
)

// DedupeOptions configures Dedupe. The zero value is a dry run over every job
// type of the default stream and prefix.
type DedupeOptions struct {
	Stream   string             // publisher.DefaultStream when empty
	Subjects publisher.Subjects // subject prefix of the stream
	// Types are the job types to clean; empty means every type found on
	// <prefix>.run.> and <prefix>.jobs.>.
	Types []string
	// Fields names, per job type, the top-level key fields to fingerprint
	// instead of all args, for messages without a Coalesce-Key header. Use
	// the key fields of the type's coalesce policy, so that old messages
	// and coalesce-published ones get the same identity.
	Fields map[string][]string
	// Apply deletes the duplicates; false (the default) is a dry run that
	// only reports what it would delete.
	Apply  bool
	Logger *slog.Logger // nil discards
}

func (o DedupeOptions) withDefaults() DedupeOptions {
	o.Stream = cmp.Or(o.Stream, publisher.DefaultStream)
	o.Subjects.Prefix = cmp.Or(o.Subjects.Prefix, publisher.DefaultPrefix)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// validate says what is wrong with options that have their defaults.
func (o DedupeOptions) validate() error {
	if len(o.Stream) > 255 || strings.ContainsAny(o.Stream, ".*>/\\ \t\r\n") {
		return fmt.Errorf("%w: Stream %q must be 1-255 characters without . * > / \\ or whitespace", ErrInvalidOptions, o.Stream)
	}
	for tok := range strings.SplitSeq(o.Subjects.Prefix, ".") {
		if tok == "" || strings.ContainsAny(tok, "*> \t\r\n") {
			return fmt.Errorf("%w: Subjects.Prefix %q must be dot-separated tokens without empty tokens, wildcards (* >) or whitespace", ErrInvalidOptions, o.Subjects.Prefix)
		}
	}
	for _, t := range o.Types {
		if err := validateJobType(t); err != nil {
			return fmt.Errorf("%w: Types: %w", ErrInvalidOptions, err)
		}
	}
	for t := range o.Fields {
		if err := validateJobType(t); err != nil {
			return fmt.Errorf("%w: Fields: %w", ErrInvalidOptions, err)
		}
		if len(o.Types) > 0 && !slices.Contains(o.Types, t) {
			return fmt.Errorf("%w: Fields names job type %q, which is not in Types %v", ErrInvalidOptions, t, o.Types)
		}
	}
	return nil
}

// validateJobType checks a job type is one (fingerprint.ValidateType) that
// also makes a NATS subject: no ".." and no trailing ".".
func validateJobType(t string) error {
	if err := fingerprint.ValidateType(t); err != nil {
		return err
	}
	if strings.Contains(t, "..") || strings.HasSuffix(t, ".") {
		return fmt.Errorf("job type %q has an empty subject token", t)
	}
	return nil
}

// Dedupe removes, once, the duplicate jobs of a queue that filled up before
// its producers were deduplicated. It is an administrative clean-up, not a
// step of publishing: run it after the producers go through coalesce.
//
// It reads the messages of the job subjects (<prefix>.run.<type>.<key>.<round>
// and the older <prefix>.jobs.<type>) that the stream holds when it starts, oldest first, by sequence (no consumer is
// created, which a WorkQueue stream would refuse as overlapping). The
// identity of a job is its type and either its Coalesce-Key header, for
// messages coalesce published, or else the fp1 fingerprint of its body as
// args (only the type's Fields when configured). For a type's policy key
// fields both are the same digest, so old and new messages match. A body
// that is not I-JSON (or lacks a key field) is SkippedUnreadable: never a
// duplicate, never kept for others.
//
// The oldest pending message of an identity is kept, the later ones are
// duplicates, with one exception: a coalesce message carrying a round token
// (Coalesce-Round) that no earlier kept message of its identity carries is
// another round of the key, whose summary and reservation live in Redis
// under that token; it is kept (KeptRounds), as deleting it would strand
// them. Copies of the same round are duplicates, and so are bypassed
// copies (no token), except for payload accumulate and last: there a job's
// args are data (an item, the latest args) that the round's job does not
// carry, so a job without a token is a duplicate only of a kept job of its
// identity with the same args (fp1 of the whole args); otherwise it is kept
// (listed in KeptRounds).
//
// Jobs in execution are never touched. A message is in flight when a
// consumer whose filter covers its subject has delivered up to its sequence
// or beyond (ConsumerInfo.Delivered.Stream): delivered and not acknowledged,
// since acknowledged jobs leave a WorkQueue stream (on a Limits stream this
// also covers acknowledged jobs the stream still keeps). In-flight messages
// are counted in SkippedInFlight and take no part in grouping: a job already
// running may have read its inputs before the copies queued behind it were
// published, so it does not cover them, and the oldest pending message of
// its identity is kept rather than removed as its duplicate.
//
// Without Apply nothing is deleted. With Apply each duplicate is deleted
// with Stream.DeleteMsg, after the consumers are read again just before, so
// one that a worker took since the scan is left alone (OutcomeInFlight).
// This narrows the race with a starting worker but cannot close it: stop
// the workers of the types being cleaned for a guarantee. Messages
// published after Dedupe starts are not read.
//
// On an error the report says what was done so far.
func Dedupe(ctx context.Context, js jetstream.JetStream, opts DedupeOptions) (DedupeReport, error) {
	return dedupe(ctx, js, opts, nil)
}

// dedupe is Dedupe with a hook run between the scan and the deletions, for
// tests of the race with a worker.
func dedupe(ctx context.Context, js jetstream.JetStream, opts DedupeOptions, afterScan func()) (DedupeReport, error) {
	opts = opts.withDefaults()
	d := &deduper{
		opts:    opts,
		log:     opts.Logger.With("stream", opts.Stream),
		schemes: map[string]*fingerprint.Scheme{},
		groups:  map[identity]*DedupeGroup{},
		rounds:  map[identity][]string{},
		args:    map[identity][]string{},
		rep:     DedupeReport{Stream: opts.Stream, Applied: opts.Apply},
	}
	if err := opts.validate(); err != nil {
		return d.rep, err
	}
	if js == nil {
		return d.rep, fmt.Errorf("%w: nil JetStream", ErrInvalidOptions)
	}
	var err error
	if d.stream, err = js.Stream(ctx, opts.Stream); err != nil {
		return d.rep, fmt.Errorf("%w: stream %s: %w", ErrJetStream, opts.Stream, err)
	}
	if err := d.scan(ctx); err != nil {
		return d.rep, err
	}
	if afterScan != nil {
		afterScan()
	}
	if opts.Apply {
		err = d.apply(ctx)
	}
	r := d.rep
	d.log.InfoContext(ctx, "admin: dedupe done", "applied", opts.Apply, "scanned", r.Scanned, "kept", r.Kept,
		"duplicates", r.Duplicates, "removed", r.Removed, "in_flight", r.SkippedInFlight, "unreadable", r.SkippedUnreadable)
	return r, err
}

// identity names "the same job": its type and a 64-hex-digit digest
// (Coalesce-Key or fp1).
type identity struct{ jobType, key string }

type deduper struct {
	stream  jetstream.Stream
	opts    DedupeOptions
	log     *slog.Logger
	schemes map[string]*fingerprint.Scheme
	groups  map[identity]*DedupeGroup
	rounds  map[identity][]string // round tokens kept per identity
	args    map[identity][]string // args digests of kept accumulate/last jobs
	rep     DedupeReport
}

// scan reads the job messages and fills the report.
func (d *deduper) scan(ctx context.Context) error {
	floors, err := d.consumers(ctx)
	if err != nil {
		return err
	}
	info, err := d.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("%w: stream %s info: %w", ErrJetStream, d.opts.Stream, err)
	}
	first, last := max(info.State.FirstSeq, 1), info.State.LastSeq
	// The job subjects: each type's run subjects (coalesce's jobs) and its
	// older job subject (jobs of older producers, or of another queue the
	// producers used to publish to). Read together in stream order, so the
	// oldest message of an identity is kept whichever subject it is on.
	type cursor struct {
		subject, jobType string
		msg              *jetstream.RawStreamMsg
	}
	var cursors []*cursor
	if len(d.opts.Types) == 0 {
		cursors = []*cursor{{subject: d.opts.Subjects.AllRuns()}, {subject: d.opts.Subjects.AllJobs()}}
	}
	for _, t := range slices.Compact(slices.Sorted(slices.Values(d.opts.Types))) {
		for _, subj := range d.opts.Subjects.Consumer(t) {
			cursors = append(cursors, &cursor{subject: subj, jobType: t})
		}
	}
	next := func(c *cursor, seq uint64) error {
		// Next message on the filter at or after seq: skips deleted
		// sequences and other subjects on the server.
		msg, err := d.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(c.subject))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			c.msg = nil
		case err != nil:
			return fmt.Errorf("%w: stream %s: read %s from sequence %d: %w", ErrJetStream, d.opts.Stream, c.subject, seq, err)
		case msg.Sequence > last:
			c.msg = nil
		default:
			c.msg = msg
		}
		return nil
	}
	for _, c := range cursors {
		if err := next(c, first); err != nil {
			return err
		}
	}
	jobsPrefix := d.opts.Subjects.Job("")
	for {
		var c *cursor
		for _, cc := range cursors {
			if cc.msg != nil && (c == nil || cc.msg.Sequence < c.msg.Sequence) {
				c = cc
			}
		}
		if c == nil {
			break
		}
		msg := c.msg
		jobType := c.jobType
		if jobType == "" {
			jobType = cmp.Or(d.opts.Subjects.RunType(msg.Subject), strings.TrimPrefix(msg.Subject, jobsPrefix))
		}
		d.classify(msg, jobType, floors)
		if err := next(c, msg.Sequence+1); err != nil {
			return err
		}
	}
	groups := make([]DedupeGroup, 0, len(d.groups))
	for _, g := range d.groups {
		if len(g.Duplicates) > 0 {
			groups = append(groups, *g)
		}
	}
	slices.SortFunc(groups, func(a, b DedupeGroup) int { return cmp.Compare(a.Kept, b.Kept) })
	d.rep.Groups = groups
	return nil
}

// classify counts one scanned message as in flight, unreadable, kept or a
// duplicate.
func (d *deduper) classify(msg *jetstream.RawStreamMsg, jobType string, floors []consumerFloor) {
	d.rep.Scanned++
	log := d.log.With("seq", msg.Sequence, "job_type", jobType)
	if by := deliveredBy(floors, msg.Subject, msg.Sequence); by != "" {
		d.rep.SkippedInFlight++
		log.Debug("admin: job in flight; left alone", "consumer", by)
		return
	}
	key, round, err := d.identify(jobType, msg)
	if err != nil {
		d.rep.SkippedUnreadable++
		log.Warn("admin: unreadable job; left alone", "err", err)
		return
	}
	id := identity{jobType, key}
	g := d.groups[id]
	// For payload accumulate and last a job's args are data (an item, the
	// latest args) that another job of the key does not carry: a job is a
	// duplicate only of a kept job with the same args.
	args := ""
	if pl := debounce.Payload(msg.Header.Get(publisher.HeaderPayload)); pl == debounce.PayloadAccumulate || pl == debounce.PayloadLast {
		args = argsDigest(jobType, msg.Data)
	}
	switch {
	case g == nil:
		d.groups[id] = &DedupeGroup{Type: jobType, Key: key, Kept: msg.Sequence}
		if round != "" {
			d.rounds[id] = []string{round}
		}
		d.keepArgs(id, args)
		d.rep.Kept++
	case round != "" && !slices.Contains(d.rounds[id], round):
		d.rounds[id] = append(d.rounds[id], round)
		g.KeptRounds = append(g.KeptRounds, msg.Sequence)
		d.keepArgs(id, args)
		d.rep.Kept++
		log.Debug("admin: another round of the key; kept", "key", key, "token", round)
	case args != "" && round == "" && !slices.Contains(d.args[id], args):
		g.KeptRounds = append(g.KeptRounds, msg.Sequence)
		d.keepArgs(id, args)
		d.rep.Kept++
		log.Debug("admin: a job without a round whose args no kept job of the key has; kept", "key", key)
	default:
		g.Duplicates = append(g.Duplicates, DedupeDuplicate{Seq: msg.Sequence, Subject: msg.Subject, Outcome: OutcomeWouldRemove})
		d.rep.Duplicates++
		log.Debug("admin: duplicate job", "key", key, "kept_seq", g.Kept, "outcome", string(OutcomeWouldRemove))
	}
}

// keepArgs remembers the args digest of a kept job of id ("" : none).
func (d *deduper) keepArgs(id identity, args string) {
	if args != "" {
		d.args[id] = append(d.args[id], args)
	}
}

// argsDigest is the fp1 digest of a job's whole args, or a digest of the
// raw bytes when they are not I-JSON (then only an identical copy matches).
func argsDigest(jobType string, data []byte) string {
	if f, err := fingerprint.FromJSON(jobType, data); err == nil {
		return f.String()
	}
	return "raw:" + string(data)
}

// identify returns the identity digest of a job message and its round token
// ("" for messages without one).
func (d *deduper) identify(jobType string, msg *jetstream.RawStreamMsg) (key, round string, err error) {
	if k := msg.Header.Get(publisher.HeaderKey); k != "" {
		f, err := fingerprint.Parse(k)
		if err != nil {
			return "", "", fmt.Errorf("header %s: %w", publisher.HeaderKey, err)
		}
		if t := msg.Header.Get(publisher.HeaderType); t != "" && t != jobType {
			return "", "", fmt.Errorf("header %s %q does not match the subject's job type %q", publisher.HeaderType, t, jobType)
		}
		return f.String(), msg.Header.Get(publisher.HeaderRound), nil
	}
	s := d.schemes[jobType]
	if s == nil {
		if s, err = fingerprint.NewScheme(jobType, d.opts.Fields[jobType]...); err != nil {
			return "", "", err
		}
		d.schemes[jobType] = s
	}
	fp, err := s.FromJSON(msg.Data)
	if err != nil {
		return "", "", err
	}
	return fp.String(), "", nil
}

// apply deletes the duplicates found by scan, re-reading the consumers before
// each one.
func (d *deduper) apply(ctx context.Context) error {
	for gi := range d.rep.Groups {
		g := &d.rep.Groups[gi]
		for i := range g.Duplicates {
			dup := &g.Duplicates[i]
			subject := dup.Subject
			log := d.log.With("seq", dup.Seq, "job_type", g.Type, "key", g.Key, "kept_seq", g.Kept)
			floors, err := d.consumers(ctx)
			if err != nil {
				return err
			}
			if by := deliveredBy(floors, subject, dup.Seq); by != "" {
				dup.Outcome = OutcomeInFlight
				log.Info("admin: duplicate taken by a consumer since the scan; left alone", "consumer", by, "outcome", string(dup.Outcome))
				continue
			}
			if err := d.stream.DeleteMsg(ctx, dup.Seq); err != nil {
				// A worker may have acknowledged it (a WorkQueue stream then
				// drops it) or someone deleted it meanwhile.
				if _, gerr := d.stream.GetMsg(ctx, dup.Seq); errors.Is(gerr, jetstream.ErrMsgNotFound) {
					dup.Outcome = OutcomeGone
					log.Info("admin: duplicate no longer in the stream", "outcome", string(dup.Outcome))
					continue
				}
				return fmt.Errorf("%w: stream %s: delete %s job at sequence %d: %w", ErrJetStream, d.opts.Stream, g.Type, dup.Seq, err)
			}
			dup.Outcome = OutcomeRemoved
			d.rep.Removed++
			log.Info("admin: duplicate job removed", "outcome", string(dup.Outcome))
		}
	}
	return nil
}

// consumerFloor is what one consumer has taken: the subjects it reads and
// the last stream sequence it delivered.
type consumerFloor struct {
	name      string
	filters   []string // empty: the whole stream
	delivered uint64
}

// consumers reads the delivery state of every consumer of the stream.
func (d *deduper) consumers(ctx context.Context) ([]consumerFloor, error) {
	lister := d.stream.ListConsumers(ctx)
	var floors []consumerFloor
	for ci := range lister.Info() { // drained to the end: the lister's goroutine blocks otherwise
		f := consumerFloor{name: ci.Name, filters: ci.Config.FilterSubjects, delivered: ci.Delivered.Stream}
		if ci.Config.FilterSubject != "" {
			f.filters = append(f.filters, ci.Config.FilterSubject)
		}
		floors = append(floors, f)
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("%w: stream %s: list consumers: %w", ErrJetStream, d.opts.Stream, err)
	}
	return floors, nil
}

// deliveredBy returns the name of a consumer that reads subject and has
// delivered seq (or a later message), or "" when none has.
func deliveredBy(floors []consumerFloor, subject string, seq uint64) string {
	for _, f := range floors {
		if seq > f.delivered {
			continue
		}
		if len(f.filters) == 0 {
			return f.name
		}
		for _, filter := range f.filters {
			if subjectMatches(filter, subject) {
				return f.name
			}
		}
	}
	return ""
}

// subjectMatches reports whether the literal subject matches filter, a NATS
// subject that may hold the wildcards * (one token) and > (the rest, at
// least one token).
func subjectMatches(filter, subject string) bool {
	for {
		ft, frest, fmore := strings.Cut(filter, ".")
		st, srest, smore := strings.Cut(subject, ".")
		switch {
		case ft == ">":
			return st != ""
		case ft != "*" && ft != st, st == "":
			return false
		case !fmore || !smore:
			return fmore == smore
		}
		filter, subject = frest, srest
	}
}
