package daemon

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// ExportedMetricNames are the names of every coalesce series a daemon or a
// worker may export: MetricNames(m) and the outbox relay's, which are
// registered only when an outbox is configured.
func ExportedMetricNames() map[string]bool {
	m := NewMetrics()
	out := MetricNames(m)
	om := newOutboxMetrics(m)
	ch := make(chan *prometheus.Desc, 16)
	go func() {
		for _, c := range []prometheus.Collector{om.rows, om.lag, om.backlog, om.oldest} {
			c.Describe(ch)
		}
		close(ch)
	}()
	for d := range ch {
		out[descName(d)] = true
	}
	return out
}

// descName is a Desc's fully qualified name (Desc{fqName: "...", ...}).
func descName(d *prometheus.Desc) string {
	s := d.String()
	i := strings.Index(s, `fqName: "`)
	if i < 0 {
		return ""
	}
	s = s[i+len(`fqName: "`):]
	return s[:strings.IndexByte(s, '"')]
}
