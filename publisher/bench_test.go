package publisher_test

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/publisher"
)

type benchServer struct {
	name  string
	start func(testing.TB) *testenv.NATSServer
}

// benchServers: the server embedded in the test binary, and a separate
// nats-server process (which does not share the Go runtime with the client).
func benchServers() []benchServer {
	return []benchServer{{"embedded", testenv.NATS}, {"process", testenv.NATSProcess}}
}

// BenchmarkPublishSchedule measures schedules published per second through
// Publish: one goroutine, and 64 goroutines pipelining on one connection.
// The schedules are due in an hour, so none fires during the run.
func BenchmarkPublishSchedule(b *testing.B) {
	for _, srv := range benchServers() {
		for _, par := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/goroutines=%d", srv.name, par), func(b *testing.B) {
				_, js := srv.start(b).Connect(b)
				p, err := publisher.New(b.Context(), js, nil)
				if err != nil {
					b.Fatal(err)
				}
				proto := testJob(b, "bench.recompute", time.Now().Add(time.Hour))
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				if par == 1 {
					for i := 0; i < b.N; i++ {
						j := proto
						j.Key[0], j.Key[1], j.Key[2] = byte(i), byte(i>>8), byte(i>>16)
						if err := p.Publish(b.Context(), j); err != nil {
							b.Fatal(err)
						}
					}
				} else {
					b.SetParallelism((par + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							j := proto
							j.Key = randomKey()
							if err := p.Publish(b.Context(), j); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "schedules/s")
			})
		}
	}
}

// TestFireLateness publishes COALESCE_LATENCY_N (default 10,000) schedules due
// evenly over COALESCE_LATENCY_SPREAD (default 3s; 0 = all at one moment) and
// reports how late they fire: the stream's store time (the server firing) and
// the consumer's receive time, minus the due time. Set COALESCE_LATENCY=1 to
// run it; numbers go to BENCHMARKS.md.
func TestFireLateness(t *testing.T) {
	if os.Getenv("COALESCE_LATENCY") != "1" {
		t.Skip("set COALESCE_LATENCY=1 to measure schedule lateness")
	}
	n := 10_000
	if s := os.Getenv("COALESCE_LATENCY_N"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	spread := 3 * time.Second
	if s := os.Getenv("COALESCE_LATENCY_SPREAD"); s != "" {
		var err error
		if spread, err = time.ParseDuration(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, srv := range benchServers() {
		t.Run(srv.name, func(t *testing.T) {
			_, js := srv.start(t).Connect(t)
			p, err := publisher.New(t.Context(), js, nil)
			if err != nil {
				t.Fatal(err)
			}
			col := collect(t, p, js)
			lead := 2*time.Second + time.Duration(n)*200*time.Microsecond // room to publish them all first
			first := time.Now().Add(lead)
			jobs := make([]debounce.Job, n)
			for i := range jobs {
				jobs[i] = testJob(t, "lateness", first.Add(spread*time.Duration(i)/time.Duration(n)))
			}
			start := time.Now()
			var wg sync.WaitGroup
			const workers = 64
			for w := range workers {
				wg.Go(func() {
					for i := w; i < n; i += workers {
						if err := p.Publish(t.Context(), jobs[i]); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			pubDur := time.Since(start)
			if time.Now().After(first) {
				t.Fatalf("publishing took %v, past the first due time; raise the lead", pubDur)
			}
			got := col.waitN(t, n, time.Until(first)+spread+30*time.Second)
			if len(got) != n {
				t.Fatalf("%d of %d fired", len(got), n)
			}
			due := make(map[string]time.Time, n)
			for _, j := range jobs {
				due[j.Token.String()] = j.DueAt
			}
			var stored, recv []time.Duration
			early := 0
			for _, f := range got {
				d := due[f.msg.Headers().Get(publisher.HeaderRound)]
				s := f.stored(t).Sub(d)
				if s < 0 {
					early++
				}
				stored = append(stored, s)
				recv = append(recv, f.at.Sub(d))
			}
			if early > 0 {
				t.Errorf("%d schedules fired before their due time", early)
			}
			t.Logf("nats-server %s (%s): %d schedules published in %v (%.0f/s), due over %v",
				p.ServerVersion(), srv.name, n, pubDur.Round(time.Millisecond), float64(n)/pubDur.Seconds(), spread)
			t.Logf("fire lateness (stored - due):   %s", quantiles(stored))
			t.Logf("receive lateness (recv - due):  %s", quantiles(recv))
		})
	}
}

func quantiles(ds []time.Duration) string {
	slices.Sort(ds)
	q := func(p float64) time.Duration {
		return ds[min(len(ds)-1, int(p*float64(len(ds))))].Round(100 * time.Microsecond)
	}
	return fmt.Sprintf("p50 %v  p90 %v  p99 %v  max %v", q(0.50), q(0.90), q(0.99), ds[len(ds)-1].Round(100*time.Microsecond))
}
