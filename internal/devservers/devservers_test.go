package devservers_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/internal/devservers"
)

func client(t *testing.T, s *devservers.Servers) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.RedisAddr, DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func start(t *testing.T, o devservers.Options) *devservers.Servers {
	t.Helper()
	if o.NATSListen == "" {
		o.NATSListen, o.NoNATS = "127.0.0.1:0", true
	}
	o.RedisListen = "127.0.0.1:0"
	if o.DataDir == "" {
		o.DataDir = t.TempDir()
	}
	s, err := devservers.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestServersInRealTime(t *testing.T) {
	t.Parallel()
	s, err := devservers.Start(devservers.Options{NATSListen: "127.0.0.1:0", RedisListen: "127.0.0.1:0", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	rdb := client(t, s)
	// TTLs run in real time, and PXAT reads back exactly.
	at := time.Now().Add(300 * time.Millisecond).UnixMilli()
	if err := rdb.Do(ctx, "SET", "k", "1", "PXAT", at).Err(); err != nil {
		t.Fatal(err)
	}
	if got := rdb.PExpireTime(ctx, "k").Val().Milliseconds(); got != at {
		t.Errorf("PEXPIRETIME %d, want %d", got, at)
	}
	time.Sleep(100 * time.Millisecond)
	if got := rdb.PExpireTime(ctx, "k").Val().Milliseconds(); got != at {
		t.Errorf("PEXPIRETIME after 100ms %d, want %d", got, at)
	}
	deadline := time.Now().Add(2 * time.Second)
	for rdb.Exists(ctx, "k").Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatal("key did not expire in real time")
		}
		time.Sleep(20 * time.Millisecond)
	}
	nc, err := nats.Connect(s.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowMsgSchedules: true}); err != nil {
		t.Fatal(err)
	}
}

func TestAddressInUse(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, o := range []devservers.Options{
		{NATSListen: l.Addr().String(), RedisListen: "127.0.0.1:0", DataDir: t.TempDir()},
		{NATSListen: "127.0.0.1:0", RedisListen: l.Addr().String(), DataDir: t.TempDir()},
	} {
		if _, err := devservers.Start(o); !errors.Is(err, devservers.ErrAddrInUse) {
			t.Errorf("Start(%+v) = %v, want ErrAddrInUse", o, err)
		}
	}
}

// dump is every key of database 0 with its type, value and PEXPIRETIME.
func dump(t *testing.T, rdb *redis.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		typ := rdb.Type(ctx, k).Val()
		exp := rdb.PExpireTime(ctx, k).Val().Milliseconds()
		var v string
		switch typ {
		case "string":
			v = rdb.Get(ctx, k).Val()
		case "hash":
			h := rdb.HGetAll(ctx, k).Val()
			for _, f := range slices.Sorted(maps.Keys(h)) {
				v += f + "=" + h[f] + ";"
			}
		default:
			v = "?"
		}
		out[k] = fmt.Sprintf("%s %q exp=%d", typ, v, exp)
	}
	return out
}

// copyDir copies a data folder as a SIGKILL leaves it: what the process
// wrote, without Close.
func copyDir(t *testing.T, from string) string {
	t.Helper()
	to := t.TempDir()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

func sameState(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %s, want %s", what, k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %s = %s should not exist", what, k, v)
		}
	}
}

// script touches a key it is not given (as coalesce's flush marker does),
// uses a relative expiry, RENAME and PTTL inside Lua.
const script = `
redis.call('HSET', KEYS[1], 'n', 1, 'x', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'n', 5)
redis.call('SET', 'marker:' .. KEYS[1], 'm', 'PX', 60000)
redis.call('RENAME', KEYS[1], KEYS[2])
redis.call('PEXPIRE', KEYS[2], 120000)
return {redis.call('PTTL', KEYS[2]), redis.call('PTTL', 'marker:' .. KEYS[1]), redis.call('PEXPIRETIME', KEYS[2])}
`

// writeMix sends writes of every kind the store journals.
func writeMix(t *testing.T, rdb *redis.Client, prefix string) (at int64) {
	t.Helper()
	ctx := context.Background()
	at = time.Now().Add(time.Hour).UnixMilli()
	for _, cmd := range [][]any{
		{"SET", prefix + "packed", "123456789012345", "PXAT", at},
		{"HSET", prefix + "hash", "t", "42", "i\"x\"", "1", "bin", "\x00\xff", "empty", ""},
		{"PEXPIREAT", prefix + "hash", at + 1},
		{"HDEL", prefix + "hash", "t"},
		{"HINCRBY", prefix + "hash", "n", 3},
		{"SET", prefix + "forever", "v"},
		{"SET", prefix + "ex", "v", "EX", 100},
		{"SETEX", prefix + "setex", 100, "v"},
		{"SET", prefix + "persisted", "v", "PX", 100000},
		{"PERSIST", prefix + "persisted"},
		{"INCRBY", prefix + "counter", 7},
		{"SET", prefix + "gone", "v"},
		{"DEL", prefix + "gone"},
		{"HSET", prefix + "emptied", "a", "1"},
		{"HDEL", prefix + "emptied", "a"},
		{"SET", prefix + "expired", "v", "PX", 1},
		{"MSET", prefix + "m1", "1", prefix + "m2", "2"},
		{"EVAL", script, 2, prefix + "round", prefix + "taken", "arg"},
	} {
		if err := rdb.Do(ctx, cmd...).Err(); err != nil {
			t.Fatal(cmd, err)
		}
	}
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, prefix+"tx", "v", time.Minute)
		p.HSet(ctx, prefix+"txhash", "f", "v")
		p.Del(ctx, prefix+"m1")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// A transaction discarded changes nothing.
	tx := rdb.TxPipeline()
	tx.Set(ctx, prefix+"discarded", "v", 0)
	tx.Discard()
	time.Sleep(20 * time.Millisecond) // "expired" is due
	return at
}

// TestEveryAnsweredWriteIsJournaled: the data folder as a SIGKILL leaves it
// (no Close, copied at once after the last reply) restores exactly the
// state the server answered from: values, hash fields, exact expiry times,
// the keys a script touched outside KEYS, transactions.
func TestEveryAnsweredWriteIsJournaled(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := start(t, devservers.Options{RedisDir: dir})
	defer s.Close()
	if s.Restored.Found {
		t.Fatalf("a first start restored %+v", s.Restored)
	}
	rdb := client(t, s)
	at := writeMix(t, rdb, "")
	ctx := context.Background()
	res, err := rdb.Eval(ctx, `return {redis.call('PTTL', KEYS[1]), redis.call('TTL', KEYS[1])}`, []string{"taken"}).Int64Slice()
	if err != nil || res[0] <= 100_000 || res[0] > 120_000 || res[1] < 100 || res[1] > 120 {
		t.Errorf("PTTL, TTL inside a script: %v %v, want about 120000 ms, 120 s", res, err)
	}
	if ttl := rdb.PTTL(ctx, "ex").Val(); ttl <= 90*time.Second || ttl > 100*time.Second {
		t.Errorf("PTTL of a key set with EX 100: %v", ttl)
	}
	if ttl := rdb.TTL(ctx, "setex").Val(); ttl < 99*time.Second || ttl > 100*time.Second {
		t.Errorf("TTL of a key set with SETEX 100: %v", ttl)
	}
	if ttl := rdb.PTTL(ctx, "forever").Val(); ttl != -1 {
		t.Errorf("PTTL of a key without expiry: %v", ttl)
	}
	if ttl := rdb.PTTL(ctx, "nothing").Val(); ttl != -2 {
		t.Errorf("PTTL of a missing key: %v", ttl)
	}
	if now, err := rdb.Time(ctx).Result(); err != nil || time.Since(now).Abs() > 5*time.Second {
		t.Errorf("TIME %v %v", now, err)
	}
	want := dump(t, rdb)
	for _, k := range []string{"packed", "hash", "forever", "ex", "setex", "persisted", "counter", "marker:round", "taken", "tx", "txhash", "m2"} {
		if _, ok := want[k]; !ok {
			t.Errorf("%s is missing in the running server: %v", k, want)
		}
	}
	for _, k := range []string{"gone", "emptied", "expired", "round", "m1", "discarded"} {
		if _, ok := want[k]; ok {
			t.Errorf("%s exists in the running server: %s", k, want[k])
		}
	}
	if h := fmt.Sprintf("hash %q exp=%d", "bin=\x00\xff;empty=;i\"x\"=1;n=3;", at+1); want["hash"] != h {
		t.Errorf("hash = %s, want %s", want["hash"], h)
	}
	if p := fmt.Sprintf("string %q exp=%d", "123456789012345", at); want["packed"] != p {
		t.Errorf("packed = %s, want %s", want["packed"], p)
	}

	s2 := start(t, devservers.Options{RedisDir: copyDir(t, dir)})
	defer s2.Close()
	if r := s2.Restored; !r.Found || r.Keys != len(want) || r.Frames == 0 || time.Since(r.LastWrite) > time.Minute {
		t.Errorf("restored %+v, want %d keys", r, len(want))
	}
	sameState(t, "after a kill", want, dump(t, client(t, s2)))
}

// TestExpiryDoesNotWalkTheKeys: with many keys pending far ahead, a key
// due soon is gone at its time, and writes keep their speed whatever the
// number of keys (the old ClockTTL re-sorted every key on each 50 ms tick).
func TestExpiryDoesNotWalkTheKeys(t *testing.T) {
	t.Parallel()
	s := start(t, devservers.Options{RedisDir: t.TempDir()})
	defer s.Close()
	rdb := client(t, s)
	ctx := context.Background()
	far := time.Now().Add(time.Hour).UnixMilli()
	const n = 50_000
	for i := 0; i < n; i += 1000 {
		p := rdb.Pipeline()
		for j := i; j < i+1000; j++ {
			p.Do(ctx, "SET", "far:"+strconv.Itoa(j), "v", "PXAT", far)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	soon := time.Now().Add(200 * time.Millisecond)
	if err := rdb.Do(ctx, "SET", "soon", "v", "PXAT", soon.UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	// Nobody sends a command: the idle expiry deletes it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if st := s.RedisStats(); st.Expired == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key due at %v was not deleted: %+v", soon, s.RedisStats())
		}
	}
	if rdb.Exists(ctx, "soon").Val() != 0 || rdb.DBSize(ctx).Val() != n {
		t.Errorf("after the expiry: soon exists %d, %d keys", rdb.Exists(ctx, "soon").Val(), rdb.DBSize(ctx).Val())
	}
}

// TestCompactionWhileWriting: snapshots written while clients write keep
// every write (the issue-29 gap: a write during the old snapshot was never
// saved until another command came), and remove the segments they cover.
func TestCompactionWhileWriting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := start(t, devservers.Options{RedisDir: dir, CompactAfter: 16 << 10})
	defer s.Close()
	rdb := client(t, s)
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 600 {
				k := fmt.Sprintf("w%d:%d", w, i%150)
				if err := rdb.HSet(ctx, k, "n", i, "w", w).Err(); err != nil {
					t.Error(err)
					return
				}
				if i%7 == 0 {
					rdb.Del(ctx, fmt.Sprintf("w%d:%d", w, (i+3)%150))
				}
				if i%5 == 0 {
					rdb.PExpireAt(ctx, k, time.Now().Add(time.Hour+time.Duration(i)*time.Millisecond))
				}
			}
		})
	}
	wg.Wait()
	if st := s.RedisStats(); st.Compactions == 0 {
		t.Fatalf("no compaction: %+v", st)
	}
	want := dump(t, rdb)
	files, _ := filepath.Glob(filepath.Join(dir, "journal.*"))
	if len(files) > 3 {
		t.Errorf("%d journal segments left after the compactions: %v", len(files), files)
	}
	s2 := start(t, devservers.Options{RedisDir: copyDir(t, dir)})
	defer s2.Close()
	if r := s2.Restored; r.SnapshotWritten.IsZero() || r.Keys != len(want) {
		t.Errorf("restored %+v, want a snapshot and %d keys", r, len(want))
	}
	sameState(t, "after compactions", want, dump(t, client(t, s2)))
}

// TestRestartAfterRestart: a graceful stop, a start, more writes and a
// kill: the second restore has both starts' writes, and what expired while
// the server was down is dropped (and said).
func TestRestartAfterRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := start(t, devservers.Options{RedisDir: dir})
	rdb := client(t, s)
	ctx := context.Background()
	rdb.Set(ctx, "a", "1", 0)
	rdb.Set(ctx, "short", "v", 300*time.Millisecond)
	s.Close()
	time.Sleep(400 * time.Millisecond)
	s = start(t, devservers.Options{RedisDir: dir})
	defer s.Close()
	if r := s.Restored; r.Keys != 1 || r.Expired != 1 {
		t.Errorf("restored %+v, want 1 key and 1 expired while down", r)
	}
	rdb = client(t, s)
	rdb.Set(ctx, "b", "2", 0)
	s2 := start(t, devservers.Options{RedisDir: copyDir(t, dir)})
	defer s2.Close()
	sameState(t, "second restore", dump(t, rdb), dump(t, client(t, s2)))
}

// TestRefusesWhatItCannotJournal: a write of a type the journal does not
// keep is refused with a message that says so, from a client or a script,
// rather than kept in memory and lost at the next restart.
func TestRefusesWhatItCannotJournal(t *testing.T) {
	t.Parallel()
	s := start(t, devservers.Options{RedisDir: t.TempDir()})
	defer s.Close()
	rdb := client(t, s)
	ctx := context.Background()
	for _, cmd := range [][]any{
		{"LPUSH", "l", "x"},
		{"SADD", "s", "x"},
		{"EVAL", "return redis.call('ZADD', KEYS[1], 1, 'x')", 1, "z"},
		{"COPY", "a", "b", "DB", 1},
	} {
		err := rdb.Do(ctx, cmd...).Err()
		if err == nil || !strings.Contains(err.Error(), "embedded store") {
			t.Errorf("%v: %v, want a refusal naming the embedded store", cmd, err)
		}
	}
	if n := rdb.DBSize(ctx).Val(); n != 0 {
		t.Errorf("%d keys after refusals", n)
	}
}

// TestDamagedJournal: a write cut short at the end (a crash while writing
// it) is dropped and said; damage before the last segment's end is refused
// with what to do.
func TestDamagedJournal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := start(t, devservers.Options{RedisDir: dir})
	rdb := client(t, s)
	ctx := context.Background()
	for i := range 10 {
		rdb.Set(ctx, "k"+strconv.Itoa(i), i, 0)
	}
	s.Close()
	seg, _ := filepath.Glob(filepath.Join(dir, "journal.*"))
	if len(seg) != 1 {
		t.Fatalf("segments %v", seg)
	}
	data, _ := os.ReadFile(seg[0])

	torn := copyDir(t, dir)
	if err := os.WriteFile(filepath.Join(torn, filepath.Base(seg[0])), data[:len(data)-3], 0o600); err != nil {
		t.Fatal(err)
	}
	s = start(t, devservers.Options{RedisDir: torn})
	if r := s.Restored; r.Keys != 9 || r.TornBytes == 0 {
		t.Errorf("restored %+v from a torn journal, want 9 keys and the torn bytes", r)
	}
	rdb = client(t, s)
	rdb.Set(ctx, "after", "v", 0)
	s.Close()
	s = start(t, devservers.Options{RedisDir: torn}) // the torn end is gone for good
	if r := s.Restored; r.Keys != 10 || r.TornBytes != 0 {
		t.Errorf("restored %+v after the repair, want 10 keys", r)
	}
	s.Close()

	damaged := copyDir(t, dir)
	bad := append([]byte(nil), data...)
	bad[len(bad)/2] ^= 0xff
	if err := os.WriteFile(filepath.Join(damaged, filepath.Base(seg[0])), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	later := filepath.Join(damaged, "journal.000002")
	if err := os.WriteFile(later, []byte("coalesce embedded redis journal 1\n\x02\x00\x00\x00\x00\x00\x00\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := devservers.Start(devservers.Options{NATSListen: "127.0.0.1:0", NoNATS: true, RedisListen: "127.0.0.1:0", DataDir: t.TempDir(), RedisDir: damaged})
	if err == nil || !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), "move the folder") {
		t.Errorf("a damaged segment before the last: %v", err)
	}
}

// TestSyncRedis: the relay's barrier fsyncs the journal; without a folder
// there is nothing durable to wait for, and it says so.
func TestSyncRedis(t *testing.T) {
	t.Parallel()
	s := start(t, devservers.Options{RedisDir: t.TempDir()})
	defer s.Close()
	client(t, s).Set(context.Background(), "k", "v", 0)
	if err := s.SyncRedis(); err != nil || !s.RedisPersisted() {
		t.Errorf("SyncRedis: %v", err)
	}
	m := start(t, devservers.Options{})
	defer m.Close()
	if err := m.SyncRedis(); !errors.Is(err, devservers.ErrNotPersisted) || m.RedisPersisted() {
		t.Errorf("memory only: SyncRedis %v", err)
	}
}
