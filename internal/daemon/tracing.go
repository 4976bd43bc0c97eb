package daemon

import (
	"context"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/coalesce-io/coalesce/debounce"
)

// Tracing (APIConfig.Tracer, set by coalesce serve when OTEL_* ask for
// traces: internal/telemetry): a server span per HTTP request, its parent
// the request's traceparent header, and a coalesce.submit span per event
// with the decision as attributes. The event then carries the submit
// span's trace context to its job (same trace as the event's own
// traceparent, which it descends from), so the workers' spans continue it.
// With no tracer nothing here runs.

var noEnd = func(debounce.Decision, error) {}

// traced wraps a route's handler in a server span.
func traced(tracer trace.Tracer, method, pattern string, h http.HandlerFunc) http.HandlerFunc {
	name := pattern
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, r.Method+" "+name, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", pattern)))
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h(sw, r.WithContext(ctx))
		span.SetAttributes(attribute.Int("http.response.status_code", sw.code))
		if sw.code >= 500 {
			span.SetStatus(codes.Error, strconv.Itoa(sw.code))
		}
		span.End()
	}
}

// submitSpan starts ev's coalesce.submit span and points ev's trace context
// at it; end records the decision.
func (a *API) submitSpan(ctx context.Context, ev *debounce.Event) (context.Context, func(debounce.Decision, error)) {
	if a.cfg.Tracer == nil {
		return ctx, noEnd
	}
	ctx, span := a.cfg.Tracer.Start(ctx, "coalesce.submit", trace.WithAttributes(attribute.String("coalesce.job_type", ev.Type)))
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	if tp := c["traceparent"]; tp != "" {
		ev.TraceParent = tp
	}
	return ctx, func(d debounce.Decision, err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(attribute.String("coalesce.outcome", string(d.Outcome)), attribute.String("coalesce.round", d.Round.String()),
				attribute.String("coalesce.key", d.Key.String()), attribute.Int("coalesce.events", d.Events), attribute.Bool("coalesce.replayed", d.Replayed))
		}
		span.End()
	}
}
