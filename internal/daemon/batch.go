package daemon

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// Batches: POST /v1/events:batch, NDJSON in and out.

// postBatch decides NDJSON events and answers NDJSON in the same order, one
// line per non-blank input line: the decision, or {"error":...}.
//
// The body is read first, line by line, into a spool (memory up to
// spoolInMemory, a temporary file beyond), so a batch over the byte limit
// (BatchLimitFactor times the body limit) or over BatchMaxLines lines is
// refused before any line is decided, and what it holds in memory is
// bounded by the configuration, not by its body: blank lines cost nothing,
// a line over the body limit is answered too_large in place. The spool is
// then decided a chunk at a time (batchChunkLines lines, events of one key
// in line order) and the answers written at the end, the write deadline
// renewed so a batch that takes longer than the server's write timeout is
// still answered in full.
func (a *API) postBatch(w http.ResponseWriter, r *http.Request) *apiError {
	limit := a.cfg.BodyLimit * BatchLimitFactor
	if r.ContentLength > limit {
		return errf(http.StatusRequestEntityTooLarge, "too_large", "", "body of %d bytes is over the %d-byte limit", r.ContentLength, limit)
	}
	rc := http.NewResponseController(w)
	if a.cfg.WriteTimeout > 0 {
		// The wait for a slot may outlast the server's write timeout: the
		// answer, a refusal included, gets its own, or the client sees the
		// connection close with no answer and cannot tell refused from lost.
		defer func() { _ = rc.SetWriteDeadline(time.Now().Add(a.cfg.WriteTimeout)) }()
	}
	wait := time.NewTimer(a.cfg.BatchWait)
	select {
	case a.batches <- struct{}{}:
		wait.Stop()
		defer func() { <-a.batches }()
	case <-wait.C:
		e := errf(http.StatusTooManyRequests, "busy", "", "every batch slot (%d) stayed taken for %v: nothing was decided; send the batch again after Retry-After", a.cfg.Batches, a.cfg.BatchWait)
		e.retryAfter = retryAfterDefault
		return e
	case <-r.Context().Done():
		wait.Stop()
		return errf(http.StatusServiceUnavailable, "canceled", "", "the request ended while waiting for a batch slot")
	}
	if a.cfg.ReadTimeout > 0 {
		// The wait for a slot is not the client's slowness: reading the
		// body starts its own read timeout.
		_ = rc.SetReadDeadline(time.Now().Add(a.cfg.ReadTimeout))
	}
	sp := &spool{}
	defer sp.close()
	br := bufio.NewReaderSize(http.MaxBytesReader(w, r.Body, limit), 64<<10)
	n := 0 // non-blank lines
	var tooLarge *http.MaxBytesError
	for {
		line, over, err := readLine(br, a.cfg.BodyLimit)
		if over || len(bytes.Trim(line, " \t\r\n")) > 0 { // JSON whitespace only: other spaces are bad lines
			if n++; n > BatchMaxLines {
				return errf(http.StatusRequestEntityTooLarge, "batch_too_long", "", "a batch holds at most %d lines; split it", BatchMaxLines)
			}
			if over {
				line = nil // an empty spool line: over the body limit
			}
			if werr := sp.writeLine(line); werr != nil {
				return errf(http.StatusServiceUnavailable, "spool_failed", "", "cannot hold the batch to decide it: %v", werr)
			}
		}
		switch {
		case err == nil:
			continue
		case errors.Is(err, io.EOF):
		case errors.As(err, &tooLarge):
			return errf(http.StatusRequestEntityTooLarge, "too_large", "", "body is over the %d-byte limit", limit)
		default:
			return errf(http.StatusBadRequest, "bad_body", "", "reading the body: %v", err)
		}
		break
	}
	src, err := sp.reader()
	if err != nil {
		return errf(http.StatusServiceUnavailable, "spool_failed", "", "cannot read the batch back: %v", err)
	}
	// From here every line is answered in place, in order, as its chunk is
	// decided: the status is 200 whatever the lines hold.
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	out := bufio.NewWriterSize(w, 32<<10)
	sr := bufio.NewReaderSize(src, 64<<10)
	var chunk [][]byte
	chunkBytes := int64(0)
	decide := func() {
		answers := a.decideBatch(r, chunk)
		if a.cfg.WriteTimeout > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(a.cfg.WriteTimeout))
		}
		for _, ans := range answers {
			_, _ = out.Write(ans)
			_ = out.WriteByte('\n')
		}
		if out.Flush() == nil {
			_ = rc.Flush()
		}
		chunk, chunkBytes = chunk[:0], 0
	}
	for {
		line, _, err := readLine(sr, a.cfg.BodyLimit)
		if err == nil || len(line) > 0 {
			if len(line) == 0 {
				chunk = append(chunk, nil) // answered too_large in place
			} else {
				chunk = append(chunk, bytes.Clone(line))
				chunkBytes += int64(len(line))
			}
			if len(chunk) >= batchChunkLines || chunkBytes >= 4*a.cfg.BodyLimit {
				decide()
			}
		}
		if err != nil {
			break
		}
	}
	if len(chunk) > 0 {
		decide()
	}
	return nil
}

// spoolInMemory: a batch spool up to this size stays in memory.
const spoolInMemory = 1 << 20

// spool holds a batch's non-blank lines, newline-terminated, until they are
// decided: in memory while small, in a temporary file (removed at close)
// beyond spoolInMemory.
type spool struct {
	mem bytes.Buffer
	f   *os.File
	bw  *bufio.Writer
}

func (s *spool) writeLine(line []byte) error {
	if s.f == nil && s.mem.Len()+len(line)+1 > spoolInMemory {
		f, err := os.CreateTemp("", "coalesce-batch-*")
		if err != nil {
			return err
		}
		s.f, s.bw = f, bufio.NewWriterSize(f, 64<<10)
		if _, err := s.mem.WriteTo(s.bw); err != nil {
			return err
		}
	}
	if s.f == nil {
		s.mem.Write(line)
		s.mem.WriteByte('\n')
		return nil
	}
	if _, err := s.bw.Write(line); err != nil {
		return err
	}
	return s.bw.WriteByte('\n')
}

func (s *spool) reader() (io.Reader, error) {
	if s.f == nil {
		return &s.mem, nil
	}
	if err := s.bw.Flush(); err != nil {
		return nil, err
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return s.f, nil
}

func (s *spool) close() {
	if s.f != nil {
		s.f.Close()
		os.Remove(s.f.Name())
	}
}

// batchChunkLines: the lines of a batch decided together.
const batchChunkLines = 256

// readLine reads one line (without its newline) of at most limit bytes,
// valid until the next read. A longer line is read to its end and dropped:
// over is true, line is nil. err is io.EOF after the last line, or the
// body's error.
func readLine(br *bufio.Reader, limit int64) (line []byte, over bool, err error) {
	frag, err := br.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		if int64(len(frag)) > limit+1 { // +1: the newline
			return nil, true, err
		}
		return bytes.TrimSuffix(frag, []byte{'\n'}), false, err
	}
	buf := bytes.Clone(frag)
	for errors.Is(err, bufio.ErrBufferFull) {
		frag, err = br.ReadSlice('\n')
		if !over {
			if int64(len(buf)+len(frag)) > limit+1 {
				over, buf = true, nil
			} else {
				buf = append(buf, frag...)
			}
		}
	}
	if over {
		return nil, true, err
	}
	return bytes.TrimSuffix(buf, []byte{'\n'}), false, err
}

// decideBatch decides the lines concurrently, except that the events of one
// round key are decided one after another in line order (so "first" and
// "last" mean what the batch says), and returns one answer per line.
func (a *API) decideBatch(r *http.Request, lines [][]byte) [][]byte {
	out := make([][]byte, len(lines))
	events := make([]debounce.Prepared, len(lines))
	types := make([]string, len(lines))
	groups := map[string][]int{}
	var order []string
	for i, line := range lines {
		if line == nil {
			out[i] = marshal(errorBody{errf(http.StatusRequestEntityTooLarge, "too_large", "", "line of the batch over the %d-byte body limit", a.cfg.BodyLimit)})
			continue
		}
		ev, err := DecodeEvent(line)
		var pr debounce.Prepared
		if err == nil {
			traceparent(r, &ev)
			pr, err = a.cfg.Coalescer.Prepare(ev)
		}
		if err != nil {
			out[i] = errorJSON(err)
			continue
		}
		events[i], types[i] = pr, ev.Type
		key := pr.Key()
		g := ev.Type + "\n" + string(key[:])
		if _, seen := groups[g]; !seen {
			order = append(order, g)
		}
		groups[g] = append(groups[g], i)
	}
	// BatchParallel workers take the groups in order (a goroutine per group
	// would grow a fresh stack for each).
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(a.cfg.BatchParallel, len(order)) {
		wg.Go(func() {
			for {
				gi := int(next.Add(1)) - 1
				if gi >= len(order) {
					return
				}
				for _, i := range groups[order[gi]] {
					ctx, end := r.Context(), noEnd
					if a.cfg.Tracer != nil {
						// The line's job keeps the line's own trace context
						// (prepared already); the span is the decision's.
						ev := debounce.Event{Type: types[i]}
						ctx, end = a.submitSpan(ctx, &ev)
					}
					d, err := a.cfg.Coalescer.SubmitPrepared(ctx, events[i])
					end(d, err)
					if err != nil {
						out[i] = errorJSON(err)
						continue
					}
					out[i] = appendDecision(nil, d)
				}
			}
		})
	}
	wg.Wait()
	return out
}

// appendDecision appends d as marshal writes it (TestAppendDecisionIsMarshal),
// without reflection: a batch writes one per event.
func appendDecision(b []byte, d debounce.Decision) []byte {
	if !plainJSON(d.Type) || !plainJSON(string(d.Outcome)) {
		return append(b, marshal(d)...)
	}
	b = append(b, `{"outcome":"`...)
	b = append(b, d.Outcome...)
	b = append(b, `","type":"`...)
	b = append(b, d.Type...)
	b = append(b, `","key":"`...)
	b = hex.AppendEncode(b, d.Key[:])
	b = append(b, `","fingerprint":"`...)
	b = hex.AppendEncode(b, d.Fingerprint[:])
	b = append(b, `","round":"`...)
	if d.Round != 0 {
		b = fmt.Appendf(b, "%016x", uint64(d.Round))
	}
	b = append(b, '"')
	if !d.DueAt.IsZero() {
		due, err := d.DueAt.MarshalJSON()
		if err != nil {
			return append(b[:0], marshal(d)...)
		}
		b = append(b, `,"due_at":`...)
		b = append(b, due...)
	}
	b = append(b, `,"events":`...)
	b = strconv.AppendInt(b, int64(d.Events), 10)
	if d.Replayed {
		b = append(b, `,"replayed":true`...)
	}
	return append(b, '}')
}

// plainJSON: s needs no escaping in a JSON string.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

func errorJSON(err error) []byte {
	b := marshal(errorBody{submitError(err)})
	return b
}
