package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/outbox"
)

// recompute is the benchmarks' policy: a tenant's events coalesce into one
// job, pending through the run.
var recompute = debounce.Policy{Type: "recompute", Mode: debounce.ModeDebounce, Window: 5 * time.Minute,
	KeyFields: []string{"tenant_id"}}

// benchEnv is newEnv without the worker (nothing is due during a run).
func benchEnv(b *testing.B) *env {
	b.Helper()
	return newEnvTB(b, recompute)
}

// BenchmarkRelayThroughput drains a backlog of 50,000 committed rows over
// 1,000 tenants with one relay (default batch and concurrency) and reports
// rows/s.
//
//	go test ./outbox -run XXX -bench RelayThroughput -benchtime 1x -count 3
func BenchmarkRelayThroughput(b *testing.B) { benchmarkRelay(b, 1000) }

// BenchmarkRelayThroughputOneKey: the same backlog, every row of one
// tenant: its rows are decided one by one.
func BenchmarkRelayThroughputOneKey(b *testing.B) { benchmarkRelay(b, 1) }

func benchmarkRelay(b *testing.B, tenants int) {
	e := benchEnv(b)
	ctx := context.Background()
	const rows = 50_000
	r, err := outbox.New(outbox.Config{Pool: e.pool, Coalescer: e.side.co})
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		src := make([][]any, rows)
		for i := range src {
			src[i] = []any{recompute.Type, fmt.Sprintf(`{"tenant_id":%d,"order_id":%d}`, i%tenants, i)}
		}
		if _, err := e.pool.CopyFrom(ctx, pgx.Identifier{"coalesce_outbox"}, []string{"type", "args"}, pgx.CopyFromRows(src)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		n := 0
		for n < rows {
			p, err := r.Once(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if p.Relayed == 0 {
				b.Fatalf("a pass relayed nothing: %+v", p)
			}
			n += p.Relayed
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(rows*b.N)/total.Seconds(), "rows/s")
}

// stamper records when Submit decided each row (by its args' seq).
type stamper struct {
	outbox.Submitter
	mu sync.Mutex
	at map[int]time.Time
}

func (s *stamper) Submit(ctx context.Context, ev debounce.Event) (debounce.Decision, error) {
	d, err := s.Submitter.Submit(ctx, ev)
	now := time.Now()
	var a struct {
		Seq int `json:"seq"`
	}
	_ = json.Unmarshal(ev.Args, &a)
	s.mu.Lock()
	s.at[a.Seq] = now
	s.mu.Unlock()
	return d, err
}

// BenchmarkCommitToDecision commits one row per transaction, 1,000 a
// second for 3 s, with a relay woken by NOTIFY, and reports the time from
// each producer's commit returning to Submit's decision of its row: p50 and
// p99 (and the same to the relay's own commit, which removes the row).
//
//	go test ./outbox -run XXX -bench CommitToDecision -benchtime 1x -count 3
func BenchmarkCommitToDecision(b *testing.B) {
	e := benchEnv(b)
	ctx := context.Background()
	st := &stamper{Submitter: e.side.co, at: map[int]time.Time{}}
	var mu sync.Mutex
	removed := map[int64]time.Time{}
	r, err := outbox.New(outbox.Config{Pool: e.pool, Coalescer: st,
		Hooks: outbox.Hooks{Relayed: func(row outbox.Row, _ debounce.Decision, _ time.Duration) {
			mu.Lock()
			removed[row.ID] = time.Now()
			mu.Unlock()
		}}})
	if err != nil {
		b.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Run(rctx) })
	defer func() { cancel(); wg.Wait() }()
	time.Sleep(200 * time.Millisecond) // LISTEN in place
	var decide, remove []time.Duration
	seq := 0
	for b.Loop() {
		committed := map[int]time.Time{}
		ids := map[int]int64{}
		tick := time.NewTicker(time.Millisecond)
		end := time.Now().Add(3 * time.Second)
		for time.Now().Before(end) {
			<-tick.C
			seq++
			tx, err := e.pool.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			id, err := outbox.Insert(ctx, tx, debounce.Event{Type: recompute.Type,
				Args: fmt.Appendf(nil, `{"tenant_id":%d,"seq":%d}`, seq%100, seq)})
			if err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
			committed[seq], ids[seq] = time.Now(), id
		}
		tick.Stop()
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			n := len(removed)
			mu.Unlock()
			if n >= seq || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		st.mu.Lock()
		mu.Lock()
		for s, at := range committed {
			if d, ok := st.at[s]; ok {
				decide = append(decide, d.Sub(at))
			}
			if d, ok := removed[ids[s]]; ok {
				remove = append(remove, d.Sub(at))
			}
		}
		mu.Unlock()
		st.mu.Unlock()
	}
	slices.Sort(decide)
	slices.Sort(remove)
	q := func(d []time.Duration, p float64) float64 {
		if len(d) == 0 {
			return 0
		}
		return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(q(decide, .5), "p50-ms")
	b.ReportMetric(q(decide, .99), "p99-ms")
	b.ReportMetric(q(remove, .5), "removed-p50-ms")
	b.ReportMetric(q(remove, .99), "removed-p99-ms")
	b.ReportMetric(float64(len(decide))/float64(b.N), "rows")
}
