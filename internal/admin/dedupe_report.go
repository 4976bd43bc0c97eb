package admin

import (
	"fmt"
	"io"
)

// DedupeReport is what Dedupe found and did. Every scanned message is
// counted once: Scanned = Kept + Duplicates + SkippedInFlight +
// SkippedUnreadable.
type DedupeReport struct {
	Stream  string
	Applied bool // Apply was set: duplicates were deleted, not just reported

	Scanned    int // job messages read
	Kept       int // pending messages kept: one per identity, plus other rounds of a key
	Duplicates int // pending duplicates found (deleted with Apply, see Removed)
	// Removed counts the duplicates deleted; with Apply it falls short of
	// Duplicates by those a consumer took since the scan (or that left the
	// stream meanwhile), and by those not reached after an error.
	Removed           int
	SkippedInFlight   int // delivered to a consumer and not acknowledged: never touched
	SkippedUnreadable int // body not I-JSON (or missing a key field), or a malformed coalesce header

	Groups []DedupeGroup // one per identity that had duplicates, by kept sequence
}

// DedupeGroup is one identity that had duplicates.
type DedupeGroup struct {
	Type string
	Key  string // identity: the Coalesce-Key header or the fp1 fingerprint, 64 hex digits
	Kept uint64 // stream sequence of the message kept: the oldest pending one
	// KeptRounds are later messages of the same key carrying another
	// coalesce round, kept too: each round has its own state in Redis.
	KeptRounds []uint64
	Duplicates []DedupeDuplicate // oldest first
}

// DedupeDuplicate is one duplicate and what became of it.
type DedupeDuplicate struct {
	Seq     uint64
	Subject string
	Outcome DedupeOutcome
}

// DedupeOutcome is what Dedupe did with a duplicate.
type DedupeOutcome string

// Outcomes of a duplicate. A duplicate still OutcomeWouldRemove in an
// applied report was not reached: Dedupe stopped on an error before it.
const (
	OutcomeWouldRemove DedupeOutcome = "would_remove" // dry run
	OutcomeRemoved     DedupeOutcome = "removed"
	OutcomeInFlight    DedupeOutcome = "in_flight" // a consumer took it after the scan: left alone
	OutcomeGone        DedupeOutcome = "gone"      // no longer in the stream when its turn came
)

// WriteText writes a summary of r for people, then one line per duplicate:
//
//	would remove seq 17 (type recompute, key 3f2a9c01b2d4…, duplicate of seq 4)
func (r DedupeReport) WriteText(w io.Writer) {
	mode := "dry run, nothing removed"
	if r.Applied {
		mode = fmt.Sprintf("applied, %d removed", r.Removed)
	}
	fmt.Fprintf(w, "stream %s (%s): %d job messages scanned, %d kept, %d duplicates, %d in flight and %d unreadable left alone\n",
		r.Stream, mode, r.Scanned, r.Kept, r.Duplicates, r.SkippedInFlight, r.SkippedUnreadable)
	for _, g := range r.Groups {
		for _, d := range g.Duplicates {
			what, why := "", ""
			switch {
			case d.Outcome == OutcomeRemoved:
				what = "removed"
			case d.Outcome == OutcomeInFlight:
				what, why = "left", ": a consumer took it before removal"
			case d.Outcome == OutcomeGone:
				what, why = "left", ": no longer in the stream"
			case r.Applied:
				what, why = "not removed", ": stopped by an error before it"
			default:
				what = "would remove"
			}
			fmt.Fprintf(w, "%s seq %d (type %s, key %s, duplicate of seq %d)%s\n", what, d.Seq, g.Type, shortKey(g.Key), g.Kept, why)
		}
	}
}

// shortKey abbreviates a 64-hex-digit key for people, like a short git hash.
func shortKey(k string) string {
	const n = 12
	if len(k) <= n {
		return k
	}
	return k[:n] + "…"
}
