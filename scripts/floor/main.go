// Command floor measures the cheapest durable write per event that a
// producer could make: what no debounce decision that writes an event
// before answering it (I1) can beat on a given Redis and machine. It is a
// yardstick for issue 25's targets, not part of coalesce.
//
//	go run ./scripts/floor -addr 127.0.0.1:7911 -mode set-batched -concurrency 50
//
// Modes (each event: key "tenant-<i mod keys>", args as coalesce bench's):
//
//	set-direct     SET key args, each caller its own round trip (Asynq's shape)
//	set-batched    SET key args, callers' commands sent together in pipelines
//	               by a few sender goroutines (coalesce's batcher's shape)
//	hset-batched   HSET key a args n i: the fields a payload-last join writes
//	script-batched EVALSHA of a script that does that HSET and returns 1
//	script-direct  the same script call, each caller its own round trip
//	set-pipe1, script-pipe1  as set-direct and script-direct, each sent as a
//	               pipeline of one command (go-redis's pipeline path)
//
// Prints one JSON line: events/s, p50/p99 latency, the process's and
// Redis's CPU per event.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

type req struct {
	key  string
	args []byte
	seq  int
	err  error
	done chan struct{}
}

// modes are the ways to send, as the package doc describes them.
var modes = []string{"set-direct", "set-batched", "hset-batched", "script-batched", "script-direct", "set-pipe1", "script-pipe1"}

var hsetScript = redis.NewScript(`redis.call('HSET', KEYS[1], 'a', ARGV[1], 'n', ARGV[2]) return 1`)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

func run(argv []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("floor", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:7911", "Redis address")
	mode := fs.String("mode", "set-batched", "one of "+strings.Join(modes, ", "))
	conc := fs.Int("concurrency", 50, "callers")
	n := fs.Int("events", 100000, "events")
	k := fs.Int("keys", 1000, "distinct keys")
	senders := fs.Int("pipelines", 4, "sender goroutines (batched modes)")
	prefix := fs.String("prefix", "", "prepended to every key (the keys are <prefix>tenant-<n>)")
	if err := fs.Parse(argv); err != nil {
		return err
	}
	if !slices.Contains(modes, *mode) {
		return fmt.Errorf("-mode %q: not a mode (one of %s)", *mode, strings.Join(modes, ", "))
	}
	if *conc < 1 || *n < 1 || *k < 1 || *senders < 1 {
		return fmt.Errorf("-concurrency, -events, -keys and -pipelines must be at least 1")
	}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: *addr, PoolSize: max(*conc, 20)})
	defer rdb.Close()
	if err := hsetScript.Load(ctx, rdb).Err(); err != nil {
		return err
	}
	send := func(pipe redis.Pipeliner, r *req) redis.Cmder {
		switch *mode {
		case "set-direct", "set-batched", "set-pipe1":
			return pipe.Set(ctx, r.key, r.args, 0)
		case "hset-batched":
			return pipe.HSet(ctx, r.key, "a", r.args, "n", r.seq)
		default: // script-batched, script-pipe1
			return hsetScript.EvalSha(ctx, pipe, []string{r.key}, r.args, r.seq)
		}
	}
	var do func(r *req) error
	var queue chan *req // batched modes: their senders stop when it closes
	switch *mode {
	case "set-direct":
		do = func(r *req) error { return rdb.Set(ctx, r.key, r.args, 0).Err() }
	case "set-pipe1", "script-pipe1":
		do = func(r *req) error {
			pipe := rdb.Pipeline()
			cmd := send(pipe, r)
			_, _ = pipe.Exec(ctx)
			return cmd.Err()
		}
	case "script-direct":
		do = func(r *req) error { return hsetScript.EvalSha(ctx, rdb, []string{r.key}, r.args, r.seq).Err() }
	default:
		queue = make(chan *req, 4096)
		for range *senders {
			go func() {
				batch := make([]*req, 0, 256)
				cmds := make([]redis.Cmder, 0, 256)
				for r := range queue {
					batch = append(batch[:0], r)
				more:
					for len(batch) < 256 {
						select {
						case r := <-queue:
							batch = append(batch, r)
						default:
							break more
						}
					}
					pipe := rdb.Pipeline()
					cmds = cmds[:0]
					for _, r := range batch {
						cmds = append(cmds, send(pipe, r))
					}
					_, _ = pipe.Exec(ctx)
					for i, r := range batch {
						r.err = cmds[i].Err()
						r.done <- struct{}{}
					}
				}
			}()
		}
		do = func(r *req) error {
			r.done = make(chan struct{}, 1)
			queue <- r
			<-r.done
			return r.err
		}
	}
	cpu0, err := redisCPU(ctx, rdb)
	if err != nil {
		return err
	}
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	lat := make([]time.Duration, *n)
	var next, errs atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range *conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= *n {
					return
				}
				t0 := time.Now()
				r := &req{key: *prefix + "tenant-" + strconv.Itoa(i%*k), seq: i}
				r.args = fmt.Appendf(nil, `{"tenant_id":"tenant-%d","seq":%d}`, i%*k, i)
				if err := do(r); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	if queue != nil {
		close(queue)
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu1, err := redisCPU(ctx, rdb)
	if err != nil {
		return err
	}
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	us := func(p float64) float64 { return float64(lat[min(int(p*float64(*n)), *n-1)].Nanoseconds()) / 1000 }
	client := float64(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) / 1000 / float64(*n)
	out, _ := json.Marshal(map[string]any{"mode": *mode, "concurrency": *conc, "events": *n, "keys": *k, "errors": errs.Load(), "first_error": firstErr.Load(),
		"events_per_s": int(float64(*n) / el.Seconds()), "p50_us": us(0.5), "p99_us": us(0.99),
		"client_cpu_us_per_event": client, "redis_cpu_us_per_event": (cpu1 - cpu0) * 1e6 / float64(*n)})
	_, err = fmt.Fprintln(stdout, string(out))
	return err
}

// redisCPU is Redis's used_cpu_sys + used_cpu_user, seconds.
func redisCPU(ctx context.Context, rdb *redis.Client) (float64, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var s float64
	for _, line := range strings.Split(info, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			s += f
		}
	}
	return s, nil
}
