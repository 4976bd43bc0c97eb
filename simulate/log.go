package simulate

import (
	"bufio"
	"bytes"
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"strconv"
	"strings"
	"time"
)

// Event is one line of an event log: when it happened and what was
// submitted.
type Event struct {
	At   time.Time       `json:"at"`
	Type string          `json:"type"`
	Args json.RawMessage `json:"args"`
	Key  string          `json:"key,omitempty"`
	// Line is the event's line in its log (0 when generated).
	Line int `json:"-"`
}

// Limits of the log reader.
const (
	// MaxLineSize is the longest log line read (the daemon's default body
	// limit: no event it took is longer).
	MaxLineSize = 1 << 20
	// Reorder is how far back in time an event may come after a later one:
	// the reader sorts events within it (a log written by concurrent
	// requests is a little out of order). Further back is an error.
	Reorder = time.Minute
	// minUnixMs: a number below it is taken for unix seconds, not
	// milliseconds (it would be in 1973).
	minUnixMs = 100_000_000_000
	// maxUnixMs is the end of year 9999, the last RFC 3339 can write.
	maxUnixMs = 253_402_300_799_999
)

// ErrLog is what every error reading a log matches (a *LogError).
var ErrLog = errors.New("simulate: event log")

// LogError says which line of a log is wrong, which field, and why.
type LogError struct {
	Line  int    // 1-based
	Field string // at, type, args, key; "" for the line as a whole
	Msg   string
}

func (e *LogError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return fmt.Sprintf("line %d: %s: %s", e.Line, e.Field, e.Msg)
}

// Unwrap lets errors.Is match ErrLog.
func (e *LogError) Unwrap() error { return ErrLog }

// ReadLog reads an NDJSON event log, one event per line:
//
//	{"at": "2026-01-02T15:04:05.123Z" or 1767366245123, "type": "...", "args": {...}, "key": "..."}
//
// at is RFC 3339 or unix milliseconds; key is optional; other members are
// ignored; blank lines are skipped. Events are yielded in time order
// (within Reorder of each other they may come in any order). The first bad
// line ends the sequence with a *LogError naming its line and field.
func ReadLog(r io.Reader) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), MaxLineSize)
		var buf eventHeap
		var last Event // the latest event yielded
		emitted := false
		flush := func(upTo time.Time, all bool) bool {
			for len(buf) > 0 && (all || buf[0].At.Before(upTo)) {
				ev := heap.Pop(&buf).(Event)
				last, emitted = ev, true
				if !yield(ev, nil) {
					return false
				}
			}
			return true
		}
		line := 0
		var newest Event // the latest event read
		for sc.Scan() {
			line++
			raw := bytes.TrimSpace(sc.Bytes())
			if len(raw) == 0 {
				continue
			}
			ev, err := ParseEvent(raw)
			if err != nil {
				err.Line = line
				yield(Event{}, err)
				return
			}
			ev.Line = line
			if emitted && ev.At.Before(last.At) {
				yield(Event{}, &LogError{Line: line, Field: "at", Msg: fmt.Sprintf(
					"%s is %v before line %d (%s), more than the %v the reader sorts by itself: sort the log by at",
					ev.At.UTC().Format(time.RFC3339Nano), newest.At.Sub(ev.At), newest.Line, newest.At.UTC().Format(time.RFC3339Nano), Reorder)})
				return
			}
			heap.Push(&buf, ev)
			if ev.At.After(newest.At) {
				newest = ev
			}
			if !flush(newest.At.Add(-Reorder), false) {
				return
			}
		}
		if err := sc.Err(); err != nil {
			if errors.Is(err, bufio.ErrTooLong) {
				yield(Event{}, &LogError{Line: line + 1, Msg: fmt.Sprintf("longer than %d bytes", MaxLineSize)})
				return
			}
			yield(Event{}, fmt.Errorf("%w: line %d: %w", ErrLog, line+1, err))
			return
		}
		flush(time.Time{}, true)
	}
}

// logLine is a line as decoded, before its fields are checked.
type logLine struct {
	At   json.RawMessage `json:"at"`
	Type *string         `json:"type"`
	Args json.RawMessage `json:"args"`
	Key  *string         `json:"key"`
}

// ParseEvent reads one log line (Line is left 0).
func ParseEvent(raw []byte) (Event, *LogError) {
	var l logLine
	if err := json.Unmarshal(raw, &l); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return Event{}, &LogError{Field: te.Field, Msg: fmt.Sprintf("must be a %s, not a JSON %s", fieldKind(te.Field), te.Value)}
		}
		if len(raw) > 0 && raw[0] != '{' {
			return Event{}, &LogError{Msg: "not a JSON object; each line is {\"at\", \"type\", \"args\", \"key\"?}"}
		}
		return Event{}, &LogError{Msg: "not valid JSON: " + strings.TrimPrefix(err.Error(), "json: ")}
	}
	var ev Event
	at, lerr := parseAt(l.At)
	if lerr != nil {
		return Event{}, lerr
	}
	ev.At = at
	if l.Type == nil || *l.Type == "" {
		return Event{}, &LogError{Field: "type", Msg: "missing; the job type the event is for"}
	}
	ev.Type = *l.Type
	args := bytes.TrimSpace(l.Args)
	if len(args) == 0 || bytes.Equal(args, []byte("null")) {
		return Event{}, &LogError{Field: "args", Msg: "missing; use {} for a job without args"}
	}
	ev.Args = json.RawMessage(bytes.Clone(args))
	if l.Key != nil {
		if *l.Key == "" {
			return Event{}, &LogError{Field: "key", Msg: "empty; leave it out to key the event by its args"}
		}
		ev.Key = *l.Key
	}
	return ev, nil
}

func fieldKind(field string) string {
	switch field {
	case "type", "key":
		return "string"
	}
	return "value"
}

// parseAt reads at: an RFC 3339 string or unix milliseconds.
func parseAt(raw json.RawMessage) (time.Time, *LogError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return time.Time{}, &LogError{Field: "at", Msg: "missing; give RFC 3339 (\"2026-01-02T15:04:05.123Z\") or unix milliseconds"}
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return time.Time{}, &LogError{Field: "at", Msg: "not a valid JSON string"}
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return time.Time{}, &LogError{Field: "at", Msg: fmt.Sprintf("%q is not RFC 3339 (like \"2026-01-02T15:04:05.123Z\")", truncate(s, 60))}
		}
		return t, nil
	}
	n, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return time.Time{}, &LogError{Field: "at", Msg: fmt.Sprintf("%s is neither an RFC 3339 string nor unix milliseconds", truncate(string(raw), 60))}
	}
	switch {
	case n != float64(int64(n)):
		return time.Time{}, &LogError{Field: "at", Msg: fmt.Sprintf("%s: unix milliseconds must be a whole number", truncate(string(raw), 60))}
	case n < minUnixMs && n > 0:
		return time.Time{}, &LogError{Field: "at", Msg: fmt.Sprintf("%s looks like unix seconds; give unix milliseconds (%s000) or RFC 3339", string(raw), string(raw))}
	case n <= 0 || n > maxUnixMs:
		return time.Time{}, &LogError{Field: "at", Msg: fmt.Sprintf("%s is not a plausible time in unix milliseconds", truncate(string(raw), 60))}
	}
	return time.UnixMilli(int64(n)).UTC(), nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// eventHeap orders events by time, then by line.
type eventHeap []Event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if !h[i].At.Equal(h[j].At) {
		return h[i].At.Before(h[j].At)
	}
	return h[i].Line < h[j].Line
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(Event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// WriteEvent writes ev as one log line (what ReadLog reads, and what
// `coalesce serve --record` writes).
func WriteEvent(w io.Writer, ev Event) error {
	b := AppendEvent(make([]byte, 0, 64+len(ev.Args)+len(ev.Key)), ev)
	_, err := w.Write(b)
	return err
}

// AppendEvent appends ev's log line, with its newline.
func AppendEvent(b []byte, ev Event) []byte {
	b = append(b, `{"at":"`...)
	b = ev.At.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","type":`...)
	b = appendString(b, ev.Type)
	b = append(b, `,"args":`...)
	b = appendCompact(b, ev.Args)
	if ev.Key != "" {
		b = append(b, `,"key":`...)
		b = appendString(b, ev.Key)
	}
	return append(b, "}\n"...)
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendCompact appends JSON on one line (it may have come indented).
func appendCompact(b, js []byte) []byte {
	if !bytes.ContainsAny(js, "\n\r") {
		return append(b, js...)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, js); err != nil {
		q, _ := json.Marshal(string(js))
		return append(b, q...)
	}
	return append(b, buf.Bytes()...)
}
