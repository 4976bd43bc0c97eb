package publisher

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/fingerprint"
	"github.com/nats-io/nats.go"
)

// Header names carried by every job message, scheduled or not, and kept on
// the message a schedule fires. They are a contract with the worker and with
// producers in other languages: do not rename them.
const (
	HeaderType        = "Coalesce-Type"        // job type
	HeaderKey         = "Coalesce-Key"         // round key, 64 hex digits
	HeaderFingerprint = "Coalesce-Fingerprint" // fp1 of the opening event, 64 hex digits
	HeaderRound       = "Coalesce-Round"       // round token, 16 hex digits; absent when bypassed
	HeaderMode        = "Coalesce-Mode"        // policy mode (dedup, throttle, debounce); absent when empty
	HeaderPayload     = "Coalesce-Payload"     // payload kind (first, last, accumulate); absent when empty
	HeaderOpenedAt    = "Coalesce-Opened-At"   // first event of the round, unix milliseconds
	HeaderDueAt       = "Coalesce-Due-At"      // due time, unix milliseconds; absent when immediate
	HeaderTTL         = "Coalesce-TTL"         // reservation lifetime, milliseconds
	HeaderVersion     = "Coalesce-Version"     // publishes of the round before this one, decimal
	HeaderTraceParent = "traceparent"          // W3C trace context of the opening event; absent when unset
	HeaderStore       = "Coalesce-Store"       // identity of the Redis the round was reserved in; absent when unknown
	HeaderStoreAddr   = "Coalesce-Store-Addr"  // that Redis as the producer reached it
	HeaderExclusive   = "Coalesce-Exclusive"   // an exclusive key's lease, milliseconds; absent when not exclusive
	// HeaderBypass identifies a bypassed job (no round): "_" and 16 hex
	// digits, random per publish (debounce.Job.Bypass); absent for a round's
	// job. The job's identity is then "<key>.<bypass>" (debounce.Job.ID).
	HeaderBypass = "Coalesce-Bypass"
)

// EncodeHeaders returns the coalesce headers of job (not the NATS ones:
// message id and schedule headers are added by Publish). Times travel as unix
// milliseconds and the TTL as milliseconds, so DecodeJob returns them
// truncated to the millisecond, times in UTC.
func EncodeHeaders(job debounce.Job) nats.Header {
	h := make(nats.Header, 12)
	h.Set(HeaderType, job.Type)
	h.Set(HeaderKey, job.Key.String())
	h.Set(HeaderFingerprint, job.Fingerprint.String())
	if job.Token != 0 {
		h.Set(HeaderRound, job.Token.String())
	}
	if job.Mode != "" {
		h.Set(HeaderMode, string(job.Mode))
	}
	if job.Payload != "" {
		h.Set(HeaderPayload, string(job.Payload))
	}
	h.Set(HeaderOpenedAt, strconv.FormatInt(job.OpenedAt.UnixMilli(), 10))
	if !job.DueAt.IsZero() {
		h.Set(HeaderDueAt, strconv.FormatInt(job.DueAt.UnixMilli(), 10))
	}
	h.Set(HeaderTTL, strconv.FormatInt(job.TTL.Milliseconds(), 10))
	h.Set(HeaderVersion, strconv.Itoa(job.Version))
	if job.TraceParent != "" {
		h.Set(HeaderTraceParent, job.TraceParent)
	}
	if job.Store != "" {
		h.Set(HeaderStore, job.Store)
		h.Set(HeaderStoreAddr, job.StoreAddr)
	}
	if job.Lease > 0 {
		h.Set(HeaderExclusive, strconv.FormatInt(job.Lease.Milliseconds(), 10))
	}
	if job.Token == 0 && job.Bypass != "" {
		h.Set(HeaderBypass, job.Bypass)
	}
	return h
}

// DecodeJob rebuilds the job a message carries from its headers and body:
// the inverse of EncodeHeaders plus Args = data (aliased, not copied; nil
// when empty). A missing required header (type, key, fingerprint, opened-at,
// TTL, version) or a malformed one is an ErrDecode naming the header.
func DecodeJob(h nats.Header, data []byte) (debounce.Job, error) {
	var (
		job debounce.Job
		err error
	)
	if job.Type, err = required(h, HeaderType); err != nil {
		return debounce.Job{}, err
	}
	if err := fingerprint.ValidateType(job.Type); err != nil {
		return debounce.Job{}, malformed(HeaderType, job.Type, err.Error())
	}
	k, err := required(h, HeaderKey)
	if err != nil {
		return debounce.Job{}, err
	}
	f, err := fingerprint.Parse(k)
	if err != nil {
		return debounce.Job{}, malformed(HeaderKey, k, "want 64 hex digits")
	}
	job.Key = debounce.RoundKey(f)
	fp, err := required(h, HeaderFingerprint)
	if err != nil {
		return debounce.Job{}, err
	}
	if job.Fingerprint, err = fingerprint.Parse(fp); err != nil {
		return debounce.Job{}, malformed(HeaderFingerprint, fp, "want 64 hex digits")
	}
	if r := h.Get(HeaderRound); r != "" {
		if len(r) != 16 {
			return debounce.Job{}, malformed(HeaderRound, r, "want 16 hex digits")
		}
		if job.Token, err = debounce.ParseToken(r); err != nil || job.Token == 0 {
			return debounce.Job{}, malformed(HeaderRound, r, "want 16 hex digits, not all zero")
		}
	}
	if b := h.Get(HeaderBypass); b != "" {
		if job.Token != 0 || !debounce.ValidBypass(b) {
			return debounce.Job{}, malformed(HeaderBypass, b, "want _ and 16 lowercase hex digits, on a job without "+HeaderRound)
		}
		job.Bypass = b
	}
	job.Mode = debounce.Mode(h.Get(HeaderMode))
	job.Payload = debounce.Payload(h.Get(HeaderPayload))
	if job.OpenedAt, err = unixMilli(h, HeaderOpenedAt, true); err != nil {
		return debounce.Job{}, err
	}
	if job.DueAt, err = unixMilli(h, HeaderDueAt, false); err != nil {
		return debounce.Job{}, err
	}
	ttl, err := required(h, HeaderTTL)
	if err != nil {
		return debounce.Job{}, err
	}
	ms, err := strconv.ParseInt(ttl, 10, 64)
	if err != nil || ms < 0 || ms > int64(debounce.MaxTTL/time.Millisecond) {
		return debounce.Job{}, malformed(HeaderTTL, ttl, "want milliseconds, 0 to "+strconv.FormatInt(int64(debounce.MaxTTL/time.Millisecond), 10))
	}
	job.TTL = time.Duration(ms) * time.Millisecond
	v, err := required(h, HeaderVersion)
	if err != nil {
		return debounce.Job{}, err
	}
	if job.Version, err = strconv.Atoi(v); err != nil || job.Version < 0 {
		return debounce.Job{}, malformed(HeaderVersion, v, "want a decimal integer >= 0")
	}
	job.TraceParent = h.Get(HeaderTraceParent)
	job.Store, job.StoreAddr = h.Get(HeaderStore), h.Get(HeaderStoreAddr)
	if v := h.Get(HeaderExclusive); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 || ms > int64(debounce.MaxLease/time.Millisecond) {
			return debounce.Job{}, malformed(HeaderExclusive, v, "want a lease in milliseconds, 1 to "+strconv.FormatInt(int64(debounce.MaxLease/time.Millisecond), 10))
		}
		job.Lease = time.Duration(ms) * time.Millisecond
	}
	if len(data) > 0 {
		job.Args = json.RawMessage(data)
	}
	return job, nil
}

// A DecodeError says which header of a job message is missing or
// malformed; it is ErrDecode (errors.Is).
type DecodeError struct {
	Header string // the header's name, as HeaderType ...
	Msg    string // "is missing", "... is malformed: want ..."
}

func (e *DecodeError) Error() string {
	return ErrDecode.Error() + ": header " + e.Header + " " + e.Msg
}

func (e *DecodeError) Unwrap() error { return ErrDecode }

func required(h nats.Header, name string) (string, error) {
	v := h.Get(name)
	if v == "" {
		return "", &DecodeError{Header: name, Msg: "is missing"}
	}
	return v, nil
}

func malformed(name, value, want string) error {
	if len(value) > 80 {
		value = value[:80] + "..."
	}
	return &DecodeError{Header: name, Msg: fmt.Sprintf("%q is malformed: %s", value, want)}
}

// unixMilli reads a unix-milliseconds header as a UTC time; absent is the
// zero time unless the header is required.
func unixMilli(h nats.Header, name string, req bool) (time.Time, error) {
	v := h.Get(name)
	if v == "" {
		if req {
			return time.Time{}, &DecodeError{Header: name, Msg: "is missing"}
		}
		return time.Time{}, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, malformed(name, v, "want unix milliseconds")
	}
	return time.UnixMilli(ms).UTC(), nil
}

// headerSafe reports whether s can be a NATS header value: printable ASCII
// and spaces only, so no CR or LF can end the header early.
func headerSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
