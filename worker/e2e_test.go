package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/publisher"
	"github.com/coalesce-io/coalesce/worker"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// stack is a producer and a worker side on a real nats-server and the shared
// real redis-server.
type stack struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	pub *publisher.Publisher
	co  *debounce.Coalescer
	rdb redis.UniversalClient
	// prefix is the Coalescer's Redis key prefix: another Coalescer with it
	// sees the same rounds.
	prefix string
}

func newStack(t *testing.T, srv *testenv.NATSServer, policies ...debounce.Policy) *stack {
	t.Helper()
	return newStackWith(t, srv, testenv.SharedRedis(t).Client(t), nil, policies...)
}

// newStackWith builds a stack on rdb, with edit applied to the Coalescer's
// config.
func newStackWith(t *testing.T, srv *testenv.NATSServer, rdb redis.UniversalClient, edit func(*debounce.Config), policies ...debounce.Policy) *stack {
	t.Helper()
	s := &stack{rdb: rdb}
	s.nc, s.js = srv.Connect(t)
	ctx := context.Background()
	var err error
	if s.pub, err = publisher.New(ctx, s.js, nil); err != nil {
		t.Fatal(err)
	}
	cfg := debounce.Config{Redis: s.rdb, Publisher: s.pub, Policies: policies, Prefix: testenv.Prefix(t)}
	if edit != nil {
		edit(&cfg)
	}
	s.prefix = cfg.Prefix
	if s.co, err = debounce.New(cfg); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *stack) submit(t *testing.T, typ, args string) debounce.Decision {
	t.Helper()
	d, err := s.co.Submit(context.Background(), debounce.Event{Type: typ, Args: json.RawMessage(args)})
	if err != nil {
		t.Fatalf("Submit(%s %s): %v", typ, args, err)
	}
	return d
}

// run starts a worker for the types; it stops when the test ends, or
// when the returned function is called.
func (s *stack) run(t *testing.T, h worker.Handler, cfg worker.Config) (stop func()) {
	t.Helper()
	cfg.JetStream, cfg.Coalescer, cfg.Publisher = s.js, s.co, s.pub
	if cfg.AckWait == 0 {
		cfg.AckWait = 2 * time.Second
	}
	if cfg.Backoff == nil {
		cfg.Backoff = []time.Duration{100 * time.Millisecond}
	}
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, h) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// started records every job a handler started, with when.
type started struct {
	mu   sync.Mutex
	jobs []*worker.Job
	at   []time.Time
}

func (s *started) add(j *worker.Job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.jobs = append(s.jobs, j)
	s.at = append(s.at, time.Now())
}

func (s *started) snapshot() ([]*worker.Job, []time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.jobs), slices.Clone(s.at)
}

func (s *started) handler(ctx context.Context, j *worker.Job) error {
	s.add(j)
	return nil
}

// waitFor polls cond until it holds or the limit passes.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// quiet checks that the count stays put for d (nothing more arrives).
func quiet(t *testing.T, d time.Duration, what string, count func() int) {
	t.Helper()
	n := count()
	time.Sleep(d)
	if m := count(); m != n {
		t.Fatalf("%s: %d more arrived after the expected %d", what, m-n, n)
	}
}

// thousandEventsTenKeys: 1,000 events over 10 keys within one window become
// exactly 10 jobs, each after its due time, their summaries counting 1,000.
func thousandEventsTenKeys(t *testing.T, srv *testenv.NATSServer) {
	s := newStack(t, srv, debounce.Policy{Type: "recompute", Mode: debounce.ModeDebounce, Window: 2 * time.Second, KeyFields: []string{"tenant_id"}})
	var got started
	s.run(t, got.handler, worker.Config{Types: []string{"recompute"}, Concurrency: 8})
	var wg sync.WaitGroup
	var scheduled atomic.Int64
	begin := time.Now()
	for w := range 20 {
		wg.Go(func() {
			for i := w; i < 1000; i += 20 {
				d := s.submit(t, "recompute", fmt.Sprintf(`{"tenant_id":%d,"event":%d}`, i%10, i))
				if d.Outcome == debounce.OutcomeScheduled {
					scheduled.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if took := time.Since(begin); took > 2*time.Second {
		t.Logf("submitting took %v, longer than the window: more rounds may open", took)
	}
	if n := scheduled.Load(); n != 10 {
		t.Fatalf("%d events opened a round, want 10", n)
	}
	count := func() int { j, _ := got.snapshot(); return len(j) }
	waitFor(t, 10*time.Second, "10 jobs", func() bool { return count() >= 10 })
	quiet(t, 1500*time.Millisecond, "jobs", count)
	jobs, at := got.snapshot()
	total := 0
	tenants := map[string]bool{}
	for i, j := range jobs {
		total += j.Summary.Events
		tenants[j.Key.String()] = true
		if j.Release != debounce.ReleaseReleased {
			t.Errorf("job %d: release %s", i, j.Release)
		}
		if at[i].Before(j.DueAt) {
			t.Errorf("job %d started %v before its due time", i, j.DueAt.Sub(at[i]))
		}
		if late := at[i].Sub(j.DueAt); late > 3*time.Second {
			t.Errorf("job %d started %v late", i, late)
		}
	}
	if total != 1000 || len(tenants) != 10 {
		t.Errorf("summaries count %d events over %d keys, want 1000 over 10", total, len(tenants))
	}
}

func TestThousandEventsTenKeysEmbedded(t *testing.T) {
	t.Parallel()
	thousandEventsTenKeys(t, testenv.NATS(t))
}

func TestThousandEventsTenKeysProcess(t *testing.T) {
	t.Parallel()
	thousandEventsTenKeys(t, testenv.NATSProcess(t))
}

func TestEventsDuringARunOpenOneNextRound(t *testing.T) {
	t.Parallel()
	s := newStack(t, testenv.NATS(t), debounce.Policy{Type: "sync", Mode: debounce.ModeDebounce, Window: time.Second})
	var got started
	release := make(chan struct{})
	firstStarted := make(chan struct{})
	var calls atomic.Int64
	s.run(t, func(ctx context.Context, j *worker.Job) error {
		got.add(j)
		if calls.Add(1) == 1 {
			close(firstStarted)
			<-release // a long job
		}
		return nil
	}, worker.Config{Types: []string{"sync"}, Concurrency: 4})
	if d := s.submit(t, "sync", `{"doc":1}`); d.Outcome != debounce.OutcomeScheduled {
		t.Fatalf("first event: %s", d.Outcome)
	}
	<-firstStarted
	outcomes := map[debounce.Outcome]int{}
	for range 50 {
		outcomes[s.submit(t, "sync", `{"doc":1}`).Outcome]++
	}
	if outcomes[debounce.OutcomeScheduled] != 1 || outcomes[debounce.OutcomeCoalesced] != 49 {
		t.Fatalf("events during the run: %v, want 1 scheduled and 49 coalesced", outcomes)
	}
	close(release)
	count := func() int { j, _ := got.snapshot(); return len(j) }
	waitFor(t, 8*time.Second, "the next round's job", func() bool { return count() >= 2 })
	quiet(t, 1500*time.Millisecond, "jobs", count)
	jobs, _ := got.snapshot()
	if jobs[0].Summary.Events != 1 || jobs[1].Summary.Events != 50 {
		t.Errorf("summaries: %d then %d events, want 1 then 50", jobs[0].Summary.Events, jobs[1].Summary.Events)
	}
}

func TestExtendFiresByMaxWait(t *testing.T) {
	t.Parallel()
	s := newStack(t, testenv.NATS(t), debounce.Policy{Type: "sync", Mode: debounce.ModeDebounce, Window: time.Second, Extend: true, MaxWait: 3 * time.Second})
	var got started
	s.run(t, got.handler, worker.Config{Types: []string{"sync"}})
	first := time.Now()
	stop := time.After(5 * time.Second)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	extended := 0
loop:
	for {
		select {
		case <-stop:
			break loop
		case <-tick.C:
			if s.submit(t, "sync", `{"doc":1}`).Outcome == debounce.OutcomeExtended {
				extended++
			}
		}
	}
	jobs, at := got.snapshot()
	if len(jobs) == 0 {
		t.Fatal("no job within 5s of continuous events: max wait 3s was not honoured")
	}
	if late := at[0].Sub(first.Add(3 * time.Second)); late > 1500*time.Millisecond {
		t.Errorf("first job started %v after first event + max wait", late)
	}
	if at[0].Before(first.Add(3 * time.Second)) {
		t.Errorf("first job started before max wait although events kept coming: %v after the first", at[0].Sub(first))
	}
	if extended == 0 || jobs[0].Summary.Events < 10 {
		t.Errorf("extended %d times; first job had %d events", extended, jobs[0].Summary.Events)
	}
}

func TestPayloadsEndToEnd(t *testing.T) {
	t.Parallel()
	s := newStack(t, testenv.NATS(t),
		debounce.Policy{Type: "last", Mode: debounce.ModeDebounce, Window: time.Second, Payload: debounce.PayloadLast, KeyFields: []string{"doc"}},
		debounce.Policy{Type: "acc", Mode: debounce.ModeDebounce, Window: time.Second, Payload: debounce.PayloadAccumulate, ItemField: "id", KeyFields: []string{"tenant"}},
		debounce.Policy{Type: "full", Mode: debounce.ModeDebounce, Window: 20 * time.Second, Payload: debounce.PayloadAccumulate, MaxItems: 5, KeyFields: []string{"tenant"}},
	)
	var got started
	s.run(t, got.handler, worker.Config{Types: []string{"last", "acc", "full"}})
	// Reaching max items fires the round at once, long before its window ends.
	filled := time.Now()
	for i := range 5 {
		s.submit(t, "full", fmt.Sprintf(`{"tenant":1,"id":%d}`, i))
	}
	waitFor(t, 3*time.Second, "the full round's job", func() bool { return len(mustSnapshot(&got)) == 1 })
	if j := mustSnapshot(&got)[0]; len(j.Summary.Items) != 5 || time.Since(filled) > 3*time.Second {
		t.Fatalf("full round: %d items after %v", len(j.Summary.Items), time.Since(filled))
	}
	for i := range 20 {
		s.submit(t, "last", fmt.Sprintf(`{"doc":1,"rev":%d}`, i))
		s.submit(t, "acc", fmt.Sprintf(`{"tenant":1,"id":%d}`, i%7))
	}
	count := func() int { j, _ := got.snapshot(); return len(j) }
	waitFor(t, 8*time.Second, "2 more jobs", func() bool { return count() >= 3 })
	quiet(t, time.Second, "jobs", count)
	for _, j := range mustSnapshot(&got) {
		switch j.Type {
		case "last":
			if string(j.Summary.Payload) != `{"doc":1,"rev":19}` {
				t.Errorf("last: payload %s", j.Summary.Payload)
			}
		case "acc":
			items := make([]string, len(j.Summary.Items))
			for i, it := range j.Summary.Items {
				items[i] = string(it)
			}
			slices.Sort(items)
			if fmt.Sprint(items) != "[0 1 2 3 4 5 6]" || j.Summary.Events != 20 {
				t.Errorf("accumulate: items %v from %d events", items, j.Summary.Events)
			}
		}
	}
}

func mustSnapshot(s *started) []*worker.Job { j, _ := s.snapshot(); return j }

func TestDedupAndThrottleEndToEnd(t *testing.T) {
	t.Parallel()
	s := newStack(t, testenv.NATS(t),
		debounce.Policy{Type: "start", Mode: debounce.ModeDedup},
		debounce.Policy{Type: "success", Mode: debounce.ModeDedup, Until: debounce.UntilSuccess},
		debounce.Policy{Type: "expiry", Mode: debounce.ModeDedup, Until: debounce.UntilExpiry, TTL: time.Hour},
		debounce.Policy{Type: "throttle", Mode: debounce.ModeThrottle, Window: 2 * time.Second, Trailing: true},
	)
	// Before any worker runs: duplicates of pending jobs are dropped.
	if d1, d2 := s.submit(t, "start", `{"c":1}`), s.submit(t, "start", `{"c":1}`); d1.Outcome != debounce.OutcomePublished || d2.Outcome != debounce.OutcomeDuplicate {
		t.Errorf("start: %s %s", d1.Outcome, d2.Outcome)
	}
	var got started
	var failOnce atomic.Bool
	failOnce.Store(true)
	gate := make(chan struct{})
	s.run(t, func(ctx context.Context, j *worker.Job) error {
		got.add(j)
		if j.Type == "success" && failOnce.CompareAndSwap(true, false) {
			<-gate
			return fmt.Errorf("first run fails")
		}
		return nil
	}, worker.Config{Types: []string{"start", "success", "expiry", "throttle"}})

	count := func(typ string) func() int {
		return func() int {
			n := 0
			for _, j := range mustSnapshot(&got) {
				if j.Type == typ {
					n++
				}
			}
			return n
		}
	}
	// until start: once the job started, the same event is new work.
	waitFor(t, 5*time.Second, "dedup start job", func() bool { return count("start")() == 1 })
	waitFor(t, 5*time.Second, "new work after the start", func() bool {
		return s.submit(t, "start", `{"c":1}`).Outcome == debounce.OutcomePublished
	})
	// until success: duplicates stay out while the first run fails and retries.
	s.submit(t, "success", `{"c":1}`)
	waitFor(t, 5*time.Second, "dedup success job", func() bool { return count("success")() == 1 })
	if d := s.submit(t, "success", `{"c":1}`); d.Outcome != debounce.OutcomeDuplicate {
		t.Errorf("success: during the failing run %s, want duplicate", d.Outcome)
	}
	close(gate)
	waitFor(t, 5*time.Second, "the retry", func() bool { return count("success")() == 2 })
	waitFor(t, 5*time.Second, "release after success", func() bool {
		return s.submit(t, "success", `{"c":1}`).Outcome == debounce.OutcomePublished
	})
	// until expiry: the job ran, duplicates are still dropped.
	s.submit(t, "expiry", `{"c":1}`)
	waitFor(t, 5*time.Second, "dedup expiry job", func() bool { return count("expiry")() == 1 })
	if d := s.submit(t, "expiry", `{"c":1}`); d.Outcome != debounce.OutcomeDuplicate {
		t.Errorf("expiry: after the job %s, want duplicate", d.Outcome)
	}
	// throttle: a leading job now, the rest of the window in one trailing job at its end.
	begin := time.Now()
	outcomes := map[debounce.Outcome]int{}
	for range 10 {
		outcomes[s.submit(t, "throttle", `{"c":1}`).Outcome]++
	}
	if outcomes[debounce.OutcomePublished] != 1 || outcomes[debounce.OutcomeScheduled] != 1 || outcomes[debounce.OutcomeCoalesced] != 8 {
		t.Errorf("throttle outcomes %v", outcomes)
	}
	waitFor(t, 6*time.Second, "leading and trailing jobs", func() bool { return count("throttle")() == 2 })
	for _, j := range mustSnapshot(&got) {
		if j.Type == "throttle" && !j.Immediate() {
			if j.Summary.Events != 9 || j.DueAt.Sub(begin) > 2500*time.Millisecond {
				t.Errorf("trailing job: %d events, due %v after the first event", j.Summary.Events, j.DueAt.Sub(begin))
			}
		}
	}
	quiet(t, time.Second, "throttle jobs", count("throttle"))
}

// TestKilledWorkerGuardKeepsSideEffectToOne: a worker whose connection dies
// after the side effect but before the ack gets the job redelivered to
// another worker; the run-once guard keeps the side effect to one.
func TestKilledWorkerGuardKeepsSideEffectToOne(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	s := newStack(t, srv, debounce.Policy{Type: "notify", Mode: debounce.ModeDedup, KeyFields: []string{"comment"}})
	guards := map[string]worker.GuardConfig{"notify": {Redis: s.rdb, Prefix: testenv.Prefix(t) + "g", ClaimTTL: 3 * time.Second}}
	var sideEffects atomic.Int64
	var results sync.Map
	hooks := worker.Hooks{Guard: func(_ string, r worker.GuardResult) {
		n, _ := results.LoadOrStore(r, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}}

	// Worker A: performs the side effect, then its connection dies before it acks.
	ncA, jsA := srv.Connect(t, nats.MaxReconnects(0))
	wA, err := worker.New(worker.Config{JetStream: jsA, Coalescer: s.co, Publisher: s.pub, Types: []string{"notify"},
		AckWait: time.Second, Guards: guards, Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		_ = wA.Run(ctxA, func(ctx context.Context, j *worker.Job) error {
			sideEffects.Add(1)
			ncA.Close() // "killed": the ack that follows never reaches the server
			return nil
		})
	}()
	if d := s.submit(t, "notify", `{"comment":7}`); d.Outcome != debounce.OutcomePublished {
		t.Fatalf("submit: %s", d.Outcome)
	}
	waitFor(t, 5*time.Second, "worker A's side effect", func() bool { return sideEffects.Load() == 1 })
	cancelA()
	<-aDone
	// Worker A's Finish left a done marker, which would answer the
	// redelivery by itself: remove it, as a worker killed before Finish
	// leaves none, so that the guard is what keeps the side effect to one.
	iter := s.rdb.Scan(context.Background(), 0, s.prefix+"{*", 100).Iterator()
	for iter.Next(context.Background()) {
		if k := iter.Val(); strings.Contains(k[len(s.prefix):], "}d") {
			s.rdb.Del(context.Background(), k)
		}
	}

	// Worker B gets the redelivery after the ack wait, finds the job done.
	var bRan atomic.Int64
	s.run(t, func(ctx context.Context, j *worker.Job) error {
		bRan.Add(1)
		sideEffects.Add(1)
		return nil
	}, worker.Config{Types: []string{"notify"}, AckWait: time.Second, Guards: guards, Hooks: hooks})
	waitFor(t, 8*time.Second, "the redelivery to be acknowledged as done", func() bool {
		n, ok := results.Load(worker.GuardDuplicateDone)
		return ok && n.(*atomic.Int64).Load() >= 1
	})
	if n := sideEffects.Load(); n != 1 || bRan.Load() != 0 {
		t.Errorf("side effects %d (worker B ran %d), want 1", n, bRan.Load())
	}
	// The stream is empty: the redelivery was acknowledged.
	waitFor(t, 5*time.Second, "an empty stream", func() bool {
		info, err := s.js.Stream(context.Background(), publisher.DefaultStream)
		if err != nil {
			return false
		}
		st, _ := info.Info(context.Background())
		return st.State.Msgs == 0
	})
}

func TestRetriesThenDeadLetter(t *testing.T) {
	t.Parallel()
	s := newStack(t, testenv.NATS(t), debounce.Policy{Type: "flaky", Mode: debounce.ModeDebounce, Window: time.Second, Payload: debounce.PayloadLast, KeyFields: []string{"k"}})
	var attempts []int
	var summaries []string
	var mu sync.Mutex
	s.run(t, func(ctx context.Context, j *worker.Job) error {
		mu.Lock()
		attempts = append(attempts, j.Attempt)
		summaries = append(summaries, fmt.Sprintf("%s %d %s", j.Release, j.Summary.Events, j.Summary.Payload))
		mu.Unlock()
		return fmt.Errorf("boom %d", j.Attempt)
	}, worker.Config{Types: []string{"flaky"}, MaxDeliver: 3, Backoff: []time.Duration{50 * time.Millisecond}})
	dead, err := s.js.CreateOrUpdateConsumer(context.Background(), publisher.DefaultStream, jetstream.ConsumerConfig{
		Durable: "dead", FilterSubject: s.pub.Subjects().Dead("flaky"), AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.submit(t, "flaky", `{"k":1,"v":1}`)
	s.submit(t, "flaky", `{"k":1,"v":2}`)
	msgs, err := dead.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got jetstream.Msg
	for m := range msgs.Messages() {
		got = m
	}
	if got == nil {
		t.Fatal("no dead letter within 10s")
	}
	if sum := got.Headers().Get(worker.HeaderSummary); !strings.Contains(sum, `"events":2`) || !strings.Contains(sum, `"payload":{"k":1,"v":2}`) {
		t.Errorf("dead letter summary %q", sum)
	}
	if e := got.Headers().Get(worker.HeaderError); e != "boom 3" || got.Headers().Get(publisher.HeaderType) != "flaky" ||
		got.Headers().Get(worker.HeaderErrorCode) != worker.DeadAttempts {
		t.Errorf("dead letter headers %v", got.Headers())
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(attempts) != "[1 2 3]" {
		t.Errorf("attempts %v, want [1 2 3]", attempts)
	}
	// Every retry gets the summary the first delivery took.
	want := []string{`released 2 {"k":1,"v":2}`, `retry 2 {"k":1,"v":2}`, `retry 2 {"k":1,"v":2}`}
	if !slices.Equal(summaries, want) {
		t.Errorf("summaries %q, want %q", summaries, want)
	}
}

// A job delivered more often than MaxDeliver without ever reaching its round
// (its deliveries died unstarted, as in a killed worker's prefetch buffer)
// still runs: only deliveries that reached the round are attempts.
func TestUnstartedDeliveriesAreNoAttempts(t *testing.T) {
	t.Parallel()
	s := newStack(t, testenv.NATS(t), debounce.Policy{Type: "unlucky", Mode: debounce.ModeDebounce, Window: time.Second})
	cfg := worker.Config{JetStream: s.js, Coalescer: s.co, Publisher: s.pub, Types: []string{"unlucky"}, MaxDeliver: 2, AckWait: 300 * time.Millisecond}
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cons, err := w.Consumer(ctx, "unlucky")
	if err != nil {
		t.Fatal(err)
	}
	d := s.submit(t, "unlucky", `{"n":1}`)
	// Take the job four times and let each delivery's ack wait run out.
	for i := range 4 {
		msgs, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range msgs.Messages() {
			n++
			if md, _ := m.Metadata(); md == nil || int(md.NumDelivered) != i+1 {
				t.Fatalf("delivery %d: metadata %+v", i+1, md)
			}
		}
		if n != 1 {
			t.Fatalf("delivery %d: %d messages", i+1, n)
		}
	}
	var got started
	s.run(t, got.handler, cfg)
	waitFor(t, 5*time.Second, "the job to run", func() bool { j, _ := got.snapshot(); return len(j) == 1 })
	jobs, _ := got.snapshot()
	if j := jobs[0]; j.Attempt != 1 || j.Release != debounce.ReleaseReleased || j.Token != d.Round {
		t.Errorf("job: attempt %d, release %s, round %s; want attempt 1, released, round %s", j.Attempt, j.Release, j.Token, d.Round)
	}
}
