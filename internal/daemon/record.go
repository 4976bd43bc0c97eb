package daemon

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/simulate"
)

// DefaultRecordLimit bounds a recording (coalesce serve --record).
const DefaultRecordLimit = 1 << 30

// recordFlushEvery: how often recorded lines reach the file.
const recordFlushEvery = time.Second

// Recorder writes the events the daemon accepts, whatever their intake
// (HTTP, NATS, the durable intake stream, cron, the outbox), to a file, one
// NDJSON line each, in the event log format coalesce simulate reads:
// {"at","type","args","key"?}, plus the decision's "outcome". at is when the
// event reached its decision, by the daemon's clock. A recording stops, and
// says so once, when the file reaches its limit; it appends to a file that
// exists (its size counts toward the limit).
type Recorder struct {
	mu      sync.Mutex
	path    string
	f       *os.File
	w       *bufio.Writer
	limit   int64
	size    int64
	full    bool
	err     error
	dropped int64
	buf     []byte
	log     *slog.Logger
	stop    chan struct{}
	done    chan struct{}
}

// OpenRecorder opens (or creates) path for recording up to limit bytes
// (DefaultRecordLimit when 0).
func OpenRecorder(path string, limit int64, log *slog.Logger) (*Recorder, error) {
	if limit <= 0 {
		limit = DefaultRecordLimit
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("record: %w", err)
	}
	r := &Recorder{path: path, f: f, w: bufio.NewWriterSize(f, 64<<10), limit: limit, size: st.Size(), log: log,
		stop: make(chan struct{}), done: make(chan struct{})}
	if r.size >= limit {
		r.full = true
		log.Warn("record: the file is already at its limit; no event is recorded (move it away, or raise --record-limit)",
			"file", path, "size", r.size, "limit", limit)
	}
	go r.flusher()
	return r, nil
}

// Record is a debounce.Hooks.Event: it writes an accepted event (an error
// means the event was not taken: the producer sends it again).
func (r *Recorder) Record(ev debounce.Event, at time.Time, d debounce.Decision, err error) {
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.full || r.err != nil {
		r.dropped++
		return
	}
	line := simulate.AppendEvent(r.buf[:0], simulate.Event{At: at, Type: ev.Type, Args: ev.Args, Key: ev.Key})
	// The decision too, after the event's own members (a reader of the
	// log ignores it).
	line = append(line[:len(line)-2], `,"outcome":`...)
	line = strconv.AppendQuote(line, string(d.Outcome))
	line = append(line, "}\n"...)
	r.buf = line
	if r.size+int64(len(line)) > r.limit {
		r.full = true
		r.dropped++
		r.log.Warn("record: the file reached its limit; events are no longer recorded", "file", r.path, "limit", r.limit)
		return
	}
	if _, werr := r.w.Write(line); werr != nil {
		r.err = werr
		r.log.Error("record: writing failed; events are no longer recorded", "file", r.path, "err", werr)
		return
	}
	r.size += int64(len(line))
}

func (r *Recorder) flusher() {
	defer close(r.done)
	t := time.NewTicker(recordFlushEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.mu.Lock()
			if r.err == nil {
				if err := r.w.Flush(); err != nil {
					r.err = err
					r.log.Error("record: writing failed; events are no longer recorded", "file", r.path, "err", err)
				}
			}
			r.mu.Unlock()
		}
	}
}

// Close writes what is buffered and closes the file; it returns the number
// of events not recorded (over the limit, or after a write error).
func (r *Recorder) Close() (int64, error) {
	close(r.stop)
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.err
	if err == nil {
		err = r.w.Flush()
	}
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	return r.dropped, err
}

// closeRecorder closes a recording as the daemon stops, saying what it
// left out.
func closeRecorder(r *Recorder, log *slog.Logger) {
	dropped, err := r.Close()
	switch {
	case err != nil:
		log.Error("record: closing the recording failed", "file", r.path, "err", err)
	case dropped > 0:
		log.Warn("record: events not recorded (the file's limit, or a write error)", "file", r.path, "events", dropped)
	}
}
