package devservers

import (
	"encoding/gob"
	"errors"
	"fmt"
	"os"
	"time"
)

// Before the journal, the in-process Redis was kept in one snapshot file
// (gob, format 1) written every second and at a graceful stop. A data
// folder holding one is read once, rewritten as a snapshot of the current
// format, and the old file removed.

const legacySnapshotVersion = 1

type legacySnapshotFile struct {
	Version int
	Written time.Time
	Keys    []legacySnapshotKey
}

type legacySnapshotKey struct {
	Key      string
	Hash     bool
	Value    string   // a string key's value
	Fields   []string // a hash's field, value, field, value, ...
	ExpireAt int64    // unix ms; 0: no expiry
}

// readLegacy reads a format-1 snapshot; found is false when there is none.
func readLegacy(path string, apply func(record) error) (written time.Time, found bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, err
	}
	defer f.Close()
	var s legacySnapshotFile
	if err := gob.NewDecoder(f).Decode(&s); err != nil {
		return time.Time{}, true, fmt.Errorf("%s is unreadable (%v)", path, err)
	}
	if s.Version != legacySnapshotVersion {
		return time.Time{}, true, fmt.Errorf("%s has format %d, this build reads %d", path, s.Version, legacySnapshotVersion)
	}
	for _, k := range s.Keys {
		r := record{op: opString, key: k.Key, value: k.Value, at: k.ExpireAt}
		if k.Hash {
			r.op, r.fields = opHash, k.Fields
		}
		if err := apply(r); err != nil {
			return s.Written, true, err
		}
	}
	return s.Written, true, nil
}
