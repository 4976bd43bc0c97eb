package devservers_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/internal/devservers"
)

func TestServersInRealTime(t *testing.T) {
	t.Parallel()
	s, err := devservers.Start(devservers.Options{NATSListen: "127.0.0.1:0", RedisListen: "127.0.0.1:0", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: s.RedisAddr, DisableIdentity: true})
	defer rdb.Close()
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

// TestSnapshotKeepsRedisAcrossRestart: a graceful stop writes the in-process
// Redis to its snapshot; the next start loads it with exact expiries (round
// tokens depend on PEXPIRETIME) and drops what expired while it was down.
func TestSnapshotKeepsRedisAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opts := devservers.Options{NATSListen: "127.0.0.1:0", RedisListen: "127.0.0.1:0", DataDir: dir, Snapshot: dir + "/redis.snapshot"}
	s, err := devservers.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	if s.Restored.Found {
		t.Fatalf("a first start restored %+v", s.Restored)
	}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: s.RedisAddr, DisableIdentity: true})
	at := time.Now().Add(time.Hour).UnixMilli()
	for _, cmd := range [][]any{
		{"SET", "packed", "123456789012345", "PXAT", at},
		{"HSET", "hash", "t", "42", "i\"x\"", "1", "bin", "\x00\xff"},
		{"PEXPIREAT", "hash", at + 1},
		{"SET", "forever", "v"},
		{"SET", "short", "v", "PX", 200},
	} {
		if err := rdb.Do(ctx, cmd...).Err(); err != nil {
			t.Fatal(cmd, err)
		}
	}
	rdb.Close()
	s.Close()
	time.Sleep(300 * time.Millisecond) // "short" expires while the server is down

	s, err = devservers.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r := s.Restored; !r.Found || r.Keys != 3 || r.Expired != 1 || time.Since(r.Written) > 10*time.Second {
		t.Fatalf("restored %+v, want 3 keys and 1 expired from a snapshot just written", r)
	}
	rdb = redis.NewClient(&redis.Options{Addr: s.RedisAddr, DisableIdentity: true})
	defer rdb.Close()
	if v := rdb.Get(ctx, "packed").Val(); v != "123456789012345" {
		t.Errorf("packed = %q", v)
	}
	if got := rdb.PExpireTime(ctx, "packed").Val().Milliseconds(); got != at {
		t.Errorf("packed PEXPIRETIME %d, want %d exactly", got, at)
	}
	if got := rdb.PExpireTime(ctx, "hash").Val().Milliseconds(); got != at+1 {
		t.Errorf("hash PEXPIRETIME %d, want %d exactly", got, at+1)
	}
	if h := rdb.HGetAll(ctx, "hash").Val(); h["t"] != "42" || h["i\"x\""] != "1" || h["bin"] != "\x00\xff" || len(h) != 3 {
		t.Errorf("hash = %q", h)
	}
	if ttl := rdb.PTTL(ctx, "forever").Val(); rdb.Get(ctx, "forever").Val() != "v" || ttl != -1 {
		t.Errorf("forever: %q ttl %v", rdb.Get(ctx, "forever").Val(), ttl)
	}
	if rdb.Exists(ctx, "short").Val() != 0 {
		t.Error("a key that expired while the server was down came back")
	}
}

// TestSnapshotWhileRunning: the snapshot is written while the server runs,
// so a process killed without Close loses at most the last interval.
func TestSnapshotWhileRunning(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opts := devservers.Options{NATSListen: "127.0.0.1:0", RedisListen: "127.0.0.1:0", DataDir: dir,
		Snapshot: dir + "/redis.snapshot", SnapshotEvery: 100 * time.Millisecond}
	s, err := devservers.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: s.RedisAddr, DisableIdentity: true})
	defer rdb.Close()
	for i := range 600 { // more than one MULTI batch
		rdb.HSet(ctx, "h"+strconv.Itoa(i), "n", i)
	}
	// A snapshot written after the last write (not a fixed sleep: under
	// -race on a loaded machine a snapshot takes long and spaces out the
	// next ones; CI once read one of 300 keys after 400 ms).
	wrote := time.Now()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if at, err := devservers.SnapshotWritten(opts.Snapshot); err == nil && at.After(wrote) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no snapshot after the writes within 10 s")
		}
	}
	// A killed process leaves the file as it is: start a second server on a
	// copy of it.
	data, err := os.ReadFile(opts.Snapshot)
	if err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if err := os.WriteFile(other+"/redis.snapshot", data, 0o600); err != nil {
		t.Fatal(err)
	}
	s2, err := devservers.Start(devservers.Options{NATSListen: "127.0.0.1:0", RedisListen: "127.0.0.1:0", DataDir: other, Snapshot: other + "/redis.snapshot"})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.Restored.Keys != 600 {
		t.Fatalf("restored %+v from the running server's snapshot, want 600 keys", s2.Restored)
	}
	r2 := redis.NewClient(&redis.Options{Addr: s2.RedisAddr, DisableIdentity: true})
	defer r2.Close()
	if v := r2.HGet(ctx, "h599", "n").Val(); v != "599" {
		t.Errorf("h599 = %q", v)
	}
}
