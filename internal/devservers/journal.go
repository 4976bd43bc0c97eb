package devservers

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The in-process Redis keeps its data in a folder: a snapshot and journal
// segments. Every write command's effect is appended to the current segment
// before its reply leaves (a SIGKILL of the process loses nothing: the bytes
// are in the kernel) and the segment is fsynced every FsyncEvery (a crash of
// the machine loses at most that much). When the segments written since the
// snapshot outgrow it (and CompactAfter), a new snapshot is written while
// commands go on, and the segments it covers are removed.
//
// A record is the state of a key (or of some hash fields, or of its expiry)
// after a command, never the command: replaying it needs no script and no
// clock, and applying it twice changes nothing. That is what lets a snapshot
// be taken while commands run (each key read at its own moment): replaying
// the segments that started before it on top of it ends in the state at the
// last write.

const (
	journalMagic   = "coalesce embedded redis journal 1\n"
	snapshotMagic  = "coalesce embedded redis snapshot 2\n"
	snapshotName   = "snapshot"
	segmentPrefix  = "journal."
	maxFrame       = 1 << 30 // a frame larger than this is damage, not data
	snapshotFrameN = 512     // keys per snapshot frame
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Record operations.
const (
	opString   byte = 1 // a string key: value, expiry
	opHash     byte = 2 // a hash key: every field, expiry
	opDel      byte = 3 // the key is gone
	opHashSet  byte = 4 // these fields of a hash have these values
	opHashDel  byte = 5 // these fields of a hash are gone
	opExpire   byte = 6 // the key's expiry (0: none)
	opFlushDB  byte = 7
	opFlushAll byte = 8
)

// record is one change. at is an expiry in unix ms, 0 for none.
type record struct {
	op     byte
	db     int
	key    string
	value  string
	fields []string // field, value, field, value, ... (opHashDel: fields only)
	at     int64
}

func appendBytes(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func (r *record) append(b []byte) []byte {
	b = append(b, r.op)
	if r.op == opFlushAll {
		return b
	}
	b = binary.AppendUvarint(b, uint64(r.db))
	if r.op == opFlushDB {
		return b
	}
	b = appendBytes(b, r.key)
	switch r.op {
	case opString:
		b = appendBytes(b, r.value)
		b = binary.AppendVarint(b, r.at)
	case opHash, opHashSet, opHashDel:
		b = binary.AppendUvarint(b, uint64(len(r.fields)))
		for _, f := range r.fields {
			b = appendBytes(b, f)
		}
		if r.op == opHash {
			b = binary.AppendVarint(b, r.at)
		}
	case opExpire:
		b = binary.AppendVarint(b, r.at)
	}
	return b
}

// decoder reads records from one frame's payload.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("record: %s", what)
	}
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad number")
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad number")
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("string longer than its frame")
		d.b = nil
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// next decodes one record; ok false at the end of the payload or on damage
// (d.err).
func (d *decoder) next() (r record, ok bool) {
	if len(d.b) == 0 || d.err != nil {
		return r, false
	}
	r.op, d.b = d.b[0], d.b[1:]
	if r.op < opString || r.op > opFlushAll {
		d.fail("unknown operation " + strconv.Itoa(int(r.op)))
		return r, false
	}
	if r.op == opFlushAll {
		return r, true
	}
	db := d.uvarint()
	if db > 1<<16 {
		d.fail("database number out of range")
		return r, false
	}
	r.db = int(db)
	if r.op == opFlushDB {
		return r, d.err == nil
	}
	r.key = d.bytes()
	switch r.op {
	case opString:
		r.value = d.bytes()
		r.at = d.varint()
	case opHash, opHashSet, opHashDel:
		n := d.uvarint()
		if n > uint64(len(d.b)) { // every field takes at least one byte
			d.fail("more fields than bytes")
			return r, false
		}
		if r.op != opHashDel && n%2 != 0 {
			d.fail("odd field/value count")
			return r, false
		}
		r.fields = make([]string, 0, n)
		for range n {
			r.fields = append(r.fields, d.bytes())
		}
		if r.op == opHash {
			r.at = d.varint()
		}
	case opExpire:
		r.at = d.varint()
	}
	return r, d.err == nil
}

// frame layout: uint32 payload length, uint32 CRC-32C of the payload, then
// the payload: uint64 unix ms of the write, then records.

func appendFrame(dst []byte, at int64, recs []byte) []byte {
	n := 8 + len(recs)
	start := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(n))
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(at))
	dst = append(dst, recs...)
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(dst[start+8:], crcTable))
	return dst
}

// errTorn: the data ends inside a frame, or its checksum is wrong.
var errTorn = errors.New("torn or damaged frame")

// readFrame reads one frame of at most left bytes: the time it was written
// and its records. io.EOF at a clean end; errTorn for a partial or damaged
// one (a damaged length is never allocated beyond the bytes left).
func readFrame(r *bufio.Reader, left int64) (at int64, payload []byte, size int, err error) {
	var h [8]byte
	if n, err := io.ReadFull(r, h[:]); err != nil {
		if err == io.EOF && n == 0 {
			return 0, nil, 0, io.EOF
		}
		return 0, nil, 0, errTorn
	}
	n := binary.LittleEndian.Uint32(h[:4])
	if n < 8 || n > maxFrame || int64(n) > left-8 {
		return 0, nil, 0, errTorn
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, 0, errTorn
	}
	if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(h[4:]) {
		return 0, nil, 0, errTorn
	}
	return int64(binary.LittleEndian.Uint64(payload[:8])), payload[8:], 8 + int(n), nil
}

// segmentName is the journal segment n's file name.
func segmentName(n uint64) string { return fmt.Sprintf("%s%06d", segmentPrefix, n) }

// segments lists the journal segments in dir, in order.
func segments(dir string) ([]uint64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []uint64
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), segmentPrefix)
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(rest, 10, 64)
		if err != nil || n == 0 {
			continue // not ours (an editor's backup, say)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// journal is the segment being appended to, with group commit: commands
// queue their frames (in the order they ran, under the store's lock) and
// one writer goroutine writes what is queued in one call; a reply waits,
// outside the store's lock, until the journal holds every frame queued up
// to its command (waitWritten). The lock is never held across I/O, and
// many commands share one write.
type journal struct {
	dir string

	mu      sync.Mutex // everything below
	cond    *sync.Cond // written, err or closed changed; or frames queued
	queue   []byte     // frames queued, not yet written
	spare   []byte     // the writer's other buffer
	queued  uint64     // bytes queued since open, over every segment
	written uint64     // of them, bytes written
	size    int64      // bytes in the segments the snapshot does not cover
	f       *os.File   // the current segment
	n       uint64     // its number
	err     error      // the first write or fsync failure: the journal stops
	closed  bool
	done    chan struct{} // the writer ended

	syncMu sync.Mutex // one fsync (or rotation) at a time
	synced uint64     // written as of the last completed fsync
}

func newJournal(dir string, f *os.File, n uint64, size int64) *journal {
	j := &journal{dir: dir, f: f, n: n, size: size, done: make(chan struct{})}
	j.cond = sync.NewCond(&j.mu)
	go j.writer()
	return j
}

// openSegment creates segment n (it must not exist) with its header, and
// makes its name durable.
func openSegment(dir string, n uint64) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, segmentName(n)), os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	hdr := binary.LittleEndian.AppendUint64([]byte(journalMagic), n)
	if _, err := f.Write(hdr); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	if err := syncDir(dir); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// append queues a frame and returns the position waitWritten waits for.
func (j *journal) append(frame []byte) uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.queue = append(j.queue, frame...)
	j.queued += uint64(len(frame))
	j.size += int64(len(frame))
	j.cond.Broadcast()
	return j.queued
}

// position is how far frames are queued: a reply of a command that ran now
// waits for it (a read too, or it could answer from a change a crash
// loses).
func (j *journal) position() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.queued
}

// waitWritten returns once the journal holds (the kernel has) every frame
// queued up to pos: from then a kill of the process no longer loses them.
func (j *journal) waitWritten(pos uint64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for j.written < pos && j.err == nil {
		j.cond.Wait()
	}
	return j.err
}

// writer writes the queued frames, as many at a time as are queued.
func (j *journal) writer() {
	defer close(j.done)
	j.mu.Lock()
	defer j.mu.Unlock()
	for {
		for len(j.queue) == 0 && !j.closed {
			j.cond.Wait()
		}
		if len(j.queue) == 0 || j.err != nil {
			return
		}
		buf, f := j.queue, j.f
		j.queue, j.spare = j.spare[:0], nil
		j.mu.Unlock()
		_, err := f.Write(buf)
		j.mu.Lock()
		if cap(buf) <= 4<<20 { // a burst's buffer is not kept
			j.spare = buf[:0]
		}
		if err != nil {
			j.err = fmt.Errorf("journal %s: write: %w", f.Name(), err)
			j.cond.Broadcast()
			return
		}
		j.written += uint64(len(buf))
		j.cond.Broadcast()
	}
}

// drained waits until everything queued is written (call with mu held).
func (j *journal) drained() error {
	for j.written < j.queued && j.err == nil {
		j.cond.Wait()
	}
	return j.err
}

// sync makes every frame queued so far durable (fsync).
func (j *journal) sync() error {
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	j.mu.Lock()
	target := j.queued
	for j.written < target && j.err == nil {
		j.cond.Wait()
	}
	f, err := j.f, j.err
	j.mu.Unlock()
	if err != nil {
		return err
	}
	if target == j.synced {
		return nil
	}
	if err := f.Sync(); err != nil {
		j.mu.Lock()
		if j.err == nil {
			j.err = fmt.Errorf("journal %s: fsync: %w", f.Name(), err)
			j.cond.Broadcast()
		}
		err = j.err
		j.mu.Unlock()
		return err
	}
	j.synced = target
	return nil
}

// rotate writes and fsyncs what is queued, closes the segment and opens the
// next: the frames queued from now on go to segment (returned) and later
// ones. The caller holds the store's lock, so nothing is queued meanwhile.
func (j *journal) rotate() (uint64, error) {
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.drained(); err != nil {
		return 0, err
	}
	if err := j.f.Sync(); err != nil {
		j.err = fmt.Errorf("journal %s: fsync: %w", j.f.Name(), err)
		j.cond.Broadcast()
		return 0, j.err
	}
	next, err := openSegment(j.dir, j.n+1)
	if err != nil {
		j.err = fmt.Errorf("journal: open segment %d: %w", j.n+1, err)
		j.cond.Broadcast()
		return 0, j.err
	}
	j.f.Close()
	j.f, j.n = next, j.n+1
	j.synced = j.written
	return j.n, nil
}

// setFile replaces the segment's file (tests: a full disk).
func (j *journal) setFile(f *os.File) {
	j.mu.Lock()
	j.f = f
	j.mu.Unlock()
}

func (j *journal) close() error {
	err := j.sync()
	j.mu.Lock()
	j.closed = true
	j.cond.Broadcast()
	j.mu.Unlock()
	<-j.done
	j.mu.Lock()
	defer j.mu.Unlock()
	if cerr := j.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// snapshotWriter writes a snapshot to a temporary file; commit renames it
// into place.
type snapshotWriter struct {
	dir  string
	tmp  *os.File
	w    *bufio.Writer
	recs []byte
	keys int
	size int64
}

func newSnapshotWriter(dir string, written time.Time, next uint64) (*snapshotWriter, error) {
	tmp, err := os.CreateTemp(dir, snapshotName+".tmp-")
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriterSize(tmp, 1<<16)
	hdr := []byte(snapshotMagic)
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(written.UnixNano()))
	hdr = binary.LittleEndian.AppendUint64(hdr, next)
	if _, err := w.Write(hdr); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, err
	}
	return &snapshotWriter{dir: dir, tmp: tmp, w: w, size: int64(len(hdr))}, nil
}

func (s *snapshotWriter) add(r *record) error {
	s.recs = r.append(s.recs)
	s.keys++
	if s.keys%snapshotFrameN == 0 {
		return s.flushFrame()
	}
	return nil
}

func (s *snapshotWriter) flushFrame() error {
	if len(s.recs) == 0 {
		return nil
	}
	f := appendFrame(nil, 0, s.recs)
	s.recs = s.recs[:0]
	s.size += int64(len(f))
	_, err := s.w.Write(f)
	return err
}

// commit ends the snapshot with a frame counting its keys (a snapshot cut
// short is refused at load), makes it durable and puts it in place.
func (s *snapshotWriter) commit() (int64, error) {
	err := s.flushFrame()
	if err == nil {
		end := appendFrame(nil, -1, binary.AppendUvarint(nil, uint64(s.keys)))
		s.size += int64(len(end))
		_, err = s.w.Write(end)
	}
	if err == nil {
		err = s.w.Flush()
	}
	if err == nil {
		err = s.tmp.Sync()
	}
	if cerr := s.tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(s.tmp.Name(), filepath.Join(s.dir, snapshotName))
	}
	if err == nil {
		err = syncDir(s.dir)
	}
	if err != nil {
		os.Remove(s.tmp.Name())
	}
	return s.size, err
}

func (s *snapshotWriter) abort() {
	s.tmp.Close()
	os.Remove(s.tmp.Name())
}

// snapshotHeader is what a snapshot file starts with.
type snapshotHeader struct {
	written time.Time // every write before it is in the snapshot
	next    uint64    // the first journal segment not covered by it
}

// readSnapshot calls apply for each record of the snapshot at path. A
// missing file gives found false.
func readSnapshot(path string, apply func(record) error) (h snapshotHeader, found bool, size int64, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return h, false, 0, nil
	}
	if err != nil {
		return h, false, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return h, true, 0, err
	}
	r := bufio.NewReaderSize(f, 1<<16)
	hdr := make([]byte, len(snapshotMagic)+16)
	if _, err := io.ReadFull(r, hdr); err != nil || string(hdr[:len(snapshotMagic)]) != snapshotMagic {
		return h, true, 0, fmt.Errorf("%s is not a snapshot of this format", path)
	}
	size = int64(len(hdr))
	h.written = time.Unix(0, int64(binary.LittleEndian.Uint64(hdr[len(snapshotMagic):])))
	h.next = binary.LittleEndian.Uint64(hdr[len(snapshotMagic)+8:])
	keys := uint64(0)
	for {
		at, payload, n, err := readFrame(r, fi.Size()-size)
		if err == io.EOF {
			return h, true, size, fmt.Errorf("%s ends before its last frame (cut short)", path)
		}
		if err != nil {
			return h, true, size, fmt.Errorf("%s is damaged at byte %d", path, size)
		}
		size += int64(n)
		if at == -1 {
			want, k := binary.Uvarint(payload)
			if k <= 0 || want != keys {
				return h, true, size, fmt.Errorf("%s holds %d keys, its end says %d", path, keys, want)
			}
			return h, true, size, nil
		}
		d := decoder{b: payload}
		for {
			rec, ok := d.next()
			if !ok {
				break
			}
			keys++
			if err := apply(rec); err != nil {
				return h, true, size, err
			}
		}
		if d.err != nil {
			return h, true, size, fmt.Errorf("%s is damaged at byte %d: %v", path, size, d.err)
		}
	}
}

// segmentReplay is what replaying one segment found.
type segmentReplay struct {
	frames   int
	lastAt   int64 // unix ms of its last frame; 0 with none
	size     int64 // bytes of whole frames (with the header)
	tornFrom int64 // >= 0: the file's bytes from here on are a torn frame
}

// replaySegment calls apply for each record of segment n in dir.
func replaySegment(dir string, n uint64, apply func(record) error) (segmentReplay, error) {
	res := segmentReplay{tornFrom: -1}
	path := filepath.Join(dir, segmentName(n))
	f, err := os.Open(path)
	if err != nil {
		return res, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return res, err
	}
	r := bufio.NewReaderSize(f, 1<<16)
	hdr := make([]byte, len(journalMagic)+8)
	if k, err := io.ReadFull(r, hdr); err != nil {
		if k == 0 || (k < len(hdr) && string(hdr[:k]) == journalMagic[:min(k, len(journalMagic))]) {
			res.tornFrom = 0 // created, and the process died before its header was written
			return res, nil
		}
		return res, fmt.Errorf("%s is not a journal segment", path)
	}
	if string(hdr[:len(journalMagic)]) != journalMagic || binary.LittleEndian.Uint64(hdr[len(journalMagic):]) != n {
		return res, fmt.Errorf("%s is not journal segment %d", path, n)
	}
	res.size = int64(len(hdr))
	for {
		at, payload, k, err := readFrame(r, fi.Size()-res.size)
		if err == io.EOF {
			return res, nil
		}
		if err != nil {
			res.tornFrom = res.size
			return res, nil
		}
		d := decoder{b: payload}
		for {
			rec, ok := d.next()
			if !ok {
				break
			}
			if err := apply(rec); err != nil {
				return res, err
			}
		}
		if d.err != nil {
			// The checksum matched: this is not a torn write but a bug or
			// a different format. Refuse rather than guess.
			return res, fmt.Errorf("%s: frame at byte %d: %v", path, res.size, d.err)
		}
		res.frames++
		res.lastAt = at
		res.size += int64(k)
	}
}
