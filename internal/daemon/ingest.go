package daemon

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/jsread"
	"github.com/coalesce-io/coalesce/publisher"
)

// Ingest subjects: <prefix>.events.<type> answers each request with the
// decision (core NATS request/reply, no storage); <prefix>.ingest.<type> is
// the durable intake stream, for producers that want their events to survive
// a daemon restart (publish with JetStream, the daemon acks after deciding).
func eventsSubject(prefix string) string { return prefix + ".events.>" }
func ingestSubject(prefix string) string { return prefix + ".ingest.>" }

// A stored event is acked once decided. One that fails for a transient
// reason (Redis or NATS unavailable) is retried with IngestRetryDelay, with
// no last attempt: it waits out any outage. One whose type has no policy
// waits IngestPolicyGrace from when it was stored (a rolling deploy brings
// the policy), retried the same way. One that can never be decided (bad
// JSON, bad args, too large, a type still without a policy after the grace)
// goes to <prefix>.dead._ingest.<type> in the job stream, with
// Coalesce-Error-Code, Coalesce-Error, Coalesce-Ingest-Subject and
// Coalesce-Deliveries headers, and is counted (ingest_total{result="dead"}):
// never dropped without a trace.
const (
	IngestPolicyGrace = 10 * time.Minute
	// ingestDecideTimeout is well under the consumer's AckWait (30 s): a
	// decision never outlasts it, so a redelivery never decides an event
	// still being decided.
	ingestDecideTimeout = 10 * time.Second
	// ingestMaxAckPending: events waiting to be retried stay pending on
	// the consumer; this many may wait before new ones stop being
	// delivered (it was 256: failing events of one type held up all).
	ingestMaxAckPending = 16384
	// IngestDecidedMark is how long a stored event is remembered as
	// decided: four times the consumer's AckWait, the time a lost ack takes
	// to come back as a redelivery, with a daemon restart in between. An
	// ack the server did not confirm keeps the mark IngestUnackedMark.
	IngestDecidedMark = 2 * time.Minute
	IngestUnackedMark = time.Hour
	// ingestDrain is how long Stop keeps deciding requests that arrived.
	ingestDrain = 10 * time.Second
)

// DefaultIngestStream is the durable intake stream's name.
const DefaultIngestStream = "COALESCE_INGEST"

// IngestConfig configures NATS intake.
type IngestConfig struct {
	Conn      *nats.Conn
	JetStream jetstream.JetStream
	Coalescer *debounce.Coalescer
	Prefix    string // subject prefix, as the publisher's
	Requests  bool   // answer <prefix>.events.<type>
	Durable   bool   // consume <prefix>.ingest.<type> from a stream
	Stream    string // DefaultIngestStream
	// Replicas and Storage of the intake stream (nats.replicas and
	// nats.storage): 0 is R1 and file. An existing stream keeps more
	// replicas than these, and an operator's other settings.
	Replicas int
	Storage  jetstream.StorageType
	Parallel int // decisions in flight; default 64
	// Redis, when set, keeps a mark per decided stored event (under
	// RedisPrefix + "ingest:"), so a redelivery of one whose ack was lost
	// or whose decider died before acking is acked, not decided again.
	Redis       redis.UniversalClient
	RedisPrefix string
	Metrics     *Metrics
	Logger      *slog.Logger

	maxAckPending int // set by tests: ingestMaxAckPending otherwise
}

// Ingest receives events over NATS.
type Ingest struct {
	cfg      IngestConfig
	sub      *nats.Subscription
	iterMu   sync.Mutex
	readers  []*reader // the intake's consumer, then its parking consumers
	stopping atomic.Bool
	startMu  sync.Mutex // a decision starts (wg.Add) only while not stopping
	wg       sync.WaitGroup
	sem      chan struct{} // decisions in flight: requests and the intake's consumer
	parkSem  chan struct{} // decisions in flight from the parking consumers
	log      *slog.Logger
	// loseAck, set by tests, loses the ack of the events it is true for,
	// as a dropped connection or a crash right after the decision would.
	loseAck atomic.Pointer[func(jetstream.Msg) bool]
}

// StartIngest subscribes (queue group "coalesce", so replicas share the load)
// and, when durable, creates the intake stream and its consumer.
func StartIngest(ctx context.Context, cfg IngestConfig) (*Ingest, error) {
	if cfg.Parallel <= 0 {
		cfg.Parallel = 64
	}
	if cfg.Stream == "" {
		cfg.Stream = DefaultIngestStream
	}
	in := &Ingest{cfg: cfg, sem: make(chan struct{}, cfg.Parallel), parkSem: make(chan struct{}, max(1, cfg.Parallel/2)), log: cfg.Logger}
	if in.log == nil {
		in.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Requests {
		sub, err := cfg.Conn.QueueSubscribe(eventsSubject(cfg.Prefix), "coalesce", in.onRequest)
		if err != nil {
			return nil, fmt.Errorf("ingest: subscribe %s: %w", eventsSubject(cfg.Prefix), err)
		}
		in.sub = sub
	}
	if cfg.Durable {
		if _, err := publisher.Provision(ctx, cfg.JetStream, jetstream.StreamConfig{
			Name: cfg.Stream, Subjects: []string{ingestSubject(cfg.Prefix)},
			Retention: jetstream.WorkQueuePolicy, Storage: cfg.Storage, Replicas: max(1, cfg.Replicas),
			Description: "coalesce durable event intake",
		}); err != nil {
			in.Stop()
			return nil, fmt.Errorf("ingest: %w", err)
		}
		main := &reader{name: "coalesce-ingest", stream: cfg.Stream, prefetch: cfg.Parallel}
		if err := in.startReader(ctx, main); err != nil {
			in.Stop()
			return nil, err
		}
		if err := in.startParking(ctx); err != nil {
			in.Stop()
			return nil, err
		}
	}
	return in, nil
}

// typeFromSubject takes the job type from <prefix>.<kind>.<type...>.
func (in *Ingest) typeFromSubject(subject, kind string) string {
	return strings.TrimPrefix(subject, in.cfg.Prefix+"."+kind+".")
}

// eventFrom reads an event message: its type comes from the subject; a type
// in the body, if any, must agree.
func eventFrom(subject, jobType string, data []byte) (debounce.Event, error) {
	var probe struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(data, &probe); err == nil && probe.Type == nil {
		data = withType(data, jobType)
	}
	ev, err := DecodeEvent(data)
	if err != nil {
		return ev, err
	}
	if ev.Type != jobType {
		return ev, errf(400, "invalid_type", "type", "type %q in the body differs from %q of subject %s", ev.Type, jobType, subject)
	}
	return ev, nil
}

// withType adds "type" to an event object that lacks it.
func withType(data []byte, jobType string) []byte {
	t, _ := json.Marshal(jobType)
	const ws = " \t\r\n" // JSON whitespace; other spaces stay and fail decoding
	trim := strings.Trim(string(data), ws)
	if !strings.HasPrefix(trim, "{") {
		return data
	}
	rest := strings.TrimLeft(trim[1:], ws)
	if strings.HasPrefix(rest, "}") {
		return []byte(`{"type":` + string(t) + rest)
	}
	return []byte(`{"type":` + string(t) + `,` + rest)
}

func (in *Ingest) onRequest(m *nats.Msg) {
	// Waiting for a slot holds up this subscription's deliveries: the
	// back-pressure. Requests beyond its pending limit are dropped by the
	// client library undecided, so their requesters time out and retry;
	// nothing that was answered is lost.
	in.sem <- struct{}{}
	in.startMu.Lock()
	if in.stopping.Load() {
		in.startMu.Unlock()
		<-in.sem
		if m.Reply != "" {
			_ = m.Respond(marshal(errorBody{errf(http.StatusServiceUnavailable, "canceled", "", "the daemon is stopping; nothing was decided: retry")}))
		}
		return
	}
	in.wg.Add(1)
	in.startMu.Unlock()
	go func() {
		defer in.wg.Done()
		defer func() { <-in.sem }()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		reply, ok := in.decide(ctx, m.Subject, in.typeFromSubject(m.Subject, "events"), m.Data, m.Header.Get("traceparent"))
		result := "ok"
		if !ok {
			result = "error"
		}
		in.count("request", result)
		if m.Reply != "" {
			if err := m.Respond(reply); err != nil {
				in.log.Warn("ingest: reply failed", "subject", m.Subject, "err", err)
			}
		}
	}()
}

// decide returns the decision (or error) JSON, and whether it was a decision.
func (in *Ingest) decide(ctx context.Context, subject, jobType string, data []byte, tp string) ([]byte, bool) {
	ev, err := eventFrom(subject, jobType, data)
	if err == nil {
		// A header that is not W3C trace context is ignored, as HTTP
		// does: the event is not the header's to refuse.
		if ev.TraceParent == "" && debounce.ValidTraceParent(tp) {
			ev.TraceParent = tp
		}
		var d debounce.Decision
		if d, err = in.cfg.Coalescer.Submit(ctx, ev); err == nil {
			b := marshal(d)
			return b, true
		}
	}
	b := marshal(errorBody{submitError(err)})
	return b, false
}

// A reader is one consumer the durable intake decides from: its own on the
// intake stream, or a parking consumer (ingest_park.go).
type reader struct {
	name     string // durable consumer name
	stream   string
	filter   string // "" for the intake's own consumer: every subject
	prefetch int
	parked   bool // its messages are parked copies
	iter     jetstream.MessagesContext
}

// startReader opens r and decides what it delivers until Stop.
func (in *Ingest) startReader(ctx context.Context, r *reader) error {
	it, err := in.open(ctx, r)
	if err != nil {
		return err
	}
	in.iterMu.Lock()
	r.iter = it
	in.readers = append(in.readers, r)
	in.iterMu.Unlock()
	in.wg.Go(func() { in.consume(r) })
	return nil
}

// open creates (or updates) r's consumer and opens its iterator.
func (in *Ingest) open(ctx context.Context, r *reader) (jetstream.MessagesContext, error) {
	maxPending := ingestMaxAckPending
	if in.cfg.maxAckPending > 0 {
		maxPending = in.cfg.maxAckPending
	}
	cons, err := in.cfg.JetStream.CreateOrUpdateConsumer(ctx, r.stream, jetstream.ConsumerConfig{
		Durable: r.name, FilterSubject: r.filter, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
		MaxAckPending: maxPending,
	})
	if err != nil {
		return nil, fmt.Errorf("ingest: consumer %s on %s: %w", r.name, r.stream, err)
	}
	it, err := cons.Messages(jsread.Options(r.prefetch)...)
	if err != nil {
		return nil, fmt.Errorf("ingest: consume %s: %w", r.stream, err)
	}
	return it, nil
}

// consume decides the stored events until Stop. JetStream trouble never
// stops it: a transient error is logged and reading goes on, a closed
// iterator is opened again (with its consumer), with a backoff.
func (in *Ingest) consume(r *reader) {
	wait := 100 * time.Millisecond
	for {
		in.iterMu.Lock()
		it := r.iter
		in.iterMu.Unlock()
		msg, err := it.Next()
		if err != nil {
			if in.stopping.Load() {
				return
			}
			if !jsread.Lost(err) {
				in.log.Warn("ingest: reading the intake stream failed; reading on", "err", err)
				time.Sleep(50 * time.Millisecond)
				continue
			}
			it.Stop()
			in.log.Warn("ingest: the intake iterator is gone; opening it again", "err", err, "retry_in", wait)
			time.Sleep(wait)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			next, err := in.open(ctx, r)
			cancel()
			if err != nil {
				in.log.Warn("ingest: could not open the intake again; retrying", "consumer", r.name, "err", err)
				wait = min(2*wait, 10*time.Second)
				continue
			}
			in.iterMu.Lock()
			r.iter = next
			in.iterMu.Unlock()
			if in.stopping.Load() {
				next.Stop()
				return
			}
			wait = 100 * time.Millisecond
			continue
		}
		sem := in.sem
		if r.parked {
			sem = in.parkSem // parked events, failing slowly, never take all slots
		}
		sem <- struct{}{}
		in.startMu.Lock()
		if in.stopping.Load() {
			// Not decided: another intake (or this one, started again)
			// gets it.
			in.startMu.Unlock()
			<-sem
			_ = msg.Nak()
			return
		}
		in.wg.Add(1)
		in.startMu.Unlock()
		go func() {
			defer in.wg.Done()
			defer func() { <-sem }()
			in.onStored(msg, r.parked)
		}()
	}
}

// onStored decides one event from the intake stream or a parked copy of
// one: acked once decided; parked (or, parked already, retried later) for a
// transient reason; dead-lettered when it can never be decided.
func (in *Ingest) onStored(msg jetstream.Msg, parked bool) {
	ctx, cancel := context.WithTimeout(context.Background(), ingestDecideTimeout)
	defer cancel()
	ev, err := in.storedEvent(msg, parked)
	if err != nil {
		in.refuse(ctx, msg, ev, "invalid_parked", err.Error())
		return
	}
	if ev.n > 1 || ev.parked {
		// A copy of it may be decided now (a parked copy and a redelivery
		// of the original, whose ack was lost, arriving together), or was:
		// claim it, atomically, before deciding.
		claim, state := in.claim(ctx, ev.mark)
		switch state {
		case claimDecided:
			in.count("stream", "redelivered")
			in.ack(ctx, msg, ev.mark)
			return
		case claimBusy:
			in.count("stream", "retry")
			_ = msg.NakWithDelay(ingestClaimBusyDelay)
			return
		}
		if claim != "" {
			defer in.unclaim(ctx, ev.mark, claim) // unless decided: then the mark replaced it
		}
	}
	reply, ok := in.decide(ctx, ev.subject, in.typeFromSubject(ev.subject, "ingest"), msg.Data(), msg.Headers().Get("traceparent"))
	if ok {
		in.count("stream", "ok")
		in.setMark(ctx, ev.mark, IngestDecidedMark)
		in.ack(ctx, msg, ev.mark)
		return
	}
	var body errorBody
	_ = json.Unmarshal(reply, &body)
	code, message := "unknown", string(reply)
	if body.Error != nil {
		code, message = body.Error.Code, body.Error.Message
	}
	switch code {
	case "store_unavailable", "not_replicated", "publish_unavailable", "canceled":
		in.later(ctx, msg, ev)
		return
	case "no_policy":
		if time.Since(ev.stored) < IngestPolicyGrace {
			in.later(ctx, msg, ev)
			return
		}
	}
	in.refuse(ctx, msg, ev, code, message)
}

// later has a stored event decided later: parked, off the intake's
// consumer, when it is still on it, or else delivered again after
// IngestRetryDelay.
func (in *Ingest) later(ctx context.Context, msg jetstream.Msg, ev storedEvent) {
	if !ev.parked {
		err := in.park(ctx, msg, ev)
		if err == nil {
			in.count("stream", "parked")
			return
		}
		in.log.Warn("ingest: an event that must wait could not be parked; it waits on the intake", "subject", ev.subject, "err", err)
	}
	in.count("stream", "retry")
	_ = msg.NakWithDelay(IngestRetryDelay(ev.n))
}

// refuse dead-letters an event that can never be decided.
func (in *Ingest) refuse(ctx context.Context, msg jetstream.Msg, ev storedEvent, code, message string) {
	dl, err := in.deadLetter(ctx, msg, ev, code, message)
	if err != nil {
		in.log.Warn("ingest: an event that cannot be decided could not be dead-lettered; retrying", "subject", ev.subject, "code", code, "err", err)
		in.count("stream", "retry")
		_ = msg.NakWithDelay(IngestRetryDelay(ev.n))
		return
	}
	in.log.Warn("ingest: an event that cannot be decided went to the dead letters", "subject", ev.subject, "dead_letter", dl, "code", code, "error", message)
	in.count("stream", "dead")
	_ = msg.Term()
}

// A storedEvent is what the intake knows of a stored event besides its
// body, whether it comes from the intake stream or is a parked copy.
type storedEvent struct {
	subject string    // where it was stored: <prefix>.ingest.<type>
	id      string    // the intake stream, its sequence there, when it was stored
	mark    string    // its decided mark in Redis; "" without Redis
	stored  time.Time // when it was stored in the intake stream
	n       int       // deliveries so far, on the intake and parked
	parked  bool
}

// storedEvent reads msg's event: from its metadata on the intake stream,
// from the headers park gave it when parked.
func (in *Ingest) storedEvent(msg jetstream.Msg, parked bool) (storedEvent, error) {
	ev := storedEvent{subject: msg.Subject(), stored: time.Now(), n: 1, parked: parked}
	md, err := msg.Metadata()
	if err == nil {
		ev.n, ev.stored = int(md.NumDelivered), md.Timestamp
		ev.id = md.Stream + ":" + strconv.FormatUint(md.Sequence.Stream, 10) + ":" + strconv.FormatInt(md.Timestamp.UnixNano(), 36)
	}
	if parked {
		h := msg.Headers()
		ev.subject, ev.id = h.Get(hdrParkedSubject), h.Get(hdrParkedID)
		stored, serr := time.Parse(time.RFC3339Nano, h.Get(hdrParkedStored))
		before, nerr := strconv.Atoi(h.Get(hdrParkedDeliveries))
		if !strings.HasPrefix(ev.subject, in.cfg.Prefix+".ingest.") || ev.id == "" || serr != nil || nerr != nil {
			ev.subject = msg.Subject()
			return ev, fmt.Errorf("a message on the parking stream without valid %s, %s, %s and %s headers: not parked by coalesce", hdrParkedSubject, hdrParkedID, hdrParkedStored, hdrParkedDeliveries)
		}
		ev.stored, ev.n = stored, before+ev.n
	}
	if in.cfg.Redis != nil && ev.id != "" {
		// The stream's sequence and the time it was stored, so a stream
		// deleted and created again (its sequence starting over) never
		// finds an older event's mark.
		ev.mark = in.cfg.RedisPrefix + "ingest:" + ev.id
	}
	return ev, nil
}

// What claiming a stored event's decision found.
const (
	claimMine    = iota // claimed: decide it (or Redis cannot tell: decide it too)
	claimDecided        // decided before: ack it
	claimBusy           // another copy is being decided now: come back later
)

// ingestClaimTTL outlives a decision (ingestDecideTimeout): a decider that
// died leaves its claim for this long at most. ingestClaimBusyDelay is how
// soon a copy that found the claim taken comes back.
const (
	ingestClaimTTL       = ingestDecideTimeout + 5*time.Second
	ingestClaimBusyDelay = 2 * time.Second
)

// claim takes the decision of a stored event that may be decided elsewhere
// at the same moment: SET mark NX, atomic where a check then a decision was
// not (both copies found no mark and both were decided). It returns the
// claim's value (to give it up with unclaim) when it took it. When Redis
// cannot tell, the event is decided: a second decision is better than none.
func (in *Ingest) claim(ctx context.Context, mark string) (string, int) {
	if mark == "" {
		return "", claimMine
	}
	claim := fmt.Sprintf("%s%016x", ingestClaimPrefix, rand.Uint64())
	ok, err := in.cfg.Redis.SetNX(ctx, mark, claim, ingestClaimTTL).Result()
	switch {
	case err != nil:
		return "", claimMine
	case ok:
		return claim, claimMine
	}
	v, err := in.cfg.Redis.Get(ctx, mark).Result()
	switch {
	case err != nil:
		return "", claimMine // gone meanwhile (a decider gave it up), or Redis cannot tell
	case strings.HasPrefix(v, ingestClaimPrefix):
		return "", claimBusy
	}
	return "", claimDecided
}

// ingestClaimPrefix starts a claim's value; a decided mark is "1".
const ingestClaimPrefix = "claim:"

// unclaim gives up a claim whose event was not decided (it waits, parked,
// or went to the dead letters), so that its next copy is decided at once;
// a mark that is no longer the claim (decided: "1") is left alone.
func (in *Ingest) unclaim(ctx context.Context, mark, claim string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := unclaimScript.Run(ctx, in.cfg.Redis, []string{mark}, claim).Err(); err != nil {
		in.log.Debug("ingest: could not give up a claim; it expires on its own", "key", mark, "err", err)
	}
}

// unclaimScript is scripts/unclaim.lua: a compare-and-delete, which GET
// then DEL is not.
var unclaimScript = redis.NewScript(unclaimLua)

//go:embed scripts/unclaim.lua
var unclaimLua string

func (in *Ingest) setMark(ctx context.Context, mark string, ttl time.Duration) {
	if mark == "" {
		return
	}
	// Its own deadline: the decision may have used up the event's.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := in.cfg.Redis.Set(ctx, mark, "1", ttl).Err(); err != nil {
		in.log.Debug("ingest: could not mark a stored event decided; a redelivery would decide it again", "key", mark, "err", err)
	}
}

// ack acks a decided event and waits for the server to confirm; an ack it
// did not confirm comes back as a redelivery, so the mark is kept longer.
func (in *Ingest) ack(ctx context.Context, msg jetstream.Msg, mark string) {
	if f := in.loseAck.Load(); f != nil && (*f)(msg) {
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := msg.DoubleAck(actx); err != nil {
		in.log.Warn("ingest: an ack was not confirmed; its redelivery will be recognised", "subject", msg.Subject(), "err", err)
		in.setMark(ctx, mark, IngestUnackedMark)
	}
}

// deadLetter stores a stored event that can never be decided on
// <prefix>.dead._ingest.<the subject's tail>, with why.
func (in *Ingest) deadLetter(ctx context.Context, msg jetstream.Msg, ev storedEvent, code, message string) (string, error) {
	tail := strings.TrimPrefix(ev.subject, in.cfg.Prefix+".ingest.")
	tail = strings.TrimPrefix(tail, in.cfg.Prefix+".") // a stray message on the parking stream
	dl := nats.NewMsg(in.cfg.Prefix + ".dead._ingest." + tail)
	copyHeaders(dl.Header, msg.Headers())
	dl.Header.Set("Coalesce-Error-Code", code)
	dl.Header.Set("Coalesce-Error", message)
	dl.Header.Set("Coalesce-Ingest-Subject", ev.subject)
	dl.Header.Set("Coalesce-Deliveries", strconv.Itoa(ev.n))
	dl.Data = msg.Data()
	_, err := in.cfg.JetStream.PublishMsg(ctx, dl)
	return dl.Subject, err
}

// copyHeaders copies a stored event's own headers: not the server's
// (a message id would be deduplicated against the original, an expectation
// fail) nor those park adds.
func copyHeaders(to, from nats.Header) {
	for k, vs := range from {
		if strings.HasPrefix(k, "Nats-") || strings.HasPrefix(k, hdrParkedPrefix) {
			continue
		}
		for _, v := range vs {
			to.Add(k, v)
		}
	}
}

func (in *Ingest) count(source, result string) {
	if in.cfg.Metrics == nil {
		return
	}
	in.cfg.Metrics.ingest.WithLabelValues(source, result).Inc()
}

// Stop stops taking events and waits for the decisions under way. Requests
// that arrived are decided for up to ingestDrain; those still waiting then
// are answered "canceled" (nothing decided) or, not yet read, dropped
// undecided. No decision starts once Stop returns.
func (in *Ingest) Stop() {
	if in.sub != nil {
		// Drain delivers what already arrived, then unsubscribes.
		if err := in.sub.Drain(); err == nil {
			deadline := time.Now().Add(ingestDrain)
			for in.sub.IsValid() && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
		}
		_ = in.sub.Unsubscribe()
	}
	in.startMu.Lock()
	in.stopping.Store(true)
	in.startMu.Unlock()
	in.iterMu.Lock()
	for _, r := range in.readers {
		r.iter.Stop()
	}
	in.iterMu.Unlock()
	in.wg.Wait()
}

// MaxIngestRetryDelay caps the wait between two deliveries of a stored event
// that failed for a transient reason.
const MaxIngestRetryDelay = 30 * time.Second

// IngestRetryDelay is the wait before delivery n+1 of a stored event whose
// delivery n failed for a transient reason: 1 s doubled per delivery, capped
// at MaxIngestRetryDelay, a quarter of it jittered. There is no last one.
func IngestRetryDelay(n int) time.Duration {
	d := MaxIngestRetryDelay
	if n < 6 {
		d = min(time.Second<<max(n-1, 0), MaxIngestRetryDelay)
	}
	return d - time.Duration(rand.Int64N(int64(d/4)+1))
}
