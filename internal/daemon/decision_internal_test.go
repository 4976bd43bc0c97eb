package daemon

import (
	"bytes"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/fingerprint"
)

// TestAppendDecisionIsMarshal: the batch's hand-written decision encoding
// is byte for byte what encoding/json writes, for every shape a decision
// takes (no round, no due time, a due time with and without a fraction, a
// type that needs escaping).
func TestAppendDecisionIsMarshal(t *testing.T) {
	var key debounce.RoundKey
	var fp fingerprint.Fingerprint
	for i := range key {
		key[i], fp[i] = byte(i*7), byte(255-i)
	}
	due := time.Date(2026, 12, 1, 18, 30, 0, 123456789, time.UTC)
	for _, d := range []debounce.Decision{
		{},
		{Outcome: debounce.OutcomeScheduled, Type: "recompute_financials", Key: key, Fingerprint: fp, Round: 0x0068_95ae_020c_0eb2, DueAt: due, Events: 1},
		{Outcome: debounce.OutcomeCoalesced, Type: "a.b-c", Key: key, Fingerprint: fp, Round: 1, DueAt: due.Truncate(time.Second), Events: 1 << 22},
		{Outcome: debounce.OutcomeBypassed, Type: "t", Key: key, Events: 1, DueAt: due.In(time.FixedZone("x", 3600))},
		{Outcome: debounce.OutcomeDuplicate, Type: `we"ird\type`, Key: key, Fingerprint: fp, Round: ^debounce.Token(0), Events: 3},
		{Outcome: debounce.OutcomeThrottled, Type: "é", Events: -1},
		{Outcome: debounce.OutcomeCoalesced, Type: "t", Key: key, Fingerprint: fp, Round: 7, DueAt: due, Events: 2, Replayed: true},
	} {
		if got, want := appendDecision(nil, d), marshal(d); !bytes.Equal(got, want) {
			t.Errorf("appendDecision:\n got %s\nwant %s", got, want)
		}
	}
}
