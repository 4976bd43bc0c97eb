package devservers_test

import (
	"context"
	"errors"
	"net"
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
