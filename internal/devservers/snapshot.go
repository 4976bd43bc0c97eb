package devservers

import (
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// The in-process Redis keeps everything in memory; a snapshot file in the
// data folder makes its reservations outlive a restart, as the JetStream
// store beside it keeps the schedules. It is written every SnapshotEvery
// while commands run (each key read atomically, in MULTI/EXEC batches), and
// once more at Close after the server has stopped, when nothing changes any
// more: a graceful stop loses nothing, a SIGKILL at most the last interval.

// DefaultSnapshotEvery is how often the snapshot is written while the
// in-process Redis is busy.
const DefaultSnapshotEvery = time.Second

// snapshotVersion is the file format.
const snapshotVersion = 1

type snapshotFile struct {
	Version int
	Written time.Time
	Keys    []snapshotKey
}

type snapshotKey struct {
	Key      string
	Hash     bool
	Value    string   // a string key's value
	Fields   []string // a hash's field, value, field, value, ...
	ExpireAt int64    // unix ms; 0: no expiry
}

// Restore says what Start loaded from the snapshot.
type Restore struct {
	Found   bool      // a snapshot file was there
	Written time.Time // when it was written
	Keys    int       // keys restored
	Expired int       // keys whose expiry passed while the server was down: dropped
}

// SnapshotWritten reads when the snapshot file at path was taken: every
// change applied before that moment is in it, a change applied after it may
// not be. A missing file gives the zero time and no error.
func SnapshotWritten(path string) (time.Time, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("devservers: redis snapshot: %w", err)
	}
	defer f.Close()
	var s snapshotFile
	if err := gob.NewDecoder(f).Decode(&s); err != nil {
		return time.Time{}, fmt.Errorf("devservers: redis snapshot %s is unreadable: %w", path, err)
	}
	return s.Written, nil
}

// restore loads the snapshot into mr before it serves. now is mr's clock.
func restore(mr *miniredis.Miniredis, path string, now time.Time) (Restore, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return Restore{}, nil
	}
	if err != nil {
		return Restore{}, fmt.Errorf("devservers: redis snapshot: %w", err)
	}
	defer f.Close()
	var s snapshotFile
	if err := gob.NewDecoder(f).Decode(&s); err != nil {
		return Restore{}, fmt.Errorf("devservers: redis snapshot %s is unreadable (%v): move it away to start empty", path, err)
	}
	if s.Version != snapshotVersion {
		return Restore{}, fmt.Errorf("devservers: redis snapshot %s has format %d, this build reads %d", path, s.Version, snapshotVersion)
	}
	r := Restore{Found: true, Written: s.Written}
	for _, k := range s.Keys {
		if k.ExpireAt != 0 && k.ExpireAt <= now.UnixMilli() {
			r.Expired++
			continue
		}
		if k.Hash {
			mr.HSet(k.Key, k.Fields...)
		} else if err := mr.Set(k.Key, k.Value); err != nil {
			return r, fmt.Errorf("devservers: redis snapshot: restore %q: %w", k.Key, err)
		}
		if k.ExpireAt != 0 {
			// Exact to the millisecond: PEXPIRETIME reads back the expiry
			// the key was set with, which packed round tokens depend on.
			mr.SetTTL(k.Key, time.UnixMilli(k.ExpireAt).Sub(now))
		}
		r.Keys++
	}
	return r, nil
}

// snapshotLive reads every key of the running server atomically per batch.
func snapshotLive(ctx context.Context, mr *miniredis.Miniredis, rdb *redis.Client) ([]snapshotKey, error) {
	keys := mr.Keys()
	out := make([]snapshotKey, 0, len(keys))
	const batch = 256
	for start := 0; start < len(keys); start += batch {
		part := keys[start:min(start+batch, len(keys))]
		pipe := rdb.TxPipeline()
		types := make([]*redis.StatusCmd, len(part))
		exps := make([]*redis.DurationCmd, len(part))
		gets := make([]*redis.StringCmd, len(part))
		hashes := make([]*redis.MapStringStringCmd, len(part))
		for i, k := range part {
			types[i] = pipe.Type(ctx, k)
			exps[i] = pipe.PExpireTime(ctx, k)
			gets[i] = pipe.Get(ctx, k)
			hashes[i] = pipe.HGetAll(ctx, k)
		}
		_, _ = pipe.Exec(ctx) // WRONGTYPE of GET on a hash (and back) is expected
		for i, k := range part {
			typ, err := types[i].Result()
			if err != nil {
				return nil, fmt.Errorf("devservers: redis snapshot: %w", err)
			}
			sk := snapshotKey{Key: k}
			switch typ {
			case "string":
				sk.Value = gets[i].Val()
			case "hash":
				sk.Hash = true
				for f, v := range hashes[i].Val() {
					sk.Fields = append(sk.Fields, f, v)
				}
			default:
				continue // gone meanwhile (or a type coalesce does not use)
			}
			if ms := exps[i].Val().Milliseconds(); ms > 0 {
				sk.ExpireAt = ms
			}
			out = append(out, sk)
		}
	}
	return out, nil
}

// snapshotStopped reads every key of a server that has stopped serving.
// now is mr's clock.
func snapshotStopped(mr *miniredis.Miniredis, now time.Time) []snapshotKey {
	keys := mr.Keys()
	out := make([]snapshotKey, 0, len(keys))
	for _, k := range keys {
		sk := snapshotKey{Key: k}
		switch mr.Type(k) {
		case "string":
			v, err := mr.Get(k)
			if err != nil {
				continue
			}
			sk.Value = v
		case "hash":
			sk.Hash = true
			fields, _ := mr.HKeys(k)
			for _, f := range fields {
				sk.Fields = append(sk.Fields, f, mr.HGet(k, f))
			}
		default:
			continue
		}
		if ttl := mr.TTL(k); ttl > 0 {
			sk.ExpireAt = now.Add(ttl).UnixMilli()
		}
		out = append(out, sk)
	}
	return out
}

// writeSnapshot replaces the file atomically and durably.
func writeSnapshot(path string, keys []snapshotKey, written time.Time) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("devservers: redis snapshot: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing left to remove
	if err := gob.NewEncoder(tmp).Encode(snapshotFile{Version: snapshotVersion, Written: written, Keys: keys}); err != nil {
		tmp.Close()
		return fmt.Errorf("devservers: redis snapshot: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("devservers: redis snapshot: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("devservers: redis snapshot: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("devservers: redis snapshot: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
