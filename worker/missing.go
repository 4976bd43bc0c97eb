package worker

import (
	"log/slog"
	"sync"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// missingWatch notices a steady share of jobs whose round was missing at
// start. A few are expected (a round that expired, a Redis restart); many
// mean the worker and the producers do not share their rounds, and the jobs
// run without their data while the producers' rounds take in events for
// jobs that already ran.
type missingWatch struct {
	mu             sync.Mutex
	since          time.Time
	starts, missed int
	warned         time.Time
}

const (
	missingWindow = time.Minute
	missingMin    = 10 // missing starts in a window before a warning
)

// note counts one start; it logs at most one warning a window, when at
// least missingMin starts and half of them found their round missing.
func (m *missingWatch) note(r debounce.ReleaseResult, now time.Time, log *slog.Logger) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.Sub(m.since) > missingWindow {
		m.since, m.starts, m.missed = now, 0, 0
	}
	m.starts++
	if r == debounce.ReleaseMissing || r == debounce.ReleaseStaleToken {
		m.missed++
	}
	if m.missed >= missingMin && 2*m.missed >= m.starts && now.Sub(m.warned) > missingWindow {
		m.warned = now
		log.Warn("worker: many jobs find their round missing at start, so they run without their round's data; likely causes: "+
			"this worker uses another Redis, database or key prefix than the producers (--redis, --config: redis.prefix), "+
			"Redis lost its data (no persistence, or eviction: use maxmemory-policy noeviction), or jobs waited longer than the stream's max_age",
			"missing", m.missed, "starts", m.starts, "within", now.Sub(m.since).Round(time.Second))
	}
}
