package admin_test

import (
	"os"

	"github.com/coalesce-io/coalesce/internal/admin"
)

// A report as the CLI prints it. Dedupe itself needs a JetStream server; see
// the tests for runs against an embedded one.
func ExampleDedupeReport_WriteText() {
	key := "3f2a9c01b2d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e"
	r := admin.DedupeReport{
		Stream:  "COALESCE",
		Scanned: 6, Kept: 2, Duplicates: 3, SkippedInFlight: 1,
		Groups: []admin.DedupeGroup{{
			Type: "recompute", Key: key, Kept: 4,
			Duplicates: []admin.DedupeDuplicate{{Seq: 9, Outcome: admin.OutcomeWouldRemove}, {Seq: 17, Outcome: admin.OutcomeWouldRemove}},
		}, {
			Type: "send.email", Key: "b71c" + key[4:], Kept: 5,
			Duplicates: []admin.DedupeDuplicate{{Seq: 6, Outcome: admin.OutcomeWouldRemove}},
		}},
	}
	r.WriteText(os.Stdout)
	// Output:
	// stream COALESCE (dry run, nothing removed): 6 job messages scanned, 2 kept, 3 duplicates, 1 in flight and 0 unreadable left alone
	// would remove seq 9 (type recompute, key 3f2a9c01b2d4…, duplicate of seq 4)
	// would remove seq 17 (type recompute, key 3f2a9c01b2d4…, duplicate of seq 4)
	// would remove seq 6 (type send.email, key b71c9c01b2d4…, duplicate of seq 5)
}
