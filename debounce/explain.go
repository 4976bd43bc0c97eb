package debounce

import (
	"context"
	"encoding/json"

	"github.com/coalesce-io/coalesce/fingerprint"
)

// Explanation is what Submit would do with an event, worked out without
// changing anything.
type Explanation struct {
	Type        string                  `json:"type"`
	Fingerprint fingerprint.Fingerprint `json:"fingerprint"`
	Key         RoundKey                `json:"key"`
	// KeyFields are the members of args that make the fingerprint (empty:
	// all of args); ExplicitKey is set when the event's key made the round key.
	KeyFields   []string `json:"key_fields,omitempty"`
	ExplicitKey bool     `json:"explicit_key,omitempty"`
	// Canonical is the RFC 8785 form of what was fingerprinted.
	Canonical json.RawMessage `json:"canonical_args"`
	// Pending is the round (or throttle window) now held for the key, if any.
	Pending *Round `json:"pending,omitempty"`
	// Would is the outcome Submit would report now (others may get there first).
	Would Outcome `json:"would"`
}

// Explain works out the fingerprint, the round key and what Submit would do
// with ev, reading Redis but changing nothing.
func (c *Coalescer) Explain(ctx context.Context, ev Event) (Explanation, error) {
	p, err := c.policyFor(ev.Type)
	if err != nil {
		return Explanation{}, err
	}
	fp, key, _, err := c.identify(p, ev)
	if err != nil {
		return Explanation{}, err
	}
	canon, err := p.scheme.AppendCanonical(nil, ev.Args)
	if err != nil {
		return Explanation{}, fingerprintError(err, "")
	}
	ex := Explanation{Type: p.Type, Fingerprint: fp, Key: key, KeyFields: p.scheme.KeyFields(),
		ExplicitKey: ev.Key != "", Canonical: canon}
	r, found, err := c.Inspect(ctx, p.Type, key)
	if err != nil {
		return ex, err
	}
	if found {
		ex.Pending = &r
	}
	ex.Would = p.predict(found, r)
	return ex, nil
}

func (p *compiled) predict(found bool, r Round) Outcome {
	switch p.Mode {
	case ModeDedup:
		if found {
			return OutcomeDuplicate
		}
		return OutcomePublished
	case ModeThrottle:
		switch {
		case !found:
			return OutcomePublished
		case r.Window && p.Trailing:
			return OutcomeScheduled
		case r.Window:
			return OutcomeThrottled
		default:
			return OutcomeCoalesced
		}
	default:
		if !found {
			return OutcomeScheduled
		}
		if p.Extend {
			return OutcomeExtended
		}
		return OutcomeCoalesced
	}
}

// RoundKeyOf returns the round key Submit would use for ev, without touching
// Redis: callers that decide many events at once use it to keep the events
// of one key in order.
func (c *Coalescer) RoundKeyOf(ev Event) (RoundKey, error) {
	p, err := c.policyFor(ev.Type)
	if err != nil {
		return RoundKey{}, err
	}
	_, key, _, err := c.identify(p, ev)
	return key, err
}
