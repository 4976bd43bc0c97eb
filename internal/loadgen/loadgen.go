// Package loadgen is `coalesce bench`'s load generator: it sends a workload
// through a Submit function (the library, or a daemon's HTTP API) with a
// bounded number in flight, and measures throughput, latency, its own CPU
// and allocations and, when Redis answers INFO, Redis's CPU and memory.
// cmd/coalesce wires the targets; this package knows none of them.
package loadgen

import (
	"context"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Result is the one JSON line `coalesce bench` prints; its field names are
// what BENCHMARKS.md and scripts read.
type Result struct {
	Mode        string  `json:"mode"`
	Payload     string  `json:"payload"`
	Via         string  `json:"via"`
	Events      int     `json:"events"`
	Keys        int     `json:"keys"`
	Concurrency int     `json:"concurrency"`
	Pending     int     `json:"pending,omitempty"` // rounds of other keys opened before the run
	Errors      int64   `json:"errors"`
	Seconds     float64 `json:"seconds"`
	EventsPerS  float64 `json:"events_per_s"`
	P50us       float64 `json:"p50_us"`
	P99us       float64 `json:"p99_us"`
	// The coalesced path (library only): decisions that joined a pending
	// round or were dropped by design, without the openings, which wait for
	// their JetStream publish and, at 1% of events, set the overall p99.
	JoinedP50us         *float64 `json:"joined_p50_us,omitempty"`
	JoinedP99us         *float64 `json:"joined_p99_us,omitempty"`
	RoundsOpened        int64    `json:"rounds_opened"`
	JobsPublished       int64    `json:"jobs_published"`
	DuplicatesObserved  int64    `json:"duplicates_observed"`
	RedisCPUusPerEvent  *float64 `json:"redis_cpu_us_per_event"`
	RedisBytesPerRound  *float64 `json:"redis_bytes_per_round"`
	ClientCPUusPerEvent float64  `json:"client_cpu_us_per_event"`
	// NATSCPUusPerEvent: the nats-server process's CPU per event during the
	// run (Load.NATSPid), and the schedules setting of the library run.
	NATSCPUusPerEvent *float64 `json:"nats_cpu_us_per_event,omitempty"`
	Schedules         string   `json:"schedules,omitempty"`
	// Drain (--drain): after the run, how long until the jobs of every round
	// opened were published (rounds held in Redis are forwarded when due),
	// the rate that makes from the first due time, and the nats-server and
	// Redis CPU per job meanwhile.
	DrainS             *float64 `json:"drain_s,omitempty"`
	ForwardedPerS      *float64 `json:"forwarded_per_s,omitempty"`
	DrainNATSCPUusJob  *float64 `json:"drain_nats_cpu_us_per_job,omitempty"`
	DrainRedisCPUusJob *float64 `json:"drain_redis_cpu_us_per_job,omitempty"`
	AllocsPerEvent     float64  `json:"allocs_per_event"`
	// Local joins (library only): events answered without a Redis call,
	// the flushes that added them to their rounds (script calls, rounds
	// carried, mean round trip) and events submitted again because their
	// round was gone at the flush.
	LocalJoined    *uint64  `json:"local_joined,omitempty"`
	Flushes        *uint64  `json:"flushes,omitempty"`
	FlushedRounds  *uint64  `json:"flushed_rounds,omitempty"`
	FlushMeanUs    *float64 `json:"flush_mean_us,omitempty"`
	Resubmitted    *uint64  `json:"resubmitted,omitempty"`
	FlushAssists   *uint64  `json:"flush_assists,omitempty"`     // flushes a submitting goroutine ran: the flusher lacked CPU
	FlushWaitMaxMs *float64 `json:"flush_wait_max_ms,omitempty"` // the longest a local join waited for its flush to start
	LocalSkipped   *uint64  `json:"local_skipped,omitempty"`     // events sent to Redis without a local try: few joined locally (the gate)

	// Interrupted: the run was stopped (SIGTERM, Ctrl-C) before it sent
	// every event; Sent is how many were answered, and the figures are
	// theirs. Events cut short by the stop are no errors.
	Interrupted bool `json:"interrupted,omitempty"`
	Sent        int  `json:"sent,omitempty"`
}

// Submit decides events [from, to): one request (a batch) of the workload.
type Submit func(ctx context.Context, from, to int) error

// Load is a workload and what to measure it with.
type Load struct {
	Events      int
	Batch       int // events per Submit call; at least 1
	Concurrency int // Submit calls in flight
	Submit      Submit
	// Keys is the workload's distinct keys: rounds opened beyond them are
	// duplicates observed.
	Keys int
	// Opened and Published count, as Submit sees them, the rounds opened
	// and the jobs published (nil: not counted).
	Opened, Published *atomic.Int64
	// Redis, when it answers INFO, gives the Redis CPU and memory figures.
	Redis redis.UniversalClient
	// Opens, when set (one entry per event, filled by Submit), says which
	// events opened a round: their latencies are left out of the joined
	// percentiles. Only meaningful with Batch 1.
	Opens []bool
	// Allocs reports allocations per event (meaningful when Submit runs in
	// this process).
	Allocs bool
	// CPUProfile, when set, is the file a CPU profile of the run goes to.
	CPUProfile string
	// NATSPid, when set, is the nats-server's process id: its CPU per event
	// is reported.
	NATSPid int
}

// Run runs the load and fills in res's measured fields (the rest, such as
// Mode and Via, are the caller's). It returns the first Submit error, if
// any, with res.Errors counting them all.
func Run(ctx context.Context, l Load, res *Result) (firstErr error, err error) {
	batch := max(l.Batch, 1)
	cpu0, mem0, redisInfo := RedisUsage(ctx, l.Redis)
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpuStart := processCPU()
	natsStart, natsOK := PIDCPU(l.NATSPid)
	requests := (l.Events + batch - 1) / batch
	lat := make([]time.Duration, requests)
	answered := make([]bool, requests) // false: not sent, or cut short by a stop
	var next, errs atomic.Int64
	var first atomic.Value
	if l.CPUProfile != "" {
		f, err := os.Create(l.CPUProfile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range l.Concurrency {
		wg.Go(func() {
			for {
				if ctx.Err() != nil {
					return // stopped: the rest is not sent
				}
				r := int(next.Add(1)) - 1
				if r >= requests {
					return
				}
				from := r * batch
				to := min(from+batch, l.Events)
				t0 := time.Now()
				if err := l.Submit(ctx, from, to); err != nil {
					if ctx.Err() != nil {
						return // cut short by the stop: no answer, no error
					}
					errs.Add(1)
					first.CompareAndSwap(nil, err)
				}
				lat[r], answered[r] = time.Since(t0), true
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if l.CPUProfile != "" {
		pprof.StopCPUProfile()
	}
	cpuUsed := processCPU() - cpuStart
	if natsEnd, ok := PIDCPU(l.NATSPid); ok && natsOK && l.NATSPid > 0 {
		perEvent := Round(float64((natsEnd-natsStart).Microseconds())/float64(l.Events), 2)
		res.NATSCPUusPerEvent = &perEvent
	}
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)

	sent := l.Events
	if ctx.Err() != nil {
		// Stopped: the figures are those of the requests answered.
		sent, res.Interrupted = 0, true
		kept := lat[:0]
		for r, ok := range answered {
			if ok {
				sent += min((r+1)*batch, l.Events) - r*batch
				kept = append(kept, lat[r])
			}
		}
		if l.Opens != nil { // batch 1: request r is event r
			opens := l.Opens[:0:0]
			for r, ok := range answered {
				if ok {
					opens = append(opens, l.Opens[r])
				}
			}
			l.Opens = opens
		}
		lat = kept
		res.Sent = sent
		if len(lat) == 0 {
			lat = []time.Duration{0}
		}
	}
	res.Seconds = Round(elapsed.Seconds(), 3)
	res.EventsPerS = Round(float64(sent)/elapsed.Seconds(), 0)
	if l.Opens != nil {
		joined := make([]time.Duration, 0, len(lat))
		for i, d := range lat {
			if i < len(l.Opens) && !l.Opens[i] {
				joined = append(joined, d)
			}
		}
		if len(joined) > 0 {
			slices.Sort(joined)
			p50 := Round(float64(joined[len(joined)/2].Microseconds()), 0)
			p99 := Round(float64(joined[len(joined)*99/100].Microseconds()), 0)
			res.JoinedP50us, res.JoinedP99us = &p50, &p99
		}
	}
	slices.Sort(lat)
	res.P50us = Round(float64(lat[len(lat)/2].Microseconds()), 0)
	res.P99us = Round(float64(lat[len(lat)*99/100].Microseconds()), 0)
	res.Errors = errs.Load()
	if l.Opened != nil {
		res.RoundsOpened = l.Opened.Load()
		res.DuplicatesObserved = max(0, res.RoundsOpened-int64(l.Keys))
	}
	if l.Published != nil {
		res.JobsPublished = l.Published.Load()
	}
	res.ClientCPUusPerEvent = Round(cpuUsed.Seconds()*1e6/float64(max(sent, 1)), 2)
	if l.Allocs {
		res.AllocsPerEvent = Round(float64(ms1.Mallocs-ms0.Mallocs)/float64(max(sent, 1)), 1)
	}
	if redisInfo {
		cpu1, mem1, _ := RedisUsage(context.WithoutCancel(ctx), l.Redis)
		perEvent := Round((cpu1-cpu0)*1e6/float64(max(sent, 1)), 2)
		res.RedisCPUusPerEvent = &perEvent
		if res.RoundsOpened > 0 {
			perRound := Round(float64(mem1-mem0)/float64(res.RoundsOpened), 1)
			res.RedisBytesPerRound = &perRound
		}
	}
	if e, ok := first.Load().(error); ok {
		return e, nil
	}
	return nil, nil
}

// Round rounds v to digits decimals.
func Round(v float64, digits int) float64 {
	p := math.Pow10(digits)
	return math.Round(v*p) / p
}

// RedisUsage reads Redis's CPU seconds and used memory; ok false when the
// server does not answer INFO (miniredis) or rdb is nil.
func RedisUsage(ctx context.Context, rdb redis.UniversalClient) (cpu float64, mem int64, ok bool) {
	if rdb == nil {
		return 0, 0, false
	}
	raw, err := rdb.Info(ctx, "cpu", "memory").Result()
	if err != nil {
		return 0, 0, false
	}
	for line := range strings.SplitSeq(raw, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "used_cpu_sys", "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		case "used_memory":
			mem, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return cpu, mem, true
}
