// Package worker runs coalesce jobs: it consumes the jobs of chosen types
// from JetStream with a durable pull consumer, closes each job's round as the
// job starts (so events from then on open the next round), hands the handler
// the job and its round summary, acknowledges on success, retries with
// backoff on failure, and dead-letters a job that keeps failing.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/jsread"
	"github.com/coalesce-io/coalesce/publisher"
)

// Defaults of Config.
const (
	DefaultDurable         = "coalesce"
	DefaultConcurrency     = 4
	DefaultMaxDeliver      = 5
	DefaultAckWait         = 30 * time.Second
	DefaultShutdownTimeout = 30 * time.Second
)

// DefaultBackoff is the wait before the 1st, 2nd, ... retry of a failed job;
// the last value repeats.
var DefaultBackoff = []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute}

// Sentinel errors.
var (
	ErrInvalidConfig = errors.New("worker: invalid config")
	ErrConsumer      = errors.New("worker: consumer")
)

// Job is what a handler runs: the job as published plus what its round held
// when the job started.
type Job struct {
	debounce.Job
	// Summary: events coalesced into the round, first and last seen, and the
	// last args (payload last) or the distinct items (payload accumulate).
	Summary debounce.Summary
	// Release says what closing the round found: released, retry (an
	// earlier delivery closed it), stale_token, missing, skipped.
	Release debounce.ReleaseResult
	// Attempt is 1 for the first run of this job. For a job with a round
	// it counts the deliveries that reached the round (see
	// debounce.Release.Starts), so a delivery that died unstarted in a
	// killed worker is no attempt; otherwise it is the delivery number.
	Attempt int
	// Replay is set on a dead letter replayed (coalesce dead replay): the
	// dead letter's stream sequence. Such a job runs with the summary its
	// dead letter kept and release "replayed", without its round.
	Replay string
}

// ReleaseReplayed is the Release of a replayed dead letter.
const ReleaseReplayed debounce.ReleaseResult = "replayed"

// ReplayOf reads a job message: its args (the body, or from a body that
// also holds its summary: PackSummary) and, for a replayed dead letter, the
// dead letter's sequence ("" when it is no replay) and the summary it kept.
func ReplayOf(h map[string][]string, data []byte) (seq string, sum debounce.Summary, args []byte, err error) {
	args, sum, _, err = UnpackSummary(h, data)
	if seq = nats.Header(h).Get(HeaderReplay); seq == "" {
		sum = debounce.Summary{}
	}
	return seq, sum, args, err
}

// Handler runs one job. Return nil when done; an error to retry later (with
// backoff, up to MaxDeliver deliveries); Permanent(err) to dead-letter at once.
// ctx ends when the worker shuts down past its ShutdownTimeout.
type Handler func(ctx context.Context, job *Job) error

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks a handler error as not worth retrying: the job goes to the
// dead-letter subject at once.
func Permanent(err error) error { return permanentError{err} }

// JobResult is what became of one delivery of a job.
type JobResult string

// The results of a delivery.
const (
	JobOK            JobResult = "ok"                // ran and succeeded: acknowledged
	JobRetry         JobResult = "retry"             // failed (or could not start): delivered again after a backoff
	JobDead          JobResult = "dead"              // dead-lettered: a permanent failure, or attempts used up
	JobRescheduled   JobResult = "rescheduled"       // an extended round not due yet: waits for its later schedule
	JobSuperseded    JobResult = "superseded"        // another message of the round took it: not run
	JobDone          JobResult = "done"              // the round's job already finished: not run
	JobDuplicateDone JobResult = "duplicate_done"    // the run-once guard found it done: not run
	JobDuplicateBusy JobResult = "duplicate_running" // the run-once guard found it running elsewhere: delivered again later
	JobReleaseFailed JobResult = "release_failed"    // Redis could not close the round: delivered again
	JobKeyBusy       JobResult = "key_busy"          // an exclusive key's other job runs: delivered again shortly, no attempt
	JobOtherStore    JobResult = "other_store"       // reserved in another Redis than this worker's: not run, left for another worker
)

// Hooks are called for what is worth counting; nil funcs are skipped.
type Hooks struct {
	// Job is called once per delivery with its result.
	Job func(jobType string, result JobResult, release debounce.ReleaseResult, took time.Duration)
	// RoundAge is called as a job starts: from its round's first event.
	RoundAge func(jobType string, age time.Duration, events int)
	// Guard is called with each run-once guard decision.
	Guard func(jobType string, result GuardResult)
	// KeyWait is called as an exclusive job starts after waiting for its
	// key: how long since its first delivery found the key busy.
	KeyWait func(jobType string, waited time.Duration)
	// Span, when set, is called as a stage of a delivery begins: "start"
	// (closing the round) and "run" (the handler). It returns the context
	// the stage runs with and a func called with its error as it ends (for
	// tracing: job.TraceParent is the producer's trace context; a hook
	// may set it to its run span, which --exec and --post pass on).
	Span func(ctx context.Context, stage string, job *Job) (context.Context, func(err error))
}

// Config configures a Worker.
type Config struct {
	JetStream jetstream.JetStream // required
	Stream    string              // the Publisher's stream (a *publisher.Publisher), else publisher.DefaultStream
	Subjects  publisher.Subjects  // the Publisher's subjects (a *publisher.Publisher), else the default prefix
	// Coalescer closes rounds (it needs the same Redis, prefix and policies
	// as the producers).
	Coalescer *debounce.Coalescer
	// Publisher republishes an extended round that fired before its due time.
	Publisher debounce.Publisher
	Types     []string // job types to consume (required)
	Durable   string   // consumer name prefix; DefaultDurable; one consumer per type, shared by replicas

	Concurrency     int             // jobs run at once, all types together; DefaultConcurrency
	MaxDeliver      int             // attempts before a job is dead-lettered (see Job.Attempt); DefaultMaxDeliver
	Backoff         []time.Duration // waits before retries; DefaultBackoff
	AckWait         time.Duration   // redelivery after silence; the worker reports progress every third of it
	ShutdownTimeout time.Duration   // how long Run waits for running jobs after ctx ends

	// Guards turns on the run-once guard per job type.
	Guards map[string]GuardConfig

	// NoForwarder: Run does not publish, as they come due, the jobs of
	// rounds the producers held in Redis (debounce.SchedulesRedis, the
	// default on a single-node Redis). By default it does, with Publisher,
	// for every type its Coalescer defers: wherever jobs run, rounds are
	// forwarded (debounce.Forwarder).
	NoForwarder bool

	Logger *slog.Logger // nil discards
	Hooks  Hooks
	Now    func() time.Time // time.Now
}

// Worker consumes and runs jobs. Create it with New and start it with Run.
type Worker struct {
	cfg     Config
	guards  map[string]*guard
	log     *slog.Logger
	now     func() time.Time
	missing missingWatch
}

// New checks the configuration.
func New(cfg Config) (*Worker, error) {
	if cfg.JetStream == nil || cfg.Coalescer == nil {
		return nil, fmt.Errorf("%w: JetStream and Coalescer are required", ErrInvalidConfig)
	}
	if len(cfg.Types) == 0 {
		return nil, fmt.Errorf("%w: Types: name at least one job type to consume", ErrInvalidConfig)
	}
	// A JetStream publisher knows its stream and subjects: take them, and
	// refuse others (a worker on other subjects would silently consume
	// nothing of the producer's).
	if p, ok := cfg.Publisher.(*publisher.Publisher); ok && p != nil {
		switch {
		case cfg.Stream != "" && cfg.Stream != p.Stream():
			return nil, fmt.Errorf("%w: Stream %q differs from the Publisher's %q: leave it empty to take the Publisher's", ErrInvalidConfig, cfg.Stream, p.Stream())
		case cfg.Subjects.Prefix != "" && cfg.Subjects.Job("t") != p.Subjects().Job("t"):
			return nil, fmt.Errorf("%w: Subjects prefix %q differs from the Publisher's %q: leave Subjects empty to take the Publisher's", ErrInvalidConfig, cfg.Subjects.Prefix, p.Subjects().Prefix)
		}
		cfg.Stream, cfg.Subjects = p.Stream(), p.Subjects()
	}
	if cfg.Stream == "" {
		cfg.Stream = publisher.DefaultStream
	}
	if cfg.Durable == "" {
		cfg.Durable = DefaultDurable
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.MaxDeliver <= 0 {
		cfg.MaxDeliver = DefaultMaxDeliver
	}
	if len(cfg.Backoff) == 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = DefaultAckWait
	}
	if cfg.AckWait < 300*time.Millisecond {
		return nil, fmt.Errorf("%w: AckWait %v is shorter than 300ms", ErrInvalidConfig, cfg.AckWait)
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	w := &Worker{cfg: cfg, guards: map[string]*guard{}, log: cfg.Logger, now: cfg.Now}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if w.now == nil {
		w.now = time.Now
	}
	for typ, gc := range cfg.Guards {
		g, err := newGuard(gc)
		if err != nil {
			return nil, fmt.Errorf("guard for %s: %w", typ, err)
		}
		w.guards[typ] = g
	}
	return w, nil
}

// ConsumerName is the durable consumer of one job type: the prefix and the
// type with characters NATS does not allow in names replaced.
func ConsumerName(prefix, jobType string) string {
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteByte('_')
	for _, c := range jobType {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b.WriteRune(c)
		} else {
			fmt.Fprintf(&b, "_%02x", c) // '.' and ':' are not allowed in consumer names
		}
	}
	return b.String()
}

// Consumer creates or updates the durable consumer of one job type.
func (w *Worker) Consumer(ctx context.Context, jobType string) (jetstream.Consumer, error) {
	cons, err := w.cfg.JetStream.CreateOrUpdateConsumer(ctx, w.cfg.Stream, jetstream.ConsumerConfig{
		Durable:        ConsumerName(w.cfg.Durable, jobType),
		FilterSubjects: w.cfg.Subjects.Consumer(jobType),
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        w.cfg.AckWait,
		MaxDeliver:     -1, // the worker dead-letters after MaxDeliver itself
		MaxAckPending:  max(w.cfg.Concurrency*4, 64),
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		Description:    "coalesce worker for " + jobType,
	})
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jsConsumerNotUnique || apiErr.ErrorCode == jsMultipleUnfiltered) {
		return nil, fmt.Errorf("%w: %s on stream %s: %w: another consumer already takes these jobs (%s). "+
			"The stream is a work queue: each subject has one consumer, which many processes may share. "+
			"A worker in another language (docs/worker-protocol.md) should pull from consumer %q with these filters, "+
			"or the other consumer be deleted (nats consumer rm %s <name>)",
			ErrConsumer, jobType, w.cfg.Stream, err, strings.Join(w.cfg.Subjects.Consumer(jobType), ", "),
			ConsumerName(w.cfg.Durable, jobType), w.cfg.Stream)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s on stream %s: %w", ErrConsumer, jobType, w.cfg.Stream, err)
	}
	return cons, nil
}

// JetStream's error codes for a consumer whose subjects another consumer of
// a work-queue stream already takes.
const (
	jsConsumerNotUnique  jetstream.ErrorCode = 10100
	jsMultipleUnfiltered jetstream.ErrorCode = 10099
)

// Run consumes jobs until ctx ends, then stops taking new ones and waits up
// to ShutdownTimeout for the running ones (whose context ends after that).
func (w *Worker) Run(ctx context.Context, h Handler) error {
	// Every consumer first, so that a configuration error stops Run at once.
	first := make([]jetstream.MessagesContext, 0, len(w.cfg.Types))
	for _, typ := range w.cfg.Types {
		it, err := w.messages(ctx, typ)
		if err != nil {
			for _, it := range first {
				it.Stop()
			}
			return err
		}
		first = append(first, it)
	}
	// Handlers get a context that outlives ctx by the shutdown timeout.
	jobCtx, cancelJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelJobs()
	if !w.cfg.NoForwarder && w.cfg.Publisher != nil && w.cfg.Coalescer.Defers() {
		forwarded := make(chan struct{})
		defer func() { <-forwarded }()
		go func() {
			defer close(forwarded)
			_ = w.cfg.Coalescer.NewForwarder(w.cfg.Publisher).Run(ctx)
		}()
	}

	sem := make(chan struct{}, w.cfg.Concurrency)
	var running sync.WaitGroup
	var readers sync.WaitGroup
	for i, typ := range w.cfg.Types {
		readers.Go(func() {
			w.read(ctx, typ, first[i], sem, &running, func(msg jetstream.Msg) { w.process(jobCtx, msg, h) })
		})
	}
	<-ctx.Done()
	readers.Wait()
	done := make(chan struct{})
	go func() { running.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.cfg.ShutdownTimeout):
		w.log.Warn("worker: shutdown timeout; cancelling running jobs", "timeout", w.cfg.ShutdownTimeout)
		cancelJobs()
		<-done
	}
	return nil
}

// messages creates (or updates) the consumer of a type and opens its
// message iterator, with a small prefetch: prefetched messages wait
// unreported (see read).
func (w *Worker) messages(ctx context.Context, typ string) (jetstream.MessagesContext, error) {
	cons, err := w.Consumer(ctx, typ)
	if err != nil {
		return nil, err
	}
	it, err := cons.Messages(jsread.Options(w.cfg.Concurrency / len(w.cfg.Types))...)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrConsumer, typ, err)
	}
	return it, nil
}

// read hands the jobs of one type to run until ctx ends. JetStream trouble
// (a missed heartbeat, the consumer gone with a stream leader or deleted)
// never stops it: a transient error is logged and reading goes on; an
// iterator that closed is opened again, creating the consumer again if
// needed, with a backoff while that fails.
func (w *Worker) read(ctx context.Context, typ string, it jetstream.MessagesContext, sem chan struct{}, running *sync.WaitGroup, run func(jetstream.Msg)) {
	var mu sync.Mutex // it, replaced on reopen; Stop from the watcher below
	stopWatch := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		it.Stop()
	})
	defer stopWatch()
	current := func() jetstream.MessagesContext { mu.Lock(); defer mu.Unlock(); return it }
	wait := 100 * time.Millisecond
	for {
		// Take a slot first, then a message: a message never waits for a
		// slot unreported, which would let its ack wait run out and count a
		// delivery that never ran.
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		msg, err := current().Next()
		if err != nil {
			<-sem
			if ctx.Err() != nil {
				return
			}
			if !jsread.Lost(err) {
				w.log.WarnContext(ctx, "worker: fetching jobs failed; reading on", "job_type", typ, "err", err)
				if !sleepCtx(ctx, 50*time.Millisecond) { // never a hot loop
					return
				}
				continue
			}
			current().Stop()
			w.log.WarnContext(ctx, "worker: the job iterator is gone; opening it again", "job_type", typ, "err", err, "retry_in", wait)
			if !sleepCtx(ctx, wait) {
				return
			}
			next, err := w.messages(ctx, typ)
			if err != nil {
				w.log.WarnContext(ctx, "worker: could not open the jobs again; retrying", "job_type", typ, "err", err)
				wait = min(2*wait, 10*time.Second)
				continue
			}
			mu.Lock()
			it = next
			mu.Unlock()
			if ctx.Err() != nil {
				next.Stop()
				return
			}
			wait = 100 * time.Millisecond
			continue
		}
		if ctx.Err() != nil {
			<-sem
			_ = msg.Nak() // not started: hand it back at once
			return
		}
		running.Go(func() {
			defer func() { <-sem }()
			run(msg)
		})
	}
}

// sleepCtx sleeps d or until ctx ends; false when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (w *Worker) backoff(attempt int) time.Duration {
	i := min(attempt-1, len(w.cfg.Backoff)-1)
	return w.cfg.Backoff[max(i, 0)]
}

// process runs one delivery.
func (w *Worker) process(ctx context.Context, msg jetstream.Msg, h Handler) {
	start := time.Now()
	attempt := 1
	if md, err := msg.Metadata(); err == nil {
		attempt = int(md.NumDelivered)
	}
	replay, sum, args, err := ReplayOf(msg.Headers(), msg.Data())
	if err != nil {
		w.deadLetter(ctx, msg, &Job{Attempt: attempt}, fmt.Errorf("undecodable job: %w", err))
		return
	}
	dj, err := publisher.DecodeJob(msg.Headers(), args)
	if err != nil {
		w.deadLetter(ctx, msg, &Job{Attempt: attempt}, fmt.Errorf("undecodable job: %w", err))
		return
	}
	fillBypass(&dj, msg)
	job := &Job{Job: dj, Attempt: attempt, Replay: replay, Summary: sum}
	result := w.run(ctx, msg, job, h)
	if w.cfg.Hooks.Job != nil {
		w.cfg.Hooks.Job(job.Type, result, job.Release, time.Since(start))
	}
}

func (w *Worker) run(ctx context.Context, msg jetstream.Msg, job *Job, h Handler) JobResult {
	deliveries := job.Attempt
	log := w.log.With("job_type", job.Type, "key", job.Key.String(), "token", job.Token.String(), "delivery", deliveries)
	// The run-once guard first: a delivery that finds the job running
	// elsewhere (or a dead worker's claim not yet expired) waits without
	// reaching the round, so it is no attempt.
	g := w.guards[job.Type]
	var cl *claim
	if g != nil {
		id := job.Token.String() + "@" + job.Key.String()
		if job.Token == 0 {
			id = job.ID() // the bypassed job's own identity
		}
		var gr GuardResult
		var err error
		cl, gr, err = g.acquire(ctx, job.Type, id)
		if err != nil {
			log.WarnContext(ctx, "worker: run-once claim failed; retrying", "err", err)
			_ = msg.NakWithDelay(w.backoff(job.Attempt))
			return JobRetry
		}
		if gr != "" {
			w.guardHook(job.Type, gr)
			if gr == GuardDuplicateDone {
				w.finish(ctx, job, true, false, log)
				_ = msg.Ack()
				return JobResult(gr)
			}
			_ = msg.NakWithDelay(g.cfg.ClaimTTL / 3) // the other run may still fail
			return JobResult(gr)
		}
	}
	dropClaim := func() {
		if cl == nil {
			return
		}
		if err := g.release(ctx, cl); err != nil {
			log.WarnContext(ctx, "worker: could not release the run-once claim; it expires on its own", "err", err)
		}
	}
	sctx, endStart := w.span(ctx, "start", job)
	started, err := StartDelivery(sctx, w.cfg.Coalescer, w.cfg.Publisher, job, w.cfg.MaxDeliver, w.backoff(job.Attempt))
	endStart(err)
	if err != nil {
		// Running without closing the round would strand the events that
		// join it meanwhile: wait for Redis instead.
		// At most the second backoff step (5 s by default): the deliveries
		// of a job that waited for its exclusive key, or sat on a worker
		// of another Redis, are many, and were no failures; a wait grown
		// from them outlasted the outage by minutes (the chaos short
		// form's 12b, with an exclusive policy).
		dropClaim()
		log.WarnContext(ctx, "worker: could not close the round; retrying later", "err", err)
		_ = msg.NakWithDelay(w.backoff(min(job.Attempt, 2)))
		return JobReleaseFailed
	}
	switch started.Action {
	case StartRetry:
		dropClaim()
		_ = msg.NakWithDelay(started.Delay)
		switch started.Result {
		case JobKeyBusy:
			log.DebugContext(ctx, "worker: the job's key is busy; it waits", "retry_in", started.Delay)
			return JobKeyBusy
		case JobOtherStore:
			log.ErrorContext(ctx, "worker: not running a job reserved in another Redis; left for a worker connected to the daemon's", "reason", started.Reason)
			return JobOtherStore
		}
		log.WarnContext(ctx, "worker: the job waits", "reason", started.Reason, "retry_in", started.Delay)
		return JobRetry
	case StartAck:
		dropClaim()
		if started.Result != JobRescheduled {
			log.InfoContext(ctx, "worker: the round's job ran (or runs) from another message; this one is acknowledged without running", "release", string(started.Result))
		}
		_ = msg.Ack()
		return started.Result
	case StartDead:
		dropClaim()
		w.final(ctx, msg, job, errors.New(started.Reason), log.With("attempt", job.Attempt))
		return JobDead
	}
	log = log.With("attempt", job.Attempt)
	w.missing.note(job.Release, w.now(), w.log)
	if started.Note != "" {
		log.WarnContext(ctx, "worker: "+started.Note)
	}
	if started.Lease != "" {
		// Given up once the job is finished and acked (or sent back).
		defer w.releaseKey(job, started.Lease, log)
		if started.Waits > 0 && w.cfg.Hooks.KeyWait != nil {
			w.cfg.Hooks.KeyWait(job.Type, started.Waited)
		}
	}
	if w.cfg.Hooks.RoundAge != nil && job.Release == debounce.ReleaseReleased {
		w.cfg.Hooks.RoundAge(job.Type, w.now().Sub(job.OpenedAt), job.Summary.Events)
	}

	err = w.handle(ctx, msg, job, h, g, cl, started.Lease)
	if err == nil {
		if cl != nil {
			ok, gerr := g.complete(ctx, cl)
			switch {
			case gerr != nil:
				log.WarnContext(ctx, "worker: could not mark the job done; a redelivery may run it again", "err", gerr)
			case !ok:
				log.WarnContext(ctx, "worker: run-once claim expired before completion; the job may have run twice")
				w.guardHook(job.Type, GuardClaimLost)
			default:
				w.guardHook(job.Type, GuardRan)
			}
		}
		w.finish(ctx, job, true, false, log)
		if err := msg.DoubleAck(ctx); err != nil {
			log.WarnContext(ctx, "worker: ack failed; the job will be redelivered", "err", err)
		}
		return JobOK
	}
	if cl != nil {
		if gerr := g.release(ctx, cl); gerr != nil {
			log.WarnContext(ctx, "worker: could not release the run-once claim; it expires on its own", "err", gerr)
		}
		w.guardHook(job.Type, GuardFailed)
	}
	var perm permanentError
	if errors.As(err, &perm) || job.Attempt >= w.cfg.MaxDeliver {
		w.final(ctx, msg, job, err, log)
		return JobDead
	}
	log.InfoContext(ctx, "worker: job failed; retrying", "err", err, "retry_in", w.backoff(job.Attempt))
	_ = msg.NakWithDelay(w.backoff(job.Attempt))
	return JobRetry
}

// handle runs the handler, telling the server the job is in progress (and
// refreshing the run-once claim) while it runs. A panic is an error.
func (w *Worker) handle(ctx context.Context, msg jetstream.Msg, job *Job, h Handler, g *guard, cl *claim, lease string) (err error) {
	ctx, end := w.span(ctx, "run", job)
	defer func() { end(err) }() // after the recover below has set err
	stop := make(chan struct{})
	defer close(stop)
	if lease != "" {
		go w.keepKey(job, lease, stop)
	}
	go every(w.cfg.AckWait/3, stop, func() bool { _ = msg.InProgress(); return true })
	if cl != nil {
		go g.keepAlive(cl, stop)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return h(ctx, job)
}

// span begins a stage of a delivery with Hooks.Span, if set.
func (w *Worker) span(ctx context.Context, stage string, job *Job) (context.Context, func(error)) {
	if w.cfg.Hooks.Span == nil {
		return ctx, func(error) {}
	}
	return w.cfg.Hooks.Span(ctx, stage, job)
}

// keepKey refreshes an exclusive job's key lease every third of the
// policy's lease until stop.
func (w *Worker) keepKey(job *Job, owner string, stop <-chan struct{}) {
	lease, _ := w.cfg.Coalescer.LeaseOf(job.Job)
	every(max(lease/3, 100*time.Millisecond), stop, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), lease/3)
		held, err := w.cfg.Coalescer.RefreshKey(ctx, job.Job, owner)
		cancel()
		switch {
		case err != nil:
			w.log.Warn("worker: could not refresh the job's key lease; retrying", "job_type", job.Type, "key", job.Key.String(), "err", err)
		case !held:
			w.log.Error("worker: the job's key lease lapsed while it ran: another job of the key may start (raise the policy's lease)", "job_type", job.Type, "key", job.Key.String(), "lease", lease)
			return false
		}
		return true
	})
}

// every calls f each period until stop is closed or f returns false: the
// keep-alives of a running job (progress, run-once claim, key lease).
func every(period time.Duration, stop <-chan struct{}, f func() bool) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if !f() {
				return
			}
		}
	}
}

func (w *Worker) releaseKey(job *Job, owner string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := w.cfg.Coalescer.ReleaseKey(ctx, job.Job, owner); err != nil {
		log.Warn("worker: could not give up the job's key lease; the next job of the key starts when it lapses", "err", err)
	}
}

func (w *Worker) finish(ctx context.Context, job *Job, ok, final bool, log *slog.Logger) {
	if _, err := w.cfg.Coalescer.Finish(ctx, job.Job, ok, final); err != nil {
		log.WarnContext(ctx, "worker: finishing the round failed; its reservation ends with its TTL", "err", err)
	}
}

// final dead-letters a job that will not be retried. It closes the job's
// round first if no delivery did: a round left open would take in events
// until its TTL for a job that will never run. The dead letter carries the
// round's summary.
func (w *Worker) final(ctx context.Context, msg jetstream.Msg, job *Job, cause error, log *slog.Logger) {
	if job.Release == "" {
		if rel, err := w.cfg.Coalescer.Start(ctx, job.Job); err == nil {
			job.Release, job.Summary = rel.Result, rel.Summary
		} else {
			log.WarnContext(ctx, "worker: could not close the round of a dead job; it ends with its TTL", "err", err)
		}
	}
	// The dead letter first: finishing marks the job done, and a delivery
	// after a failed dead-lettering would then be acked as done, the job
	// neither run nor dead-lettered.
	log.ErrorContext(ctx, "worker: job failed for the last time; dead-lettered", "err", cause)
	if w.deadLetter(ctx, msg, job, cause) {
		w.finish(ctx, job, false, true, log)
	}
}

// Headers of a dead letter.
const (
	HeaderError   = "Coalesce-Error"   // why it died
	HeaderSummary = "Coalesce-Summary" // its round's summary as JSON, up to MaxSummaryHeader (else in the body: HeaderSummaryInBody)
	// HeaderReplay marks a dead letter published again to run once more:
	// the dead letter's stream sequence (coalesce dead replay).
	HeaderReplay = "Coalesce-Replay"
	// HeaderAttempts: the attempts it had.
	HeaderAttempts = "Coalesce-Attempts"
)

// deadLetter copies the message to the dead-letter subject with the reason,
// then terminates it. If the copy fails the message is left for redelivery.
// job is the decoded job (only its Attempt when it could not be decoded).
func (w *Worker) deadLetter(ctx context.Context, msg jetstream.Msg, job *Job, cause error) bool {
	jobType, sum, attempts := job.Type, job.Summary, job.Attempt
	code := deadCode(jobType, cause, attempts, w.cfg.MaxDeliver)
	if jobType == "" {
		jobType = msg.Headers().Get(publisher.HeaderType)
		if jobType == "" {
			jobType = "unknown"
		}
	}
	dead := nats.NewMsg(w.cfg.Subjects.Dead(jobType))
	for k, v := range msg.Headers() {
		if strings.HasPrefix(k, "Nats-") {
			continue
		}
		dead.Header[k] = v
	}
	reason := cause.Error()
	if len(reason) > 1024 {
		reason = reason[:1024]
	}
	dead.Header.Set(HeaderError, strings.ReplaceAll(reason, "\n", " "))
	dead.Header.Set(HeaderAttempts, strconv.Itoa(attempts))
	dead.Header.Set(HeaderErrorCode, code)
	if job.Token == 0 && job.Bypass != "" {
		// A bypassed job's identity, whatever its message carried: its
		// replay runs as the same job (the same Idempotency-Key).
		dead.Header.Set(publisher.HeaderBypass, job.Bypass)
	}
	if md, err := msg.Metadata(); err == nil {
		dead.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("dead-%s-%d", md.Stream, md.Sequence.Stream))
	}
	args := []byte(job.Args)
	if job.Type == "" {
		args = msg.Data() // undecodable: kept as it came
	}
	// The summary whatever its size (a large one in the body): Finish
	// deletes the round's taken copy, so the dead letter is all a replay
	// has. One it cannot keep is no dead letter: redelivered, the round
	// unfinished.
	body, err := PackSummary(dead.Header, args, sum)
	if err == nil {
		dead.Data = body
		_, err = w.cfg.JetStream.PublishMsg(ctx, dead)
	}
	if err != nil {
		w.log.ErrorContext(ctx, "worker: dead-lettering failed (the dead letter must keep the round's summary); leaving the job for redelivery, its round unfinished",
			"job_type", jobType, "summary_events", sum.Events, "summary_items", len(sum.Items), "err", err)
		_ = msg.NakWithDelay(w.backoff(w.cfg.MaxDeliver))
		return false
	}
	_ = msg.Term()
	return true
}

func (w *Worker) guardHook(jobType string, r GuardResult) {
	if w.cfg.Hooks.Guard != nil {
		w.cfg.Hooks.Guard(jobType, r)
	}
}
