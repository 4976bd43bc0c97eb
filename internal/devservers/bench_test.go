package devservers_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/internal/devservers"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// openLike writes as a round's opening does: a few hash fields and an
// absolute expiry, in a script.
var openLike = redis.NewScript(`
redis.call('HSET', KEYS[1], 't', ARGV[1], 'n', 1, 'f', ARGV[2], 'd', ARGV[2])
redis.call('PEXPIREAT', KEYS[1], ARGV[3])
return 1`)

// BenchmarkEmbeddedRedis: one opening-like script per op, 50 in flight,
// with 1,000 or 200,000 keys already pending (each with an expiry), the
// journal on or off. The cost must not grow with the keys.
func BenchmarkEmbeddedRedis(b *testing.B) {
	for _, keys := range []int{1_000, 200_000} {
		for _, persist := range []bool{false, true} {
			b.Run(fmt.Sprintf("keys=%d/journal=%v", keys, persist), func(b *testing.B) {
				o := devservers.Options{NATSListen: "127.0.0.1:0", NoNATS: true, RedisListen: "127.0.0.1:0", DataDir: b.TempDir()}
				if persist {
					o.RedisDir = b.TempDir()
				}
				s, err := devservers.Start(o)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				rdb := redis.NewClient(&redis.Options{Addr: s.RedisAddr, DisableIdentity: true, PoolSize: 64})
				defer rdb.Close()
				ctx := context.Background()
				at := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
				for i := 0; i < keys; i += 1000 {
					p := rdb.Pipeline()
					for j := i; j < i+1000; j++ {
						p.HSet(ctx, "pending:"+strconv.Itoa(j), "t", j, "n", 1)
						p.Do(ctx, "PEXPIREAT", "pending:"+strconv.Itoa(j), at)
					}
					if _, err := p.Exec(ctx); err != nil {
						b.Fatal(err)
					}
				}
				if err := openLike.Load(ctx, rdb).Err(); err != nil {
					b.Fatal(err)
				}
				runtime.GC()         // the preload's garbage is not the ops'
				b.SetParallelism(25) // 50 in flight on 2 cores
				cpu0 := cpuTime()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						i++
						k := "bench:" + strconv.Itoa(i%5000)
						if err := openLike.EvalSha(ctx, rdb, []string{k}, i, time.Now().UnixMilli(), at).Err(); err != nil {
							b.Error(err)
							return
						}
					}
				})
				// CPU of the process (server and client) per op: on a
				// loaded machine wall time says more about the neighbours.
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
