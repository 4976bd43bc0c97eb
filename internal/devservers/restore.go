package devservers

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Restore says what Start loaded from the data folder.
type Restore struct {
	Found           bool      // the folder held a snapshot or journal
	SnapshotWritten time.Time // when the snapshot was taken (zero: none)
	Frames          int       // journaled writes replayed after it
	LastWrite       time.Time // the last journaled write (zero: none)
	Keys            int       // keys after the restore
	Expired         int       // keys whose expiry passed while the server was down: deleted
	TornBytes       int64     // a last write cut short by a crash (never answered): dropped
	Legacy          bool      // read from the snapshot file of an older build, then rewritten
}

// Latest is the moment up to which the restore has every write.
func (r Restore) Latest() time.Time {
	if r.LastWrite.After(r.SnapshotWritten) {
		return r.LastWrite
	}
	return r.SnapshotWritten
}

// open loads dir (snapshot, then the journal segments after it) into
// miniredis, opens a new segment and deletes what expired meanwhile.
// legacy is a format-1 snapshot file read when the folder holds nothing
// else ("" none).
func (s *store) open(dir, legacy string) (Restore, error) {
	var r Restore
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return r, err
	}
	s.dir = dir
	moveAway := fmt.Sprintf("move the folder %s away to start with no rounds (they are lost then), or restore it from a backup", dir)
	apply := s.apply
	h, found, size, err := readSnapshot(filepath.Join(dir, snapshotName), apply)
	if err != nil {
		return r, fmt.Errorf("embedded redis snapshot: %w; %s", err, moveAway)
	}
	segs, err := segments(dir)
	if err != nil {
		return r, err
	}
	first := uint64(1)
	switch {
	case found:
		r.Found, r.SnapshotWritten, first, s.snapSize = true, h.written, h.next, size
	case len(segs) > 0:
		first = segs[0]
	case legacy != "":
		written, ok, err := readLegacy(legacy, apply)
		if err != nil {
			return r, fmt.Errorf("embedded redis snapshot of an older build: %w; move it away to start with no rounds", err)
		}
		r.Found, r.Legacy, r.SnapshotWritten = ok, ok, written
	}
	var replay []uint64
	for _, n := range segs {
		if n < first {
			// Covered by the snapshot: a compaction stopped between its
			// rename and its clean-up.
			_ = os.Remove(filepath.Join(dir, segmentName(n)))
			continue
		}
		if n != first+uint64(len(replay)) {
			return r, fmt.Errorf("embedded redis journal: segment %d is missing before %d; %s", first+uint64(len(replay)), n, moveAway)
		}
		replay = append(replay, n)
	}
	if found && (len(replay) == 0 || replay[0] != first) {
		return r, fmt.Errorf("embedded redis journal: segment %d, which the snapshot continues in, is missing; %s", first, moveAway)
	}
	next, journalSize := first, int64(0)
	for i, n := range replay {
		res, err := replaySegment(dir, n, apply)
		if err != nil {
			return r, fmt.Errorf("embedded redis journal: %w; %s", err, moveAway)
		}
		r.Found = true
		r.Frames += res.frames
		if res.lastAt > 0 {
			r.LastWrite = time.UnixMilli(res.lastAt)
		}
		next, journalSize = n+1, journalSize+res.size
		if res.tornFrom < 0 {
			continue
		}
		path := filepath.Join(dir, segmentName(n))
		if i != len(replay)-1 {
			return r, fmt.Errorf("embedded redis journal: %s is damaged at byte %d and later segments exist; %s", path, res.tornFrom, moveAway)
		}
		// The last write of a crash, cut short: its reply never left.
		fi, err := os.Stat(path)
		if err != nil {
			return r, err
		}
		r.TornBytes = fi.Size() - res.tornFrom
		if res.tornFrom == 0 {
			err = os.Remove(path)
			next = n
		} else {
			err = os.Truncate(path, res.tornFrom)
		}
		if err != nil {
			return r, fmt.Errorf("embedded redis journal: drop the torn end of %s: %w", path, err)
		}
		s.log.Warn("embedded redis: the journal ended inside a write (a crash while writing it; it was never answered); dropped it",
			"segment", path, "bytes", r.TornBytes)
	}
	s.buildIndex()
	f, err := openSegment(dir, next)
	if err != nil {
		return r, fmt.Errorf("embedded redis journal: %w", err)
	}
	s.jr = newJournal(dir, f, next, journalSize+int64(len(journalMagic)+8))
	s.mu.Lock()
	before := s.stats.Expired
	now := s.now().UnixMilli()
	s.recs = s.recs[:0]
	s.expireDue(now)
	s.writeFrame(now)
	r.Expired = int(s.stats.Expired - before)
	r.Keys = len(s.live)
	s.mu.Unlock()
	if r.Legacy {
		// Rewrite it as a snapshot of this format, then the old file goes.
		s.busy = true
		if err := s.compactNow(); err != nil {
			return r, fmt.Errorf("embedded redis: rewrite the snapshot of an older build: %w", err)
		}
		if err := os.Remove(legacy); err != nil && !errors.Is(err, os.ErrNotExist) {
			return r, err
		}
	}
	return r, nil
}
