package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/coalesce-io/coalesce/debounce"
)

// A dead letter keeps everything its replay promises: the job's args and
// its round's summary (the items of an accumulate round, the last args of
// a payload-last one), since Finish then deletes the round's taken copy.
// A summary of up to MaxSummaryHeader bytes of JSON travels in the
// Coalesce-Summary header; a larger one (a 700-item round of ordinary
// args is some 90 KiB) in the body, which is then
//
//	{"args": <the job's args>, "summary": <the summary>}
//
// with the header Coalesce-Summary-In-Body: 1. A replayed job carries its
// summary the same way. A summary that cannot be kept (a message over the
// server's max payload) is no dead letter: the job is delivered again
// later, its round's taken copy kept, until it can be.

// HeaderSummaryInBody marks a dead letter, or a replayed job, whose body is
// {"args": …, "summary": …}: its summary did not fit MaxSummaryHeader.
const HeaderSummaryInBody = "Coalesce-Summary-In-Body"

// MaxSummaryHeader is the largest summary, in bytes of JSON, carried in
// the Coalesce-Summary header: forwarded over HTTP (the worker protocol's
// POST /v1/jobs/start) with the other headers, it stays within the
// daemon's 64 KiB of request headers.
const MaxSummaryHeader = 32 << 10

// ErrSummaryBody: a body marked Coalesce-Summary-In-Body that is not
// {"args": …, "summary": …}.
var ErrSummaryBody = errors.New("worker: dead letter body")

type summaryBody struct {
	Args    json.RawMessage `json:"args"`
	Summary json.RawMessage `json:"summary"`
}

// PackSummary puts sum into a dead letter (or a replayed job) with headers
// h and the job's args: in h when small enough, else in the body it
// returns (args otherwise). A summary with no event is left out. It fails
// only for a summary too large for a header whose args are not JSON.
func PackSummary(h nats.Header, args []byte, sum debounce.Summary) ([]byte, error) {
	h.Del(HeaderSummary)
	h.Del(HeaderSummaryInBody)
	if sum.Events == 0 {
		return args, nil
	}
	b, err := json.Marshal(sum)
	if err != nil {
		return nil, fmt.Errorf("worker: encoding the summary: %w", err)
	}
	return packSummary(h, args, b)
}

func packSummary(h nats.Header, args, sum []byte) ([]byte, error) {
	if len(sum) <= MaxSummaryHeader {
		h.Set(HeaderSummary, string(sum))
		return args, nil
	}
	if !json.Valid(args) {
		return nil, fmt.Errorf("worker: the summary (%d bytes) is too large for a header and the args are not JSON", len(sum))
	}
	body, err := json.Marshal(summaryBody{Args: args, Summary: sum})
	if err != nil {
		return nil, fmt.Errorf("worker: encoding the summary: %w", err)
	}
	h.Set(HeaderSummaryInBody, "1")
	return body, nil
}

// UnpackSummary reads what PackSummary wrote: the job's args and, if one
// was kept (found), the summary, from the header or the body.
func UnpackSummary(h map[string][]string, data []byte) (args []byte, sum debounce.Summary, found bool, err error) {
	hh := nats.Header(h)
	if hh.Get(HeaderSummaryInBody) == "" {
		raw := hh.Get(HeaderSummary)
		if raw == "" {
			return data, sum, false, nil
		}
		if err := json.Unmarshal([]byte(raw), &sum); err != nil {
			return data, sum, false, fmt.Errorf("%w: header %s: %w", ErrSummaryBody, HeaderSummary, err)
		}
		return data, sum, true, nil
	}
	var body summaryBody
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || len(body.Args) == 0 || len(body.Summary) == 0 {
		return data, sum, false, fmt.Errorf("%w: %s is set but the body is not {\"args\": …, \"summary\": …}", ErrSummaryBody, HeaderSummaryInBody)
	}
	if err := json.Unmarshal(body.Summary, &sum); err != nil {
		return data, sum, false, fmt.Errorf("%w: summary: %w", ErrSummaryBody, err)
	}
	return body.Args, sum, true, nil
}

// RepackSummary is PackSummary for a message whose summary is already
// packed (a dead letter replayed): the same summary, moved between header
// and body only as its size asks. It returns the body to send.
func RepackSummary(h nats.Header, data []byte) ([]byte, error) {
	args, sum, found, err := UnpackSummary(h, data)
	if err != nil || !found {
		return args, err
	}
	return PackSummary(h, args, sum)
}
