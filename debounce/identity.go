package debounce

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/coalesce-io/coalesce/fingerprint"
)

// A round's identity is what it keeps of its job so that the reaper can
// publish the job again when the stream lost it (purged, removed by hand, a
// NATS store lost): type, key, fingerprint, mode, payload, lifetime, trace
// context and args. A hash-layout round keeps it from its opening (field
// j); a packed round has no room for it (its whole value is one integer),
// so the first event that finds it overdue writes it beside the round (key
// suffix "j", with that event's args). JSON, versioned by "v".
type identity struct {
	V       int             `json:"v"`
	Type    string          `json:"type"`
	Key     string          `json:"key"`
	FP      string          `json:"fp"`
	Mode    Mode            `json:"mode"`
	Payload Payload         `json:"payload"`
	TTL     int64           `json:"ttl"` // ms
	Trace   string          `json:"tp,omitempty"`
	Args    json.RawMessage `json:"args"`
	// Beside a packed round only (a hash round has them in its fields).
	Round  string `json:"round,omitempty"`
	Opened int64  `json:"opened,omitempty"` // unix ms
	Due    int64  `json:"due,omitempty"`    // unix ms; 0: immediate
}

const identityVersion = 1

// appendIdentity writes job's identity; with packed, the round's token and
// times too. Args are valid JSON (fingerprinted already), copied as they are.
func appendIdentity(b []byte, job Job, packed bool) []byte {
	b = append(b, `{"v":1,"type":`...)
	b = strconv.AppendQuote(b, job.Type)
	b = append(b, `,"key":"`...)
	b = hex.AppendEncode(b, job.Key[:])
	b = append(b, `","fp":"`...)
	b = hex.AppendEncode(b, job.Fingerprint[:])
	b = append(b, `","mode":`...)
	b = strconv.AppendQuote(b, string(job.Mode))
	b = append(b, `,"payload":`...)
	b = strconv.AppendQuote(b, string(job.Payload))
	b = append(b, `,"ttl":`...)
	b = strconv.AppendInt(b, job.TTL.Milliseconds(), 10)
	if job.TraceParent != "" {
		b = append(b, `,"tp":`...)
		b = strconv.AppendQuote(b, job.TraceParent)
	}
	b = append(b, `,"args":`...)
	b = append(b, job.Args...)
	if packed {
		b = append(b, `,"round":"`...)
		b = append(b, job.Token.String()...)
		b = append(b, `","opened":`...)
		b = strconv.AppendInt(b, job.OpenedAt.UnixMilli(), 10)
		if !job.DueAt.IsZero() {
			b = append(b, `,"due":`...)
			b = strconv.AppendInt(b, job.DueAt.UnixMilli(), 10)
		}
	}
	return append(b, '}')
}

// parseIdentity reads an identity back into the job it names (without the
// token and times of a hash round, which its fields hold).
func parseIdentity(raw string) (identity, Job, error) {
	var id identity
	if err := json.Unmarshal([]byte(raw), &id); err != nil {
		return id, Job{}, fmt.Errorf("round identity: %w", err)
	}
	if id.V != identityVersion {
		return id, Job{}, fmt.Errorf("round identity: version %d, want %d", id.V, identityVersion)
	}
	key, err := fingerprint.Parse(id.Key)
	if err != nil {
		return id, Job{}, fmt.Errorf("round identity: key: %w", err)
	}
	fp, err := fingerprint.Parse(id.FP)
	if err != nil {
		return id, Job{}, fmt.Errorf("round identity: fp: %w", err)
	}
	job := Job{
		Type: id.Type, Key: RoundKey(key), Fingerprint: fp, Mode: id.Mode, Payload: id.Payload,
		Args: id.Args, TTL: time.Duration(id.TTL) * time.Millisecond, TraceParent: id.Trace,
	}
	if id.Round != "" {
		if job.Token, err = ParseToken(id.Round); err != nil {
			return id, Job{}, fmt.Errorf("round identity: %w", err)
		}
		job.OpenedAt = msTime(id.Opened)
		if id.Due != 0 {
			job.DueAt = msTime(id.Due)
		}
	}
	return id, job, nil
}
