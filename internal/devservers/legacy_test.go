package devservers

import (
	"context"
	"encoding/gob"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestLegacySnapshotIsMigrated: a data folder of a build before the journal
// (one gob snapshot file) is read once, rewritten as a snapshot of the
// journal's format, and the old file removed; a second start reads the new
// one.
func TestLegacySnapshotIsMigrated(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	legacy := filepath.Join(dir, "redis.snapshot")
	at := time.Now().Add(time.Hour).UnixMilli()
	written := time.Now().Add(-time.Minute).Round(0)
	f, err := os.Create(legacy)
	if err != nil {
		t.Fatal(err)
	}
	if err := gob.NewEncoder(f).Encode(legacySnapshotFile{Version: legacySnapshotVersion, Written: written, Keys: []legacySnapshotKey{
		{Key: "round", Hash: true, Fields: []string{"t", "42", "n", "3"}, ExpireAt: at},
		{Key: "packed", Value: "123456789", ExpireAt: at + 1},
		{Key: "gone", Value: "v", ExpireAt: time.Now().Add(-time.Second).UnixMilli()},
	}}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	o := Options{NATSListen: "127.0.0.1:0", NoNATS: true, RedisListen: "127.0.0.1:0", DataDir: dir,
		RedisDir: filepath.Join(dir, "redis"), LegacySnapshot: legacy}
	s, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	if r := s.Restored; !r.Legacy || r.Keys != 2 || r.Expired != 1 || !r.SnapshotWritten.Equal(written) {
		t.Errorf("restored %+v, want 2 keys and 1 expired from the old snapshot of %v", r, written)
	}
	if _, err := os.Stat(legacy); !os.IsNotExist(err) {
		t.Errorf("the old snapshot is still there: %v", err)
	}
	s.Close()
	s, err = Start(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r := s.Restored; r.Legacy || r.Keys != 2 || r.SnapshotWritten.IsZero() {
		t.Errorf("second start restored %+v, want 2 keys from the new snapshot", r)
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.RedisAddr, DisableIdentity: true})
	defer rdb.Close()
	ctx := context.Background()
	if h := rdb.HGetAll(ctx, "round").Val(); h["t"] != "42" || h["n"] != "3" || rdb.PExpireTime(ctx, "round").Val().Milliseconds() != at {
		t.Errorf("round = %v, expiry %v", h, rdb.PExpireTime(ctx, "round").Val())
	}
	if v := rdb.Get(ctx, "packed").Val(); v != "123456789" || rdb.PExpireTime(ctx, "packed").Val().Milliseconds() != at+1 {
		t.Errorf("packed = %q", v)
	}
}
