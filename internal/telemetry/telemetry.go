// Package telemetry is coalesce's OpenTelemetry wiring: a tracer provider
// configured by the standard OTEL_* environment variables through the
// official Go SDK, off (nil, costing nothing) when none asks for traces,
// and the hooks that turn the library's calls into spans. The library
// packages know nothing of OpenTelemetry (house rule 9): debounce gets a
// wrapped Publisher, worker a Hooks.Span.
//
// Spans: the daemon's HTTP request (server), coalesce.submit (the decision
// as attributes), coalesce.publish (the job to NATS), and in workers
// coalesce.start (closing the round) and coalesce.run (the handler), the
// last two children of the trace context the job carries, so one event's
// trace reaches from its HTTP request to the handler.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/worker"
)

// ScopeName names coalesce's tracer.
const ScopeName = "github.com/coalesce-io/coalesce"

// ErrConfig: the OTEL_* variables ask for something this build cannot do.
var ErrConfig = errors.New("telemetry: unsupported OpenTelemetry configuration")

// Tracing is an SDK tracer provider exporting OTLP over HTTP/protobuf.
type Tracing struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
}

// Enabled reports whether getenv asks for traces: an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or
// OTEL_TRACES_EXPORTER=otlp, unless OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false
	case "otlp":
		return true
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// FromEnv returns the tracing the environment asks for, or nil when it asks
// for none. The SDK reads the rest of OTEL_* itself: endpoints, headers,
// time-outs, OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_*. service names the process when
// OTEL_SERVICE_NAME does not.
func FromEnv(ctx context.Context, service string) (*Tracing, error) {
	if !Enabled(os.Getenv) {
		return nil, nil
	}
	if exp := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); exp != "" && exp != "otlp" {
		return nil, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%s: only otlp (or none) is built in", ErrConfig, exp)
	}
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return nil, fmt.Errorf("%w: OTLP protocol %q: only http/protobuf is built in (set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf and the collector's HTTP port, 4318)", ErrConfig, proto)
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(service)))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	if name := os.Getenv("OTEL_SERVICE_NAME"); name != "" {
		res, _ = resource.Merge(res, resource.NewSchemaless(semconv.ServiceName(name)))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracing{tp: tp, tracer: tp.Tracer(ScopeName)}, nil
}

// New is Tracing on a provider of the caller's (tests).
func New(tp *sdktrace.TracerProvider) *Tracing {
	return &Tracing{tp: tp, tracer: tp.Tracer(ScopeName)}
}

// Tracer is coalesce's tracer; nil for a nil Tracing.
func (t *Tracing) Tracer() trace.Tracer {
	if t == nil {
		return nil
	}
	return t.tracer
}

// Shutdown exports what is buffered and stops.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// Publisher wraps p so each publish is a coalesce.publish span, a child of
// the submit's.
func (t *Tracing) Publisher(p debounce.Publisher) debounce.Publisher {
	if t == nil || p == nil {
		return p
	}
	return tracedPublisher{p, t.tracer}
}

type tracedPublisher struct {
	debounce.Publisher
	tracer trace.Tracer
}

func (p tracedPublisher) Publish(ctx context.Context, job debounce.Job) error {
	ctx, span := p.tracer.Start(ctx, "coalesce.publish", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("coalesce.job_type", job.Type), attribute.String("coalesce.round", job.Token.String()),
			attribute.String("coalesce.key", job.Key.String()), attribute.Int("coalesce.version", job.Version),
			attribute.String("messaging.system", "nats")))
	err := p.Publisher.Publish(ctx, job)
	End(span, err)
	return err
}

// MaxPayload and JobFits keep the wrapped publisher's size check.
func (p tracedPublisher) MaxPayload() int64 {
	if s, ok := p.Publisher.(interface{ MaxPayload() int64 }); ok {
		return s.MaxPayload()
	}
	return 1 << 62
}

// JobFits is the wrapped publisher's.
func (p tracedPublisher) JobFits(job debounce.Job) error {
	if s, ok := p.Publisher.(interface{ JobFits(debounce.Job) error }); ok {
		return s.JobFits(job)
	}
	return nil
}

// WorkerSpan is worker.Hooks.Span: coalesce.start and coalesce.run, children
// of the job's traceparent. For run it also sets job.TraceParent to the run
// span, so a handler in another process (--exec, --post: the job document
// and the traceparent header) continues the trace under it.
func (t *Tracing) WorkerSpan(ctx context.Context, name string, job *worker.Job) (context.Context, func(error)) {
	if job.TraceParent != "" {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": job.TraceParent})
	}
	ctx, span := t.tracer.Start(ctx, "coalesce."+name, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("coalesce.job_type", job.Type), attribute.String("coalesce.round", job.Token.String()),
			attribute.String("coalesce.key", job.Key.String()), attribute.Int("coalesce.attempt", job.Attempt),
			attribute.Int("coalesce.events", job.Summary.Events)))
	if name == "run" {
		if tp := TraceParent(ctx); tp != "" {
			job.TraceParent = tp
		}
	}
	return ctx, func(err error) { End(span, err) }
}

// TraceParent is the W3C traceparent of ctx's span ("" when none).
func TraceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// End ends span, recording err.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
