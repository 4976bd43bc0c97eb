package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/coalesce-io/coalesce/internal/telemetry"
)

// shutdownTracing exports the spans still buffered (OTEL_* configured
// tracing; nothing when off).
func shutdownTracing(t *telemetry.Tracing, log *slog.Logger) {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("tracing: could not export the last spans", "err", err)
	}
}
