package devservers

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// FuzzJournalSegment: whatever bytes follow a segment's header (a torn
// write, a damaged disk, a file of something else), a restart neither
// panics nor applies a frame whose checksum fails; it replays the whole
// frames before the damage, or refuses with an error.
func FuzzJournalSegment(f *testing.F) {
	good := appendFrame(nil, 1, (&record{op: opString, key: "k", value: "v", at: 99}).append(nil))
	good = appendFrame(good, 2, (&record{op: opHashSet, key: "h", fields: []string{"f", "1"}}).append(nil))
	f.Add(good)
	f.Add(good[:len(good)-3])
	f.Add(append(append([]byte(nil), good...), 0xff, 0, 0, 0))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		seg := binary.LittleEndian.AppendUint64([]byte(journalMagic), 1)
		if err := os.WriteFile(filepath.Join(dir, segmentName(1)), append(seg, data...), 0o600); err != nil {
			t.Fatal(err)
		}
		applied := 0
		res, err := replaySegment(dir, 1, func(r record) error {
			applied++
			if r.op < opString || r.op > opFlushAll {
				t.Fatalf("applied a record with operation %d", r.op)
			}
			return nil
		})
		if err != nil {
			return
		}
		// The whole frames replayed are exactly those before the damage.
		r := bufio.NewReader(bytes.NewReader(data))
		frames, left := 0, int64(len(data))
		for {
			_, _, n, err := readFrame(r, left)
			if err != nil {
				break
			}
			frames, left = frames+1, left-int64(n)
		}
		if res.frames != frames {
			t.Fatalf("replayed %d frames, the data holds %d whole ones", res.frames, frames)
		}
	})
}

// FuzzRecordRoundTrip: a record reads back as it was written.
func FuzzRecordRoundTrip(f *testing.F) {
	f.Add(byte(opHash), 3, "key", "value", "f1", "v1", int64(1796000000000))
	f.Add(byte(opHashDel), 0, "", "", "", "\x00\xff", int64(0))
	f.Fuzz(func(t *testing.T, op byte, db int, key, value, f1, f2 string, at int64) {
		op = opString + op%(opFlushAll-opString+1)
		r := record{op: op, db: db & 0xffff, key: key}
		switch op {
		case opString:
			r.value, r.at = value, at
		case opHash, opHashSet:
			r.fields = []string{f1, f2}
			if op == opHash {
				r.at = at
			}
		case opHashDel:
			r.fields = []string{f1, f2}
		case opExpire:
			r.at = at
		case opFlushDB:
			r.key = ""
		case opFlushAll:
			r.key, r.db = "", 0
		}
		d := decoder{b: r.append(nil)}
		got, ok := d.next()
		if !ok || d.err != nil || len(d.b) != 0 {
			t.Fatalf("%+v: read back ok=%v err=%v, %d bytes left", r, ok, d.err, len(d.b))
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("wrote %+v, read %+v", r, got)
		}
	})
}

// TestJournalWriteFailureWithholdsTheReply: when the journal cannot be
// written (a full disk), the change's reply never leaves and Fatal is
// called (by default the process exits; a restart replays what the
// journal holds).
func TestJournalWriteFailureWithholdsTheReply(t *testing.T) {
	t.Parallel()
	fatal := make(chan error, 4)
	s, err := Start(Options{NATSListen: "127.0.0.1:0", NoNATS: true, RedisListen: "127.0.0.1:0", DataDir: t.TempDir(),
		RedisDir: t.TempDir(), FsyncEvery: time.Hour,
		Fatal: func(err error) {
			fatal <- err
			select {} // as the process exiting: this connection's reply never leaves
		}})
	if err != nil {
		t.Fatal(err)
	}
	// Close would wait for the blocked connection; the test ends without it.
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	s.rs.jr.setFile(full)
	c, err := net.Dial("tcp", s.RedisAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-fatal:
		if err == nil {
			t.Fatal("Fatal called with no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a write the journal could not hold did not stop the store")
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, _ := c.Read(make([]byte, 64)); n != 0 {
		t.Fatal("the reply of a write the journal could not hold left")
	}
}

// FuzzGlobMatch: any pattern and key end quickly (no backtracking blow-up)
// without a panic, and a key matches the pattern made of its own bytes,
// escaped.
func FuzzGlobMatch(f *testing.F) {
	f.Add("co{t1?}:r*", "co{t12}:r5")
	f.Add("*a*a*a*a*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	f.Add("[^a-", "b")
	f.Fuzz(func(t *testing.T, pattern, key string) {
		_ = globMatch(pattern, key)
		var esc []byte
		for i := 0; i < len(key); i++ {
			esc = append(esc, '\\', key[i])
		}
		if !globMatch(string(esc), key) || !globMatch("*", key) {
			t.Fatalf("%q does not match its escaped self or *", key)
		}
	})
}
