package worker

import (
	"encoding/json"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// Document is a job as workers in other languages get it: the JSON that
// `coalesce work --exec` writes on the command's stdin. Its field names are
// part of the public interface (see TestDocumentContract); a field is only
// ever added.
type Document struct {
	V           int             `json:"v"` // DocumentVersion
	Type        string          `json:"type"`
	Args        json.RawMessage `json:"args"`
	Key         string          `json:"key"`             // the round key, 64 hex digits
	Fingerprint string          `json:"fingerprint"`     // fp1 of the opening event, 64 hex digits
	Round       string          `json:"round,omitempty"` // the round token, 16 hex digits; absent when bypassed
	// ID is the job's identity (debounce.Job.ID): "<key>.<round>", or for
	// a bypassed job "<key>.<bypass>" ("_" and 16 hex digits). The same
	// for every delivery of the job and its replay from the dead letters,
	// another for every other job: key the job's effects with it.
	ID          string           `json:"id"`
	Mode        string           `json:"mode,omitempty"`
	Payload     string           `json:"payload,omitempty"`
	OpenedAt    time.Time        `json:"opened_at"`
	DueAt       time.Time        `json:"due_at,omitzero"`
	TraceParent string           `json:"traceparent,omitempty"`
	Attempt     int              `json:"attempt"`
	Release     string           `json:"release"` // released, retry, stale_token, missing, not_due, skipped
	Summary     debounce.Summary `json:"summary"` // events, first_seen, last_seen, payload, items
}

// DocumentVersion is the Document's "v". It changes only if a field's
// meaning does; fields are added under the same version, so a reader ignores
// the ones it does not know.
const DocumentVersion = 1

// Document returns the job's Document.
func (j *Job) Document() Document {
	return Document{
		V: DocumentVersion, Type: j.Type, Args: j.Args, Key: j.Key.String(), Fingerprint: j.Fingerprint.String(),
		Round: j.Token.String(), ID: j.ID(), Mode: string(j.Mode), Payload: string(j.Payload),
		OpenedAt: j.OpenedAt, DueAt: j.DueAt, TraceParent: j.TraceParent,
		Attempt: j.Attempt, Release: string(j.Release), Summary: j.Summary,
	}
}
