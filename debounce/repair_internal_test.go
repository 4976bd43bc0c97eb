package debounce

import (
	"context"
	"testing"

	"github.com/coalesce-io/coalesce/internal/testenv"
)

// A reaper that read a round's identity, found the round overdue, and
// repairs it after the round was taken and a new round of the key opened
// held in Redis (its identity written at its opening) deletes only the
// stale identity it read, never the new round's: its forwarder needs it
// (the chaos scenario 10-workers-away lost such rounds with schedules:
// redis).
func TestRepairKeepsANewerRoundsIdentity(t *testing.T) {
	t.Parallel()
	rdb := testenv.SharedRedis(t).Client(t)
	ctx := context.Background()
	rk := testenv.Prefix(t) + "{k}"
	const oldExp, newExp = 4_000_000_000_000, 4_000_000_005_000
	// The new round (rnd 9) holds the key and its identity.
	if err := rdb.Set(ctx, rk, uint64(packOpen(9)|packPub), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.PExpireAt(ctx, rk, msTime(newExp)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, identityKey(rk), "j", "new", "r", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The reaper repairs the old round (rnd 7), whose identity it read.
	res, err := repairPackedScript.Run(ctx, rdb, []string{rk, identityKey(rk)}, oldExp, 7, "0", "old").Int64Slice()
	if err != nil || len(res) != 1 || res[0] != -1 {
		t.Fatalf("repair of the old round: %v %v, want {-1}", res, err)
	}
	if j, err := rdb.HGet(ctx, identityKey(rk), "j").Result(); err != nil || j != "new" {
		t.Fatalf("the new round's identity: %q %v, want it kept", j, err)
	}
	// A stale identity that is still the one read is deleted.
	if err := rdb.HSet(ctx, identityKey(rk), "j", "old").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := repairPackedScript.Run(ctx, rdb, []string{rk, identityKey(rk)}, oldExp, 7, "0", "old").Int64Slice(); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(ctx, identityKey(rk)).Result(); n != 0 {
		t.Fatal("the stale identity the reaper read is still there")
	}
}
