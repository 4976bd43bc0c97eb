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
// NATS store lost).
//
// A hash-layout round keeps it from its opening, in fields short enough for
// the hash to stay a listpack (a value over 64 bytes would turn the whole
// round into a hash table, four times the memory): k the round key's 32
// bytes then the job type, g the fingerprint when it is not the key (an
// explicit key), o the opening event's args (payload last has them in a).
// Mode, payload and lifetime come from the type's policy at repair.
//
// A packed round has no room for one (its whole value is one integer), so
// the first event that finds it overdue writes one beside the round (key
// suffix "j", with that event's args): JSON, versioned by "v".
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
	Round   string          `json:"round,omitempty"`
	Opened  int64           `json:"opened,omitempty"` // unix ms
	Due     int64           `json:"due,omitempty"`    // unix ms; 0: immediate
	Lease   int64           `json:"lease,omitempty"`  // ms: an exclusive key's lease (Job.Lease)
}

const identityVersion = 1

// appendHashIdentity adds the identity arguments of open_round.lua (k, g,
// o) for job; with payload last, o (the opening args) only when asked for:
// a round held in Redis until due publishes them as its job's body.
func appendHashIdentity(a *callArgs, argv []any, job *Job, withArgs bool) []any {
	k := a.took(append(append(a.room(), job.Key[:]...), job.Type...))
	var g, o any = "", ""
	if [32]byte(job.Fingerprint) != [32]byte(job.Key) {
		g = a.bytes(a.took(append(a.room(), job.Fingerprint[:]...)))
	}
	if job.Payload != PayloadLast || withArgs {
		o = a.bytes(job.Args)
	}
	return append(argv, a.bytes(k), g, o)
}

// hashIdentity rebuilds the job of a hash-layout round from its identity
// fields (k, g, o) and its last args (a), with its type's policy; ok is
// false when the round has none (opened by an older version) or its type
// has no policy any more.
func (c *Coalescer) hashIdentity(k, g, o, a string) (Job, bool) {
	if len(k) <= len(RoundKey{}) {
		return Job{}, false
	}
	var job Job
	copy(job.Key[:], k)
	job.Type = k[len(RoundKey{}):]
	p, ok := c.policies[job.Type]
	if !ok {
		return Job{}, false
	}
	job.Fingerprint = fingerprint.Fingerprint(job.Key)
	if len(g) == len(job.Fingerprint) {
		copy(job.Fingerprint[:], g)
	}
	job.Mode, job.Payload, job.TTL = p.Mode, p.Payload, p.lifetime()
	job.Args = json.RawMessage(o)
	if o == "" {
		job.Args = json.RawMessage(a)
	}
	return job, true
}

// identitySize bounds the size appendIdentity writes for job, so that it
// writes into one allocation: 344 bytes of names, hex and numbers at their
// longest (every number 20 characters), the type, mode, payload and trace
// context as they are (quoted: none has a character to escape; Submit
// refuses any other) and the args. TestIdentitySizeBounds checks it.
func identitySize(job Job) int {
	return 344 + len(job.Type) + len(job.Mode) + len(job.Payload) + len(job.TraceParent) + len(job.Args)
}

// appendIdentity writes the identity of a packed round's job, with the
// round's token and times. Args are valid JSON (fingerprinted already),
// copied as they are.
func appendIdentity(b []byte, job Job) []byte {
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
	b = append(b, `,"round":"`...)
	if job.Token != 0 {
		b = job.Token.appendHex(b)
	}
	b = append(b, `","opened":`...)
	b = strconv.AppendInt(b, job.OpenedAt.UnixMilli(), 10)
	if !job.DueAt.IsZero() {
		b = append(b, `,"due":`...)
		b = strconv.AppendInt(b, job.DueAt.UnixMilli(), 10)
	}
	if job.Lease > 0 {
		b = append(b, `,"lease":`...)
		b = strconv.AppendInt(b, job.Lease.Milliseconds(), 10)
	}
	return append(b, '}')
}

// parseIdentity reads a packed round's identity back into the job it names.
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
		Lease: time.Duration(id.Lease) * time.Millisecond,
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
