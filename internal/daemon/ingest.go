package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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

// MaxIngestDeliveries bounds how often a stored event is retried (Redis or
// NATS unavailable) before it is dropped with an error in the log.
const MaxIngestDeliveries = 100

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
	Metrics  *Metrics
	Logger   *slog.Logger
}

// Ingest receives events over NATS.
type Ingest struct {
	cfg      IngestConfig
	sub      *nats.Subscription
	iterMu   sync.Mutex
	iter     jetstream.MessagesContext
	stopping atomic.Bool
	wg       sync.WaitGroup
	sem      chan struct{}
	log      *slog.Logger
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
	in := &Ingest{cfg: cfg, sem: make(chan struct{}, cfg.Parallel), log: cfg.Logger}
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
		it, err := in.open(ctx)
		if err != nil {
			in.Stop()
			return nil, err
		}
		in.iter = it
		in.wg.Go(in.consume)
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
	in.sem <- struct{}{}
	in.wg.Go(func() {
		defer func() { <-in.sem }()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		reply, ok := in.decide(ctx, m.Subject, in.typeFromSubject(m.Subject, "events"), m.Data, m.Header.Get("traceparent"))
		in.count("request", ok)
		if m.Reply != "" {
			if err := m.Respond(reply); err != nil {
				in.log.Warn("ingest: reply failed", "subject", m.Subject, "err", err)
			}
		}
	})
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

// open creates (or updates) the intake consumer and opens its iterator.
func (in *Ingest) open(ctx context.Context) (jetstream.MessagesContext, error) {
	cons, err := in.cfg.JetStream.CreateOrUpdateConsumer(ctx, in.cfg.Stream, jetstream.ConsumerConfig{
		Durable: "coalesce-ingest", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
		MaxAckPending: in.cfg.Parallel * 4,
	})
	if err != nil {
		return nil, fmt.Errorf("ingest: consumer on %s: %w", in.cfg.Stream, err)
	}
	it, err := cons.Messages(jsread.Options(in.cfg.Parallel)...)
	if err != nil {
		return nil, fmt.Errorf("ingest: consume %s: %w", in.cfg.Stream, err)
	}
	return it, nil
}

// consume decides the stored events until Stop. JetStream trouble never
// stops it: a transient error is logged and reading goes on, a closed
// iterator is opened again (with its consumer), with a backoff.
func (in *Ingest) consume() {
	wait := 100 * time.Millisecond
	for {
		in.iterMu.Lock()
		it := in.iter
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
			next, err := in.open(ctx)
			cancel()
			if err != nil {
				in.log.Warn("ingest: could not open the intake again; retrying", "err", err)
				wait = min(2*wait, 10*time.Second)
				continue
			}
			in.iterMu.Lock()
			in.iter = next
			in.iterMu.Unlock()
			if in.stopping.Load() {
				next.Stop()
				return
			}
			wait = 100 * time.Millisecond
			continue
		}
		in.sem <- struct{}{}
		in.wg.Go(func() {
			defer func() { <-in.sem }()
			in.onStored(msg)
		})
	}
}

// onStored decides one event from the intake stream: acked once decided,
// terminated when it can never be (bad event), retried later otherwise.
func (in *Ingest) onStored(msg jetstream.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	subject := msg.Subject()
	if md, err := msg.Metadata(); err == nil && md.NumDelivered > MaxIngestDeliveries {
		in.log.Error("ingest: dropping an event that failed every delivery", "subject", subject, "deliveries", md.NumDelivered)
		in.count("stream", false)
		_ = msg.Term()
		return
	}
	reply, ok := in.decide(ctx, subject, in.typeFromSubject(subject, "ingest"), msg.Data(), msg.Headers().Get("traceparent"))
	in.count("stream", ok)
	if ok {
		_ = msg.Ack()
		return
	}
	var body errorBody
	_ = json.Unmarshal(reply, &body)
	if body.Error != nil && body.Error.Code != "store_unavailable" && body.Error.Code != "publish_unavailable" && body.Error.Code != "canceled" {
		in.log.Warn("ingest: dropping an event that cannot be decided", "subject", subject, "error", body.Error.Message)
		_ = msg.Term()
		return
	}
	_ = msg.NakWithDelay(time.Second)
}

func (in *Ingest) count(source string, ok bool) {
	if in.cfg.Metrics == nil {
		return
	}
	result := "ok"
	if !ok {
		result = "error"
	}
	in.cfg.Metrics.ingest.WithLabelValues(source, result).Inc()
}

// Stop stops taking events and waits for the decisions under way.
func (in *Ingest) Stop() {
	if in.sub != nil {
		// Drain delivers what already arrived, then unsubscribes.
		if err := in.sub.Drain(); err == nil {
			deadline := time.Now().Add(10 * time.Second)
			for in.sub.IsValid() && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	in.stopping.Store(true)
	in.iterMu.Lock()
	if in.iter != nil {
		in.iter.Stop()
	}
	in.iterMu.Unlock()
	in.wg.Wait()
}
