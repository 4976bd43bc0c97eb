package effect_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/effect"
	"github.com/coalesce-io/coalesce/internal/admin"
	"github.com/coalesce-io/coalesce/internal/pgtest"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/outbox"
	"github.com/coalesce-io/coalesce/publisher"
	"github.com/coalesce-io/coalesce/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func migrated(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, _ := pgtest.Pool(t)
	if err := outbox.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `CREATE TABLE charges (invoice text, amount int)`); err != nil {
		t.Fatal(err)
	}
	return pool
}

func charges(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM charges`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func charge(invoice string) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO charges VALUES ($1, 100)`, invoice)
		return err
	}
}

func TestOnceRunsAnEffectOnce(t *testing.T) {
	t.Parallel()
	pool := migrated(t)
	ctx := context.Background()
	rec := effect.Record{Key: "charge:invoice-1", JobType: "charge", Round: "00000000000000aa", Result: "receipt-1"}
	// A failed effect records nothing: the next attempt runs.
	if _, err := effect.Once(ctx, pool, rec, func(context.Context, pgx.Tx) error { return errors.New("provider down") }); err == nil {
		t.Fatal("the effect's error was not returned")
	}
	if _, found, _ := effect.Lookup(ctx, pool, rec.Key); found {
		t.Fatal("a failed effect left a record")
	}
	// Eight at once: exactly one runs (the others wait on the key, then find it).
	var ran atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			ok, err := effect.Once(ctx, pool, rec, func(ctx context.Context, tx pgx.Tx) error {
				time.Sleep(20 * time.Millisecond)
				return charge("invoice-1")(ctx, tx)
			})
			if err != nil {
				t.Error(err)
			}
			if ok {
				ran.Add(1)
			}
		})
	}
	wg.Wait()
	if ran.Load() != 1 || charges(t, pool) != 1 {
		t.Fatalf("ran %d times, %d charges: want 1", ran.Load(), charges(t, pool))
	}
	got, found, err := effect.Lookup(ctx, pool, rec.Key)
	if err != nil || !found || got.JobType != "charge" || got.Round != rec.Round || got.Result != "receipt-1" || got.CreatedAt.IsZero() {
		t.Fatalf("lookup: %+v %v %v", got, found, err)
	}
	// The same contract in plain SQL (what a worker in another language runs).
	var k string
	err = pool.QueryRow(ctx, `INSERT INTO coalesce_effects (effect_key, job_type, round) VALUES ($1, $2, $3)
		ON CONFLICT (effect_key) DO NOTHING RETURNING effect_key`, rec.Key, "charge", "").Scan(&k)
	if !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("the SQL contract inserted a second record (%q, %v)", k, err)
	}
}

func TestClaimRefusesBadKeys(t *testing.T) {
	t.Parallel()
	pool := migrated(t)
	ctx := context.Background()
	for _, key := range []string{"", strings.Repeat("k", effect.MaxKeyLen+1), "a\x00b", "\xff"} {
		_, err := effect.Once(ctx, pool, effect.Record{Key: key}, charge("x"))
		if !errors.Is(err, effect.ErrInvalidKey) || !strings.Contains(err.Error(), "key:") {
			t.Errorf("key %q: err %v, want ErrInvalidKey naming the key", key, err)
		}
	}
	if effect.KeyOf(&worker.Job{}) != "" {
		t.Error("a bypassed job (no round) got an effect key")
	}
}

// The effect record holds where the Redis guard forgot: a worker dies
// between the effect's commit and its ack while its claim is lost, and a
// job is replayed from the dead letters after Redis lost every key.
func TestEffectRecordAfterRedisForgets(t *testing.T) {
	t.Parallel()
	pool := migrated(t)
	ctx := context.Background()
	rs := testenv.NewRedis(t)
	rdb := rs.Client(t)
	ns := testenv.NATS(t)
	_, js := ns.Connect(t)
	pub, err := publisher.New(ctx, js, &publisher.Config{Stream: "EFFECT", Prefix: "eff"})
	if err != nil {
		t.Fatal(err)
	}
	policy := debounce.Policy{Type: "charge", Mode: debounce.ModeDedup, KeyFields: []string{"invoice"}}
	co, err := debounce.New(debounce.Config{Redis: rdb, Publisher: pub, Policies: []debounce.Policy{policy}, Prefix: "eff"})
	if err != nil {
		t.Fatal(err)
	}
	const guardPrefix = "effg"
	var runs, effects sync.Map // invoice -> *atomic.Int64
	count := func(m *sync.Map, k string) *atomic.Int64 {
		v, _ := m.LoadOrStore(k, new(atomic.Int64))
		return v.(*atomic.Int64)
	}
	forgetGuard := func() {
		keys, err := rdb.Keys(ctx, guardPrefix+"*").Result()
		if err != nil {
			t.Error(err)
			return
		}
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	}
	w, err := worker.New(worker.Config{JetStream: js, Coalescer: co, Publisher: pub, Types: []string{"charge"},
		Backoff: []time.Duration{100 * time.Millisecond}, MaxDeliver: 5,
		Guards: map[string]worker.GuardConfig{"charge": {Redis: rdb, Prefix: guardPrefix}}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = w.Run(wctx, func(ctx context.Context, job *worker.Job) error {
			invoice := strings.Trim(string(job.Args[len(`{"invoice":`):len(job.Args)-1]), `"`)
			run := count(&runs, invoice).Add(1)
			ran, err := effect.Once(ctx, pool, effect.RecordOf(job), charge(invoice))
			if err != nil {
				return err
			}
			if ran {
				count(&effects, invoice).Add(1)
			}
			switch {
			case invoice == "crash" && run == 1:
				// The charge is committed; the worker "dies" before its ack,
				// and its Redis claim is gone (expired, Redis restarted).
				forgetGuard()
				return errors.New("worker died after the commit")
			case invoice == "dead" && run == 1:
				return worker.Permanent(errors.New("the receipt printer is on fire"))
			}
			return nil
		})
	})
	t.Cleanup(func() { stop(); wg.Wait() })

	for _, inv := range []string{"crash", "dead"} {
		if _, err := co.Submit(ctx, debounce.Event{Type: "charge", Args: []byte(fmt.Sprintf(`{"invoice":%q}`, inv))}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the crashed job's retry", func() bool { return count(&runs, "crash").Load() >= 2 })
	dead := admin.Dead{JS: js, Stream: pub.Stream(), Subjects: pub.Subjects()}
	var letters []admin.DeadLetter
	waitFor(t, "the dead letter", func() bool {
		letters, err = dead.List(ctx, "charge", "", 10)
		return err == nil && len(letters) == 1
	})
	// Days later, after Redis lost everything: the dead letter is replayed.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := dead.Replay(ctx, letters[0].Seq); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replay", func() bool { return count(&runs, "dead").Load() >= 2 })
	time.Sleep(300 * time.Millisecond) // nothing more should run
	for _, inv := range []string{"crash", "dead"} {
		if n := count(&effects, inv).Load(); n != 1 {
			t.Errorf("invoice %s: the effect ran %d times over %d runs, want once", inv, n, count(&runs, inv).Load())
		}
	}
	if n := charges(t, pool); n != 2 {
		t.Errorf("%d charges for 2 invoices", n)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 15 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The effect key other languages build from the job document (--exec's
// stdin, --post's body): "<type>:<id>", the same as KeyOf; for a round's
// job "<type>:<key>.<round>" as before the id existed.
func TestKeyOfMatchesTheJobDocument(t *testing.T) {
	t.Parallel()
	job := &worker.Job{}
	job.Type, job.Key, job.Token = "charge_invoice", debounce.ExplicitKey("charge_invoice", "INV-42"), 0x6895ae6e5cf2bd
	doc := job.Document()
	if got, want := effect.KeyOf(job), doc.Type+":"+doc.ID; got != want || want != doc.Type+":"+doc.Key+"."+doc.Round {
		t.Fatalf("KeyOf %q, from the job document %q", got, want)
	}
	if r := effect.RecordOf(job); r.Key != effect.KeyOf(job) || r.JobType != doc.Type || r.Round != doc.Round {
		t.Fatalf("RecordOf %+v", r)
	}
	bypassed := &worker.Job{}
	bypassed.Type, bypassed.Key, bypassed.Bypass = job.Type, job.Key, "_00000000000000aa"
	doc = bypassed.Document()
	if got, want := effect.KeyOf(bypassed), doc.Type+":"+doc.ID; got != want || doc.ID != doc.Key+"._00000000000000aa" {
		t.Fatalf("a bypassed job: KeyOf %q, from the job document %q", got, want)
	}
}

// TestBypassedJobsEachRecordTheirEffect: jobs published without a
// reservation (Redis down, fail open) each run their effect once through
// effect.Once(RecordOf(job)), a retry of one of them does not run it again,
// and neither does its replay from the dead letters. On 47bb46e RecordOf
// had no key for a bypassed job and Once refused every one of them.
func TestBypassedJobsEachRecordTheirEffect(t *testing.T) {
	t.Parallel()
	pool := migrated(t)
	ctx := context.Background()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	down := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), DisableIdentity: true, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = down.Close() })
	_, js := testenv.NATS(t).Connect(t)
	pub, err := publisher.New(ctx, js, &publisher.Config{Stream: "BYPASS", Prefix: "byp"})
	if err != nil {
		t.Fatal(err)
	}
	policy := debounce.Policy{Type: "charge", Mode: debounce.ModeDedup, KeyFields: []string{"customer"}}
	co, err := debounce.New(debounce.Config{Redis: down, Publisher: pub, Policies: []debounce.Policy{policy}, Prefix: "byp"})
	if err != nil {
		t.Fatal(err)
	}
	var runs, effects, errs sync.Map // invoice -> *atomic.Int64
	count := func(m *sync.Map, k string) *atomic.Int64 {
		v, _ := m.LoadOrStore(k, new(atomic.Int64))
		return v.(*atomic.Int64)
	}
	w, err := worker.New(worker.Config{JetStream: js, Coalescer: co, Publisher: pub, Types: []string{"charge"},
		Backoff: []time.Duration{100 * time.Millisecond}, MaxDeliver: 3})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = w.Run(wctx, func(ctx context.Context, job *worker.Job) error {
			var args struct{ Invoice string }
			_ = json.Unmarshal(job.Args, &args)
			run := count(&runs, args.Invoice).Add(1)
			ran, err := effect.Once(ctx, pool, effect.RecordOf(job), charge(args.Invoice))
			if err != nil {
				count(&errs, args.Invoice).Add(1)
				return err
			}
			if ran {
				count(&effects, args.Invoice).Add(1)
			}
			switch {
			case args.Invoice == "retried" && run == 1:
				return errors.New("the worker died after the commit")
			case args.Invoice == "dead" && run == 1:
				return worker.Permanent(errors.New("the receipt printer is on fire"))
			}
			return nil
		})
	})
	t.Cleanup(func() { stop(); wg.Wait() })
	// One customer: every job has the same round key.
	for _, inv := range []string{"a", "b", "retried", "dead"} {
		d, err := co.Submit(ctx, debounce.Event{Type: "charge", Args: []byte(fmt.Sprintf(`{"customer":7,"invoice":%q}`, inv))})
		if err != nil || d.Outcome != debounce.OutcomeBypassed {
			t.Fatalf("submit %s: %+v %v, want bypassed", inv, d, err)
		}
	}
	waitFor(t, "every job's effect", func() bool {
		for _, inv := range []string{"a", "b", "retried", "dead"} {
			if count(&effects, inv).Load() == 0 {
				return false
			}
		}
		return count(&runs, "retried").Load() >= 2
	})
	dead := admin.Dead{JS: js, Stream: pub.Stream(), Subjects: pub.Subjects()}
	var letters []admin.DeadLetter
	waitFor(t, "the dead letter", func() bool {
		letters, err = dead.List(ctx, "charge", "", 10)
		return err == nil && len(letters) == 1
	})
	if _, err := dead.Replay(ctx, letters[0].Seq); err != nil {
		t.Fatalf("replay of a bypassed job's dead letter: %v", err)
	}
	waitFor(t, "the replay", func() bool { return count(&runs, "dead").Load() >= 2 })
	time.Sleep(300 * time.Millisecond) // nothing more should run
	for _, inv := range []string{"a", "b", "retried", "dead"} {
		if n := count(&effects, inv).Load(); n != 1 || count(&errs, inv).Load() != 0 {
			t.Errorf("invoice %s: the effect ran %d times over %d runs (%d errors), want once", inv, n, count(&runs, inv).Load(), count(&errs, inv).Load())
		}
	}
	if n := charges(t, pool); n != 4 {
		t.Errorf("%d charges for 4 invoices", n)
	}
}
