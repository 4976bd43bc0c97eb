package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/publisher"
	"github.com/coalesce-io/coalesce/worker"
)

// The worker protocol (docs/worker-protocol.md) lets a worker in any
// language run coalesce jobs with its own NATS client: it consumes the job
// stream itself and asks the daemon to start and finish each job. Both
// operations take the job message as it arrived — its headers and its body
// — over HTTP (POST /v1/jobs/start, POST /v1/jobs/finish, with the message's
// headers as request headers) or NATS request/reply (<prefix>.worker.start,
// <prefix>.worker.finish, queue group "coalesce", the message's headers and
// body as the request's).
//
// Request headers besides the job message's:
//
//	Coalesce-Delivered    start: the delivery's count from JetStream (1 for
//	                      the first); default 1
//	Coalesce-Max-Deliver  start: attempts before the job is dead; default the
//	                      daemon's worker.max_deliver, else 5
//	Coalesce-Result       finish: ok (the handler succeeded), failed (it
//	                      failed and will be retried) or dead (it will not
//	                      run again)
//	Coalesce-Lease        progress, finish: the lease start answered (an
//	                      exclusive job's hold on its key)
const (
	HeaderDelivered  = "Coalesce-Delivered"
	HeaderMaxDeliver = "Coalesce-Max-Deliver"
	HeaderResult     = "Coalesce-Result"
	HeaderLease      = "Coalesce-Lease"
)

// ProtocolConfig configures the worker protocol.
type ProtocolConfig struct {
	Coalescer  *debounce.Coalescer
	Publisher  *publisher.Publisher // republishes an extended round not due yet
	MaxDeliver int                  // worker.DefaultMaxDeliver when 0
	Metrics    *Metrics
	Logger     *slog.Logger
	// Span, when set, wraps each start (as worker.Hooks.Span: stage
	// "start"), for tracing.
	Span func(ctx context.Context, stage string, job *worker.Job) (context.Context, func(error))
}

// Protocol answers start and finish.
type Protocol struct {
	cfg      ProtocolConfig
	log      *slog.Logger
	subs     []*nats.Subscription
	mu       sync.Mutex // an answer starts (wg.Add) only while not stopping
	stopping bool
	wg       sync.WaitGroup
}

// NewProtocol returns the protocol's operations; Subscribe serves them over
// NATS, APIConfig.Protocol over HTTP.
func NewProtocol(cfg ProtocolConfig) *Protocol {
	if cfg.MaxDeliver <= 0 {
		cfg.MaxDeliver = worker.DefaultMaxDeliver
	}
	p := &Protocol{cfg: cfg, log: cfg.Logger}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	return p
}

// StartAnswer is start's answer.
type StartAnswer struct {
	// Action: run (run the handler, then finish), ack (ack the message
	// without running), retry (nak it, delayed by retry_in_ms; no attempt),
	// dead (publish it to the dead-letter subject, then term it; the round
	// is finished already).
	Action    string           `json:"action"`
	Result    string           `json:"result,omitempty"`      // ack: rescheduled, superseded, done
	RetryInMs int64            `json:"retry_in_ms,omitempty"` // retry
	Reason    string           `json:"reason,omitempty"`      // retry, dead
	DeadTo    string           `json:"dead_letter_subject,omitempty"`
	Job       *worker.Document `json:"job,omitempty"` // run, dead: the job document, summary and attempt included
	// DeadHeaders, for dead, are the headers to add to the dead letter:
	// why, its attempts and its summary (what a replay runs with).
	DeadHeaders map[string]string `json:"dead_letter_headers,omitempty"`
	// DeadBody, for dead, when present, is the dead letter's body, instead
	// of the job message's: its args and a summary too large for a header
	// (DeadHeaders then has Coalesce-Summary-In-Body).
	DeadBody json.RawMessage `json:"dead_letter_body,omitempty"`
	// Lease, for an exclusive job that runs, holds its key for LeaseMs:
	// send it back (Coalesce-Lease) with progress at least every third of
	// that while the job runs, and with finish.
	Lease   string `json:"lease,omitempty"`
	LeaseMs int64  `json:"lease_ms,omitempty"`
}

// ProgressAnswer is progress's answer.
type ProgressAnswer struct {
	Held bool `json:"held"` // false: the lease lapsed; another job of the key may have started
}

// FinishAnswer is finish's answer.
type FinishAnswer struct {
	Release string `json:"release"` // what finishing the round did (released, skipped, ...)
}

// protocolHeaders maps the canonical form of each header the protocol reads
// to its name in a job message, so that a header that went through HTTP
// (canonicalised: Coalesce-Ttl, Traceparent) or a client that changes case
// is read as sent.
var protocolHeaders = func() map[string]string {
	m := map[string]string{}
	for _, h := range []string{publisher.HeaderType, publisher.HeaderKey, publisher.HeaderFingerprint, publisher.HeaderRound,
		publisher.HeaderMode, publisher.HeaderPayload, publisher.HeaderOpenedAt, publisher.HeaderDueAt, publisher.HeaderTTL,
		publisher.HeaderVersion, publisher.HeaderTraceParent, publisher.HeaderStore, publisher.HeaderStoreAddr, publisher.HeaderExclusive, publisher.HeaderBypass, worker.HeaderReplay, worker.HeaderSummary, worker.HeaderSummaryInBody, HeaderDelivered, HeaderMaxDeliver, HeaderResult, HeaderLease} {
		m[textproto.CanonicalMIMEHeaderKey(h)] = h
	}
	return m
}()

// jobHeaders keeps the headers the protocol reads, under their job-message
// names.
func jobHeaders(in map[string][]string) nats.Header {
	out := nats.Header{}
	for k, vs := range in {
		if name, ok := protocolHeaders[textproto.CanonicalMIMEHeaderKey(k)]; ok && len(vs) > 0 {
			out[name] = vs[:1]
		}
	}
	return out
}

// job decodes the job message a request carries.
func (p *Protocol) job(h nats.Header, body []byte) (*worker.Job, *apiError) {
	replay, sum, args, err := worker.ReplayOf(h, body)
	if err != nil {
		return nil, errf(http.StatusBadRequest, "invalid_job", worker.HeaderSummaryInBody, "%v: send the job message's headers and body as they came", err)
	}
	dj, err := publisher.DecodeJob(h, args)
	if err != nil {
		return nil, errf(http.StatusBadRequest, "invalid_job", headerIn(err), "%v: send the job message's headers and body as they came", err)
	}
	if _, ok := p.cfg.Coalescer.Policy(dj.Type); !ok {
		return nil, errf(http.StatusNotFound, "no_policy", "Coalesce-Type", "job type %q has no policy here: the daemon that starts a job needs its policy", dj.Type)
	}
	if dj.Token == 0 && dj.Bypass == "" {
		// Published before Coalesce-Bypass existed: its identity from its
		// content (the subject is not forwarded).
		dj.Bypass = worker.ContentBypass(dj)
	}
	return &worker.Job{Job: dj, Attempt: 1, Replay: replay, Summary: sum}, nil
}

// headerIn names the header a DecodeJob error is about.
func headerIn(err error) string {
	var de *publisher.DecodeError
	if errors.As(err, &de) {
		return de.Header
	}
	return ""
}

// positive reads a header holding an integer >= 1, def when absent.
func positive(h nats.Header, name string, def int) (int, *apiError) {
	v := h.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, errf(http.StatusBadRequest, "invalid_header", name, "header %s %q: want a whole number >= 1", name, v)
	}
	return n, nil
}

// Start closes the job's round at start, as every coalesce worker does, and
// says what the delivery must do.
func (p *Protocol) Start(ctx context.Context, h nats.Header, body []byte) (StartAnswer, *apiError) {
	job, e := p.job(h, body)
	if e != nil {
		return StartAnswer{}, e
	}
	if job.Attempt, e = positive(h, HeaderDelivered, 1); e != nil {
		return StartAnswer{}, e
	}
	maxDeliver, e := positive(h, HeaderMaxDeliver, p.cfg.MaxDeliver)
	if e != nil {
		return StartAnswer{}, e
	}
	retryIn := worker.DefaultBackoff[min(job.Attempt, len(worker.DefaultBackoff))-1]
	var pub debounce.Publisher
	if p.cfg.Publisher != nil {
		pub = p.cfg.Publisher
	}
	if p.cfg.Span != nil {
		var end func(error)
		ctx, end = p.cfg.Span(ctx, "start", job)
		defer func() { end(nil) }()
	}
	s, err := worker.StartDelivery(ctx, p.cfg.Coalescer, pub, job, maxDeliver, retryIn)
	if err != nil {
		return StartAnswer{}, errf(http.StatusServiceUnavailable, "store_unavailable", "", "the round could not be closed: %v; do not run the job: retry the delivery later", err)
	}
	a := StartAnswer{Action: string(s.Action), Reason: s.Reason}
	switch s.Action {
	case worker.StartAck:
		a.Result = string(s.Result)
	case worker.StartRetry:
		a.RetryInMs = max(s.Delay.Milliseconds(), 0)
		a.Result = string(s.Result)
	case worker.StartDead:
		// Not finished here: the worker dead-letters it, then finishes it
		// (Coalesce-Result: dead). Finished first, a dead letter that
		// failed to publish would come back as done and be acked, lost.
		if p.cfg.Publisher != nil {
			a.DeadTo = p.cfg.Publisher.Subjects().Dead(job.Type)
		}
		var body []byte
		var err error
		if a.DeadHeaders, body, err = DeadLetterHeaders(job, s.Reason); err != nil {
			// A dead letter that cannot keep the summary is none: the
			// round stays unfinished, the delivery comes again.
			a = StartAnswer{Action: string(worker.StartRetry), RetryInMs: retryIn.Milliseconds(), Reason: "dead, but " + err.Error()}
			break
		}
		if body != nil {
			a.DeadBody = body
		}
		fallthrough
	case worker.StartRun:
		d := job.Document()
		a.Job = &d
		if s.Lease != "" {
			lease, _ := p.cfg.Coalescer.LeaseOf(job.Job)
			a.Lease, a.LeaseMs = s.Lease, lease.Milliseconds()
			if s.Waits > 0 && p.cfg.Metrics != nil {
				p.cfg.Metrics.OnKeyWait(job.Type, s.Waited)
			}
		}
	}
	result := "start_" + a.Action
	if s.Result == worker.JobKeyBusy {
		result = "start_key_busy"
	}
	p.count(job.Type, result)
	p.countJob(job, worker.StartAction(a.Action), s.Result)
	return a, nil
}

// countJob counts the deliveries this daemon hands out to protocol workers
// in coalesce_jobs_total, as a coalesce worker counts its own (one result
// per delivery: a run's at its finish), and the round's age and events as
// its job starts: the dashboard's coalescing ratio and round panels then
// work whichever worker runs the jobs.
func (p *Protocol) countJob(job *worker.Job, action worker.StartAction, result worker.JobResult) {
	m := p.cfg.Metrics
	if m == nil {
		return
	}
	switch action {
	case worker.StartRun:
		if job.Release == debounce.ReleaseReleased {
			m.roundAge.WithLabelValues(m.typ(job.Type)).Observe(time.Since(job.OpenedAt).Seconds())
			m.roundEvents.WithLabelValues(m.typ(job.Type)).Observe(float64(job.Summary.Events))
		}
	case worker.StartAck, worker.StartRetry:
		if result == "" {
			result = worker.JobRetry
		}
		m.jobs.WithLabelValues(m.typ(job.Type), string(result)).Inc()
	}
}

// Progress refreshes an exclusive job's lease of its key.
func (p *Protocol) Progress(ctx context.Context, h nats.Header, body []byte) (ProgressAnswer, *apiError) {
	job, e := p.job(h, body)
	if e != nil {
		return ProgressAnswer{}, e
	}
	owner := h.Get(HeaderLease)
	if _, exclusive := p.cfg.Coalescer.LeaseOf(job.Job); !exclusive || owner == "" {
		return ProgressAnswer{}, errf(http.StatusBadRequest, "invalid_header", HeaderLease, "header %s: send the lease start answered (only exclusive jobs have one)", HeaderLease)
	}
	held, err := p.cfg.Coalescer.RefreshKey(ctx, job.Job, owner)
	if err != nil {
		return ProgressAnswer{}, errf(http.StatusServiceUnavailable, "store_unavailable", "", "the lease could not be refreshed: %v; retry", err)
	}
	return ProgressAnswer{Held: held}, nil
}

// Finish finishes the job's round after its handler: ok, failed (retried:
// nothing changes) or dead.
func (p *Protocol) Finish(ctx context.Context, h nats.Header, body []byte) (FinishAnswer, *apiError) {
	job, e := p.job(h, body)
	if e != nil {
		return FinishAnswer{}, e
	}
	var ok, final bool
	switch r := h.Get(HeaderResult); r {
	case "ok":
		ok = true
	case "failed":
	case "dead":
		final = true
	default:
		return FinishAnswer{}, errf(http.StatusBadRequest, "invalid_header", HeaderResult, "header %s %q: want ok, failed or dead", HeaderResult, r)
	}
	rel, err := p.cfg.Coalescer.Finish(ctx, job.Job, ok, final)
	if err != nil {
		return FinishAnswer{}, errf(http.StatusServiceUnavailable, "store_unavailable", "", "the round could not be finished: %v; retry", err)
	}
	if owner := h.Get(HeaderLease); owner != "" {
		if _, exclusive := p.cfg.Coalescer.LeaseOf(job.Job); exclusive {
			if _, err := p.cfg.Coalescer.ReleaseKey(ctx, job.Job, owner); err != nil {
				p.log.Warn("protocol: could not give up a finished job's key lease; the next job of the key starts when it lapses", "type", job.Type, "err", err)
			}
		}
	}
	p.count(job.Type, "finish_"+h.Get(HeaderResult))
	if m := p.cfg.Metrics; m != nil {
		result := worker.JobRetry
		switch {
		case ok:
			result = worker.JobOK
		case final:
			result = worker.JobDead
		}
		m.jobs.WithLabelValues(m.typ(job.Type), string(result)).Inc()
	}
	return FinishAnswer{Release: string(rel.Result)}, nil
}

func (p *Protocol) count(jobType, result string) {
	if p.cfg.Metrics != nil {
		p.cfg.Metrics.protocol.WithLabelValues(p.cfg.Metrics.typ(jobType), result).Inc()
	}
}

// StartSubject, ProgressSubject and FinishSubject are the protocol's NATS
// subjects.
func StartSubject(prefix string) string    { return prefix + ".worker.start" }
func ProgressSubject(prefix string) string { return prefix + ".worker.progress" }
func FinishSubject(prefix string) string   { return prefix + ".worker.finish" }

// Subscribe answers start and finish requests on nc (queue group
// "coalesce", so replicas share them) until Stop.
func (p *Protocol) Subscribe(nc *nats.Conn, prefix string) error {
	for subject, op := range map[string]func(context.Context, nats.Header, []byte) ([]byte, *apiError){
		StartSubject(prefix): func(ctx context.Context, h nats.Header, b []byte) ([]byte, *apiError) {
			a, e := p.Start(ctx, h, b)
			return marshal(a), e
		},
		FinishSubject(prefix): func(ctx context.Context, h nats.Header, b []byte) ([]byte, *apiError) {
			a, e := p.Finish(ctx, h, b)
			return marshal(a), e
		},
		ProgressSubject(prefix): func(ctx context.Context, h nats.Header, b []byte) ([]byte, *apiError) {
			a, e := p.Progress(ctx, h, b)
			return marshal(a), e
		},
	} {
		sub, err := nc.QueueSubscribe(subject, "coalesce", func(m *nats.Msg) {
			p.mu.Lock()
			if p.stopping {
				p.mu.Unlock()
				return // undecided: the requester times out and asks again
			}
			p.wg.Add(1)
			p.mu.Unlock()
			go func() {
				defer p.wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				out, e := op(ctx, jobHeaders(m.Header), m.Data)
				if e != nil {
					out = marshal(errorBody{e})
				}
				if m.Reply != "" {
					if err := m.Respond(out); err != nil {
						p.log.Warn("protocol: reply failed", "subject", m.Subject, "err", err)
					}
				}
			}()
		})
		if err != nil {
			p.Stop()
			return fmt.Errorf("protocol: subscribe %s: %w", subject, err)
		}
		p.subs = append(p.subs, sub)
	}
	return nil
}

// Stop stops answering and waits for the answers under way: requests that
// arrived are answered for up to ingestDrain, later ones not at all.
func (p *Protocol) Stop() {
	for _, s := range p.subs {
		_ = s.Drain()
	}
	deadline := time.Now().Add(ingestDrain)
	for _, s := range p.subs {
		for s.IsValid() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		_ = s.Unsubscribe()
	}
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	p.wg.Wait()
}

// httpOp serves an operation over HTTP: the job message's headers as the
// request's, its body as the request's.
func httpOp[A any](a *API, op func(context.Context, nats.Header, []byte) (A, *apiError)) func(http.ResponseWriter, *http.Request) *apiError {
	return func(w http.ResponseWriter, r *http.Request) *apiError {
		body, e := a.readBody(w, r)
		if e != nil {
			return e
		}
		ans, e := op(r.Context(), jobHeaders(r.Header), body)
		if e != nil {
			return e
		}
		writeJSON(w, http.StatusOK, ans)
		return nil
	}
}

// DeadLetterHeaders are the headers a dead letter of job carries besides the
// job message's own, as the Go worker writes them: the reason, the attempts
// and the summary; and, when the summary is too large for a header
// (worker.PackSummary), the body to give the dead letter instead of the
// message's (nil otherwise).
func DeadLetterHeaders(job *worker.Job, reason string) (map[string]string, []byte, error) {
	nh := nats.Header{}
	nh.Set(worker.HeaderError, reason)
	nh.Set(worker.HeaderAttempts, strconv.Itoa(job.Attempt))
	if job.Token == 0 && job.Bypass != "" {
		nh.Set(publisher.HeaderBypass, job.Bypass) // its replay is the same job
	}
	body, err := worker.PackSummary(nh, job.Args, job.Summary)
	if err != nil {
		return nil, nil, err
	}
	h := map[string]string{}
	for k := range nh {
		h[k] = nh.Get(k)
	}
	if nh.Get(worker.HeaderSummaryInBody) == "" {
		body = nil
	}
	return h, body, nil
}
