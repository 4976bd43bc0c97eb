package daemon

import (
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// EventFrom is the NATS ingest decoder, for the fuzz target.
var EventFrom = eventFrom

// LoseAcks makes in lose the acks of the stored events f is true for.
func LoseAcks(in *Ingest, f func(jetstream.Msg) bool) { in.loseAck.Store(&f) }

// IngestCount is ingest_total{source,result}.
func IngestCount(m *Metrics, source, result string) float64 {
	return testutil.ToFloat64(m.ingest.WithLabelValues(source, result))
}

// SetMaxAckPending gives the intake's consumers n pending acks at most
// instead of 16,384, so a test fills them with a few events.
func SetMaxAckPending(cfg *IngestConfig, n int) { cfg.maxAckPending = n }

// MetricNames are the names of every series m registers (histograms
// without their _bucket, _sum and _count).
func MetricNames(m *Metrics) map[string]bool {
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range append(m.collectors(), m.later...) {
			c.Describe(ch)
		}
		close(ch)
	}()
	out := map[string]bool{}
	for d := range ch {
		s := d.String() // Desc{fqName: "coalesce_events_total", ...}
		if i := strings.Index(s, `fqName: "`); i >= 0 {
			name := s[i+len(`fqName: "`):]
			out[name[:strings.IndexByte(name, '"')]] = true
		}
	}
	return out
}

// AllMetrics is a Metrics with every series registered, the outbox's and
// local joins' included (their values are never read).
func AllMetrics() *Metrics {
	m := NewMetrics()
	newOutboxMetrics(m)
	m.WatchLocalJoins(nil)
	return m
}
