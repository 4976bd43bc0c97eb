package telemetry_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/daemon"
	"github.com/coalesce-io/coalesce/internal/telemetry"
	"github.com/coalesce-io/coalesce/internal/testenv"
)

// BenchmarkPostEventTracing measures POST /v1/events through the handler
// (no network) with tracing off (no OTEL_* set: APIConfig.Tracer nil) and
// on (the SDK, every span sampled, batched to an exporter that drops
// them). Events join pending rounds locally, so the decision is cheap and
// the tracing's share shows.
func BenchmarkPostEventTracing(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("tracing=%v", on), func(b *testing.B) {
			rdb := redis.NewClient(&redis.Options{Addr: testenv.SharedRedis(b).Addr, DisableIdentity: true, MaxRetries: -1})
			defer rdb.Close()
			var tr *telemetry.Tracing
			if on {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				defer tp.Shutdown(context.Background())
				tr = telemetry.New(tp)
			}
			co, err := debounce.New(debounce.Config{Redis: rdb, Prefix: testenv.Prefix(b),
				Publisher: tr.Publisher(debounce.PublisherFunc(func(context.Context, debounce.Job) error { return nil })),
				Policies:  []debounce.Policy{{Type: "t", Mode: debounce.ModeDebounce, Window: time.Hour, KeyFields: []string{"k"}}}})
			if err != nil {
				b.Fatal(err)
			}
			h := daemon.NewAPI(daemon.APIConfig{Coalescer: co, Tracer: tr.Tracer()}).Handler()
			body := `{"type":"t","args":{"k":1}}`
			post := func() {
				req := httptest.NewRequest("POST", "/v1/events", strings.NewReader(body))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("%d %s", w.Code, w.Body)
				}
			}
			post()
			b.ReportAllocs()
			for b.Loop() {
				post()
			}
		})
	}
}
