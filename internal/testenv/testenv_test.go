package testenv_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestRealRedis proves the harness gives a real redis-server (INFO and TTLs in
// real time are what miniredis lacks).
func TestRealRedis(t *testing.T) {
	t.Parallel()
	srv := testenv.SharedRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := "redis_version:"; !strings.Contains(info, want) {
		t.Fatalf("INFO server lacks %q: %s", want, info)
	}
	key := testenv.Prefix(t) + "k"
	ok, err := c.SetNX(ctx, key, "tok", 50*time.Millisecond).Result()
	if err != nil || !ok {
		t.Fatalf("SET NX PX: %v %v", ok, err)
	}
	if ok, _ := c.SetNX(ctx, key, "tok2", time.Second).Result(); ok {
		t.Fatal("second SET NX succeeded")
	}
	deadline := time.Now().Add(2 * time.Second)
	for c.Exists(ctx, key).Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatal("key did not expire in real time")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPrivateRedisRestart(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Stop")
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, "k").Val(); n != 0 {
		t.Fatalf("restarted server kept data: EXISTS = %d", n)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	c := testenv.SharedCluster(t).Client(t)
	ctx := context.Background()
	// Keys with one hash tag land in one slot and work in one MULTI.
	p := testenv.Prefix(t)
	_, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, p+"{tag}a", 1, time.Minute)
		pipe.Set(ctx, p+"{tag}b", 2, time.Minute)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Keys spread over the three masters.
	masters := map[string]bool{}
	for i := range 64 {
		addr, err := c.MasterForKey(ctx, fmt.Sprintf("%s%d", p, i))
		if err != nil {
			t.Fatal(err)
		}
		masters[addr.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Fatalf("64 keys reached %d masters, want 3", len(masters))
	}
}
