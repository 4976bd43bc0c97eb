// Package publisher turns rounds into JetStream messages: a job published at
// once, or an ADR-51 message schedule that the server fires on the job
// subject at the round's due time, replaced by a reschedule and purged by a
// cancel.
package publisher

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Publisher publishes jobs on one stream. It implements debounce.Publisher
// and is safe for concurrent use: concurrent Publish calls pipeline on the
// JetStream connection (async publish, one ack wait per call).
type Publisher struct {
	js        jetstream.JetStream
	stream    jetstream.Stream // for lookups (Pending)
	cfg       Config
	subjects  Subjects
	log       *slog.Logger
	version   string // server version found at New
	apiPrefix string // JetStream API prefix of js, for raw requests
}

var (
	_ debounce.Publisher = (*Publisher)(nil)
	_ debounce.Locator   = (*Publisher)(nil)
)

// New checks that the server js is connected to runs nats-server >=
// MinServerVersion, then creates the stream or updates it to cfg
// (idempotent: running New again with the same config changes nothing, with
// another config updates what the server lets change). A nil cfg takes the
// defaults. The server version is checked before anything is created: an
// older server would accept the stream and never fire a schedule
// (ErrServerTooOld), and a stream echoed back without AllowMsgSchedules is
// refused too (ErrSchedulesDisabled).
//
// The async publishes of js are used as they are configured: its
// PublishAsyncMaxPending bounds the messages in flight, past which Publish
// backs off and retries. Give js a WithPublishAsyncTimeout (a little over
// Config.AckTimeout) so the slot of an ack that never comes is freed too.
func New(ctx context.Context, js jetstream.JetStream, cfg *Config) (*Publisher, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: nil JetStream", ErrInvalidConfig)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	p := &Publisher{
		js:        js,
		cfg:       c,
		subjects:  Subjects{Prefix: c.Prefix},
		log:       c.Logger,
		apiPrefix: apiPrefix(js.Options()),
	}
	if err := p.provision(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// apiPrefix is the subject prefix js sends JetStream API requests to.
func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	default:
		return jetstream.DefaultAPIPrefix
	}
}

func (p *Publisher) provision(ctx context.Context) error {
	p.version = p.js.Conn().ConnectedServerVersion()
	if err := CheckServerVersion(p.version); err != nil {
		return err // before any request: nothing is created on an old server
	}
	return p.ensureStream(ctx)
}

// ensureStream creates or updates the stream and checks the server kept
// AllowMsgSchedules.
func (p *Publisher) ensureStream(ctx context.Context) error {
	sc := p.cfg.streamConfig()
	s, err := Provision(ctx, p.js, sc)
	if err != nil {
		return err
	}
	p.stream = s
	info := s.CachedInfo()
	if info == nil || !info.Config.AllowMsgSchedules {
		return fmt.Errorf("%w: stream %s on nats-server %s came back without allow_msg_schedules; schedules would be stored and never fire (need nats-server >= %s)",
			ErrSchedulesDisabled, sc.Name, p.version, MinServerVersion)
	}
	p.log.InfoContext(ctx, "publisher: stream ready", "stream", sc.Name, "subjects", sc.Subjects,
		"retention", string(p.cfg.Retention), "storage", string(p.cfg.Storage), "duplicates", p.cfg.Duplicates,
		"server_version", p.version)
	return nil
}

// CheckServerVersion returns nil when version (as nats.Conn reports it) is
// at least MinServerVersion, else an ErrServerTooOld naming both.
func CheckServerVersion(version string) error {
	major, minor, ok := parseVersion(version)
	if !ok {
		return fmt.Errorf("%w: cannot read the nats-server version %q; coalesce needs nats-server >= %s (message schedules)", ErrServerTooOld, version, MinServerVersion)
	}
	if major < 2 || major == 2 && minor < 12 {
		return fmt.Errorf("%w: connected to nats-server %s; coalesce needs nats-server >= 2.12 (message schedules, ADR-51): older servers store schedules and never fire them", ErrServerTooOld, version)
	}
	return nil
}

// parseVersion reads major and minor from "2.12.1", "v2.12.0-RC.3" and the like.
func parseVersion(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	n := 0
	for n < len(parts[1]) && parts[1][n] >= '0' && parts[1][n] <= '9' {
		n++
	}
	minor, err2 := strconv.Atoi(parts[1][:n])
	return major, minor, err1 == nil && err2 == nil
}

// Subjects returns the subjects of the publisher's prefix.
func (p *Publisher) Subjects() Subjects { return p.subjects }

// MaxAge is how long the stream keeps a job no worker has taken (Config.MaxAge);
// a Coalescer built on this publisher keeps its rounds as long.
func (p *Publisher) MaxAge() time.Duration { return p.cfg.MaxAge }

// Stream returns the stream's name.
func (p *Publisher) Stream() string { return p.cfg.Stream }

// ServerVersion returns the nats-server version found by New.
func (p *Publisher) ServerVersion() string { return p.version }

// Message returns the message Publish would send for job at now: on the
// round's run subject when the job is immediate or already due (first
// version), else a schedule on the round's schedule subject targeting the run
// subject. Headers are
// EncodeHeaders(job) plus Nats-Msg-Id (key, token and version; a bypassed
// job's Bypass, made here if it has none) and, for a schedule,
// Nats-Schedule ("@at" RFC 3339 with nanoseconds, UTC) and
// Nats-Schedule-Target.
func (p *Publisher) Message(job debounce.Job, now time.Time) (*nats.Msg, error) {
	if job.Token == 0 && job.Bypass == "" {
		job.Bypass = debounce.NewBypass()
	}
	if err := validateJob(job); err != nil {
		return nil, err
	}
	h := EncodeHeaders(job)
	round := job.Token.String()
	if job.Token == 0 {
		// Its own subject token and message id: never deduplicated, never
		// replaces another schedule.
		round = job.Bypass
		h.Set(jetstream.MsgIDHeader, round)
	} else {
		// The key is part of the id: a token is unique per key only, and
		// JetStream deduplicates ids across the whole stream.
		id := job.Key.String() + "-" + round + "-" + strconv.Itoa(job.Version)
		if job.Forward != "" {
			id += "-" + job.Forward
		}
		h.Set(jetstream.MsgIDHeader, id)
	}
	target := p.subjects.run(job.Type, job.Key, round)
	m := &nats.Msg{Subject: target, Header: h, Data: job.Args}
	// A reschedule (Version > 0) always goes on the round's schedule subject,
	// even when due now or past: it must replace the pending schedule, which
	// would otherwise fire too. The server fires a past @at within ~250ms.
	if !job.Immediate() && (job.DueAt.After(now) || job.Version > 0) {
		m.Subject = p.subjects.roundSchedule(job.Type, job.Key, round)
		// Set by hand: jetstream.WithScheduleAt drops the fraction of a second.
		h.Set(jetstream.ScheduleHeader, "@at "+job.DueAt.UTC().Format(time.RFC3339Nano))
		h.Set(jetstream.ScheduleTargetHeader, target)
	}
	return m, nil
}

// jobSlack is room kept in a message for the headers a reschedule, a
// retry or a dead letter adds to a job.
const jobSlack = 1 << 10

// MaxPayload is the largest message the NATS server takes, headers
// included (its max_payload); 0 when not connected.
func (p *Publisher) MaxPayload() int64 { return p.js.Conn().MaxPayload() }

// JobFits returns nil when job makes a message within the server's max
// payload, with room for the headers a reschedule or a dead letter adds;
// else an error wrapping debounce.ErrJobTooLarge with both sizes. The
// Coalescer asks before it reserves a round for a large event.
func (p *Publisher) JobFits(job debounce.Job) error {
	limit := p.MaxPayload()
	if limit <= 0 {
		return nil // not connected: the publish will say
	}
	now := time.Now()
	probe := job // the longest headers the job can get
	probe.Token, probe.Version, probe.OpenedAt = ^debounce.Token(0), 1<<30, now
	if probe.DueAt.IsZero() {
		probe.DueAt = now.Add(time.Hour)
	}
	m, err := p.Message(probe, now)
	if err != nil {
		return nil // refused by the publish itself, with its own error
	}
	size := int64(len(m.Data) + headerSize(m.Header) + jobSlack)
	if size <= limit {
		return nil
	}
	return fmt.Errorf("%w: a %s job of about %d bytes (args %d) is over the NATS server's max payload of %d bytes; send smaller args (ids, not documents) or raise max_payload",
		debounce.ErrJobTooLarge, job.Type, size, len(job.Args), limit)
}

// headerSize is the size of h on the wire (NATS/1.0 status line, a line
// per value, the blank line).
func headerSize(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}

func validateJob(job debounce.Job) error {
	if err := validateJobType(job.Type); err != nil {
		return err
	}
	if job.Version < 0 {
		return fmt.Errorf("%w: %s: version %d is negative", ErrInvalidJob, job.Type, job.Version)
	}
	if job.Bypass != "" && (job.Token != 0 || !debounce.ValidBypass(job.Bypass)) {
		return fmt.Errorf("%w: %s: bypass %q: want _ and 16 lowercase hex digits, on a job without a token", ErrInvalidJob, job.Type, job.Bypass)
	}
	for name, v := range map[string]string{HeaderMode: string(job.Mode), HeaderPayload: string(job.Payload), HeaderTraceParent: job.TraceParent} {
		if !headerSafe(v) || len(v) > 512 {
			return fmt.Errorf("%w: %s: %s must be printable ASCII up to 512 bytes", ErrInvalidJob, job.Type, name)
		}
	}
	return nil
}

// Publish sends job and waits for the stream's ack: at once on the job
// subject when job.DueAt is zero or past, else as a schedule that fires on
// the job subject at DueAt. A schedule replaces the pending schedule of the
// same round (same token), so a later Version reschedules the round. The
// same (Token, Version) published twice within the Duplicates window is
// stored once. Stalls, ack timeouts and no-responders are retried with
// backoff, up to MaxAttempts while ctx lives; failures wrap ErrPublish.
//
// A reschedule (Version > 0) due now or in the past is still sent as a
// schedule, replacing the round's pending one, and fires at once. An
// immediate publish does not purge a pending schedule: call Cancel for that.
func (p *Publisher) Publish(ctx context.Context, job debounce.Job) error {
	start := time.Now()
	m, err := p.Message(job, p.cfg.Now())
	if err != nil {
		p.observe(job, nil, nil, 0, start, err)
		return err
	}
	ack, attempts, err := p.send(ctx, m, nil)
	return p.finish(ctx, job, m, ack, attempts, start, err)
}

// PublishBatch publishes jobs like Publish, sending them all before waiting
// for their acks, and returns one error per job (nil when published).
func (p *Publisher) PublishBatch(ctx context.Context, jobs []debounce.Job) []error {
	start := time.Now()
	now := p.cfg.Now()
	errs := make([]error, len(jobs))
	msgs := make([]*nats.Msg, len(jobs))
	futs := make([]jetstream.PubAckFuture, len(jobs))
	for i, job := range jobs {
		if msgs[i], errs[i] = p.Message(job, now); errs[i] != nil {
			p.observe(job, nil, nil, 0, start, errs[i])
			continue
		}
		futs[i], _ = p.js.PublishMsgAsync(copyMsg(msgs[i])) // a failure here is retried by send
	}
	for i, job := range jobs {
		if msgs[i] == nil {
			continue
		}
		ack, attempts, err := p.send(ctx, msgs[i], futs[i])
		errs[i] = p.finish(ctx, job, msgs[i], ack, attempts, start, err)
	}
	return errs
}

func (p *Publisher) finish(ctx context.Context, job debounce.Job, m *nats.Msg, ack *jetstream.PubAck, attempts int, start time.Time, err error) error {
	var uncertain *uncertainError
	switch {
	case errors.As(err, &uncertain):
		// An attempt was sent and never answered: it may be stored.
		err = fmt.Errorf("%w: %w: %s round %s version %d on %s after %d attempts: %w",
			ErrPublish, debounce.ErrMaybePublished, job.Type, job.Token, job.Version, m.Subject, attempts, uncertain.err)
	case errors.Is(err, nats.ErrMaxPayload):
		// It can never be stored: not a failure to retry.
		err = fmt.Errorf("%w: %w: %s round %s: a message of %d bytes (args %d) is over the NATS server's max payload of %d bytes: %w",
			ErrPublish, debounce.ErrJobTooLarge, job.Type, job.Token, len(m.Data)+headerSize(m.Header), len(m.Data), p.MaxPayload(), err)
	case err != nil:
		err = fmt.Errorf("%w: %s round %s version %d on %s after %d attempts: %w",
			ErrPublish, job.Type, job.Token, job.Version, m.Subject, attempts, err)
	case ack.Duplicate:
		p.log.DebugContext(ctx, "publisher: duplicate round version", "job_type", job.Type,
			"key", job.Key.String(), "token", job.Token.String(), "version", job.Version)
	}
	p.observe(job, m, ack, attempts, start, err)
	return err
}

func (p *Publisher) observe(job debounce.Job, m *nats.Msg, ack *jetstream.PubAck, attempts int, start time.Time, err error) {
	if p.cfg.OnPublish == nil {
		return
	}
	info := PublishInfo{JobType: job.Type, Attempts: attempts, Latency: time.Since(start), Err: err}
	if m != nil {
		info.Subject = m.Subject
		info.Scheduled = m.Header.Get(jetstream.ScheduleHeader) != ""
	}
	if ack != nil {
		info.Duplicate = ack.Duplicate
	}
	p.cfg.OnPublish(info)
}

// copyMsg returns a fresh message sharing m's (read-only) header and data:
// a retry must not reuse a message the client still holds for an old attempt.
func copyMsg(m *nats.Msg) *nats.Msg {
	return &nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}
}

// uncertainError is a failed publish one of whose attempts was sent and
// never answered (an ack timeout, the context ending, the connection lost
// after sending): the message may be in the stream.
type uncertainError struct{ err error }

func (e *uncertainError) Error() string { return e.err.Error() }
func (e *uncertainError) Unwrap() error { return e.err }

// unanswered reports an error after which a sent message may be stored.
func unanswered(err error) bool {
	return errors.Is(err, jetstream.ErrAsyncPublishTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrConnectionClosed)
}

// send publishes m asynchronously and waits for its ack, retrying what may
// pass (stalled client, ack timeout, no responders, disconnect). first, when
// not nil, is the future of an attempt already sent. When it fails after an
// attempt that was sent and never answered, the error is an
// *uncertainError.
func (p *Publisher) send(ctx context.Context, m *nats.Msg, first jetstream.PubAckFuture) (*jetstream.PubAck, int, error) {
	if err := ctx.Err(); err != nil && first == nil {
		return nil, 0, err
	}
	var lastErr error
	uncertain := false
	fail := func(err error) error {
		if uncertain {
			return &uncertainError{err}
		}
		return err
	}
	for attempt := 1; ; attempt++ {
		fut, err := first, error(nil)
		if first == nil || attempt > 1 {
			fut, err = p.js.PublishMsgAsync(copyMsg(m))
		}
		if err == nil {
			var ack *jetstream.PubAck
			if ack, err = p.await(ctx, fut); err == nil {
				return ack, attempt, nil
			}
			uncertain = uncertain || unanswered(err)
		}
		lastErr = err
		if ctx.Err() != nil {
			return nil, attempt, fail(errors.Join(lastErr, ctx.Err()))
		}
		if !retryable(err) || attempt >= p.cfg.MaxAttempts {
			return nil, attempt, fail(lastErr)
		}
		wait := p.backoff(attempt)
		p.log.DebugContext(ctx, "publisher: retrying", "subject", m.Subject, "attempt", attempt, "wait", wait, "error", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, attempt, fail(errors.Join(lastErr, ctx.Err()))
		case <-t.C:
		}
	}
}

func (p *Publisher) await(ctx context.Context, fut jetstream.PubAckFuture) (*jetstream.PubAck, error) {
	t := time.NewTimer(p.cfg.AckTimeout)
	defer t.Stop()
	select {
	case ack := <-fut.Ok():
		return ack, nil
	case err := <-fut.Err():
		return nil, err
	case <-t.C:
		return nil, jetstream.ErrAsyncPublishTimeout
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// backoff is the pause after attempt: RetryBackoff doubled per attempt, capped
// at MaxRetryBackoff, with half of it jittered so stalled callers spread out.
func (p *Publisher) backoff(attempt int) time.Duration {
	d := p.cfg.RetryBackoff << min(attempt-1, 16)
	if d <= 0 || d > MaxRetryBackoff {
		d = MaxRetryBackoff
	}
	return d/2 + rand.N(d/2+1)
}

// retryable reports whether a publish error may pass on its own. Errors the
// stream answered with (bad subject, schedules disabled, ...) do not.
func retryable(err error) bool {
	return errors.Is(err, jetstream.ErrTooManyStalledMsgs) ||
		errors.Is(err, jetstream.ErrAsyncPublishTimeout) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrConnectionReconnecting)
}

// Pending reports whether the stream still holds a message of job's round:
// its pending schedule, or its job on the round's run subject (waiting for a
// worker, or held by one). It implements debounce.Locator: the reaper asks
// it before it publishes a round's job again. The schedule is looked up
// first: a schedule that fires meanwhile has stored its job by then.
func (p *Publisher) Pending(ctx context.Context, job debounce.Job) (bool, error) {
	if job.Token == 0 {
		return false, fmt.Errorf("%w: %s: a bypassed job has no round to look up", ErrInvalidJob, job.Type)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cmp.Or(p.js.Options().DefaultTimeout, 5*time.Second))
		defer cancel()
	}
	for _, subj := range []string{p.subjects.Schedule(job.Type, job.Key, job.Token), p.subjects.Run(job.Type, job.Key, job.Token)} {
		_, err := p.stream.GetLastMsgForSubject(ctx, subj)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, fmt.Errorf("publisher: look up %s on stream %s: %w", subj, p.cfg.Stream, err)
		}
	}
	return false, nil
}

// FindRound looks for a message of a round of jobType whose token is token,
// whatever its key (a schedule or a job), and returns the key it carries. It
// implements the reaper's lookup of a packed round, whose Redis key holds
// only part of its round key. The lookup filters subjects by wildcard, so
// it costs in proportion to the type's pending rounds: for rare cases only.
func (p *Publisher) FindRound(ctx context.Context, jobType string, token debounce.Token) (debounce.RoundKey, bool, error) {
	if err := validateJobType(jobType); err != nil {
		return debounce.RoundKey{}, false, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cmp.Or(p.js.Options().DefaultTimeout, 5*time.Second))
		defer cancel()
	}
	pre := p.subjects.prefix()
	for _, subj := range []string{pre + ".sched." + jobType + ".*." + token.String(), pre + ".run." + jobType + ".*." + token.String()} {
		m, err := p.stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return debounce.RoundKey{}, false, fmt.Errorf("publisher: look up %s on stream %s: %w", subj, p.cfg.Stream, err)
		}
		key, err := debounce.ParseRoundKey(m.Header.Get(HeaderKey))
		if err != nil {
			return debounce.RoundKey{}, false, fmt.Errorf("publisher: %s: %w", m.Subject, err)
		}
		return key, true, nil
	}
	return debounce.RoundKey{}, false, nil
}

// Cancel purges the messages of one round of key, or, for the zero token,
// of every round of key: its pending schedule and its job not yet taken (a
// job a worker holds is removed from the stream, and its Start finds the
// round cancelled). It returns how many messages were purged (0 when
// nothing was pending: already run, cancelled or never scheduled).
func (p *Publisher) Cancel(ctx context.Context, jobType string, key debounce.RoundKey, token debounce.Token) (uint64, error) {
	if err := validateJobType(jobType); err != nil {
		return 0, err
	}
	subjects := []string{p.subjects.Schedule(jobType, key, token), p.subjects.Run(jobType, key, token)}
	if token == 0 {
		subjects[1] = p.subjects.prefix() + ".run." + jobType + "." + key.String() + ".*"
	}
	var total uint64
	for _, subj := range subjects {
		n, err := p.purge(ctx, subj)
		if err != nil {
			return total, fmt.Errorf("%w: %s key %s round %s: purge %s: %w", ErrCancel, jobType, key, token, subj, err)
		}
		total += n
	}
	p.log.DebugContext(ctx, "publisher: cancelled", "job_type", jobType, "key", key.String(), "token", token.String(), "purged", total)
	return total, nil
}

// purge runs a subject-filtered stream purge and returns the purged count,
// which jetstream.Stream.Purge does not report.
func (p *Publisher) purge(ctx context.Context, filter string) (uint64, error) {
	req, err := json.Marshal(jetstream.StreamPurgeRequest{Subject: filter})
	if err != nil {
		return 0, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cmp.Or(p.js.Options().DefaultTimeout, 5*time.Second))
		defer cancel()
	}
	msg, err := p.js.Conn().RequestWithContext(ctx, p.apiPrefix+"STREAM.PURGE."+p.cfg.Stream, req)
	if err != nil {
		return 0, err
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Success bool                `json:"success"`
		Purged  uint64              `json:"purged"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return 0, fmt.Errorf("purge response %q: %w", msg.Data, err)
	}
	if resp.Error != nil {
		return 0, resp.Error
	}
	if !resp.Success {
		return 0, fmt.Errorf("purge response %q: not successful", msg.Data)
	}
	return resp.Purged, nil
}
