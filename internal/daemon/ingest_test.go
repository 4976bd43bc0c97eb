package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/chaos"
	"github.com/coalesce-io/coalesce/internal/daemon"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/publisher"
)

func TestNATSIngest(t *testing.T) {
	t.Parallel()
	nc, js, pub := natsWithPublisher(t)
	ctx := context.Background()
	rdb := testenv.SharedRedis(t).Client(t)
	co, err := debounce.New(debounce.Config{Redis: rdb, Publisher: pub, Policies: testPolicies, Prefix: testenv.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	in, err := daemon.StartIngest(ctx, daemon.IngestConfig{Conn: nc, JetStream: js, Coalescer: co, Prefix: "co", Requests: true, Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Stop()

	// Request/reply: the type comes from the subject.
	var d debounce.Decision
	for i, want := range []debounce.Outcome{debounce.OutcomeScheduled, debounce.OutcomeCoalesced} {
		msg, err := nc.Request("co.events.recompute", []byte(`{"args":{"tenant_id":5,"n":`+string(rune('0'+i))+`}}`), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(msg.Data, &d); err != nil || d.Outcome != want {
			t.Fatalf("reply %d: %s, want %s", i, msg.Data, want)
		}
	}
	msg, err := nc.Request("co.events.recompute", []byte(`{"args":{"n":1}}`), 5*time.Second)
	if err != nil || !json.Valid(msg.Data) || string(msg.Data) == "" || !contains(msg.Data, `"code":"missing_key_field"`) {
		t.Fatalf("bad event reply: %s %v", msg.Data, err)
	}
	msg, err = nc.Request("co.events.recompute", []byte(`{"type":"notify","args":{}}`), 5*time.Second)
	if err != nil || !contains(msg.Data, `"code":"invalid_type"`) {
		t.Fatalf("type mismatch reply: %s %v", msg.Data, err)
	}

	// Durable intake: stored first, decided by the daemon, acked.
	if _, err := js.Publish(ctx, "co.ingest.recompute", []byte(`{"args":{"tenant_id":5,"n":9}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "co.ingest.recompute", []byte(`not json`)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, found, err := co.Inspect(ctx, "recompute", d.Key)
		if err != nil {
			t.Fatal(err)
		}
		if found && r.Events == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stored event was not decided: %+v", r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Both stored messages leave the work-queue stream (decided, or dropped as undecidable).
	deadline = time.Now().Add(5 * time.Second)
	for {
		s, err := js.Stream(ctx, daemon.DefaultIngestStream)
		if err != nil {
			t.Fatal(err)
		}
		info, _ := s.Info(ctx)
		if info.State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d messages left in the intake stream", info.State.Msgs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func contains(b []byte, s string) bool { return bytes.Contains(b, []byte(s)) }

func TestCronReplicasOpenOneRound(t *testing.T) {
	t.Parallel()
	rdb := testenv.SharedRedis(t).Client(t)
	prefix := testenv.Prefix(t)
	var published []debounce.Job
	pubf := debounce.PublisherFunc(func(_ context.Context, j debounce.Job) error { published = append(published, j); return nil })
	policy := []debounce.Policy{{Type: "nightly", Mode: debounce.ModeDedup}}
	rule := daemon.CronRule{Name: "nightly", Schedule: "@every 1s", Event: debounce.Event{Type: "nightly", Args: json.RawMessage(`{}`)}}
	var crons []*daemon.Cron
	var co *debounce.Coalescer
	for range 3 { // three daemon replicas
		var err error
		co, err = debounce.New(debounce.Config{Redis: rdb, Publisher: pubf, Policies: policy, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		cr, err := daemon.StartCron([]daemon.CronRule{rule}, co, rdb, prefix, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		crons = append(crons, cr)
	}
	time.Sleep(2500 * time.Millisecond) // two or three ticks
	for _, cr := range crons {
		cr.Stop()
	}
	keys, err := rdb.Keys(context.Background(), prefix+"cron:nightly:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Each tick was submitted once, by one of the three replicas: the dedup
	// round counts one event per tick.
	key, _ := co.RoundKeyOf(rule.Event)
	r, found, err := co.Inspect(context.Background(), "nightly", key)
	if err != nil || !found || len(keys) < 2 || r.Events != len(keys) || len(published) != 1 {
		t.Fatalf("%d ticks claimed, round %+v (found %v, %v), %d jobs; want one event per tick and one job", len(keys), r, found, err, len(published))
	}
	if _, err := daemon.StartCron([]daemon.CronRule{{Name: "bad", Schedule: "every minute"}}, nil, rdb, prefix, nil, nil); err == nil {
		t.Error("a bad schedule was accepted")
	}
}

// TestDurableIngestSurvivesItsConsumerGoing: the durable intake keeps
// deciding stored events after its consumer went (deleted, a stream leader
// lost): it used to stop reading for good on the iterator's error.
func TestDurableIngestSurvivesItsConsumerGoing(t *testing.T) {
	t.Parallel()
	nc, js, pub := natsWithPublisher(t)
	ctx := context.Background()
	co, err := debounce.New(debounce.Config{Redis: testenv.SharedRedis(t).Client(t), Publisher: pub, Policies: testPolicies, Prefix: testenv.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	in, err := daemon.StartIngest(ctx, daemon.IngestConfig{Conn: nc, JetStream: js, Coalescer: co, Prefix: "co", Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Stop()
	if err := js.DeleteConsumer(ctx, daemon.DefaultIngestStream, "coalesce-ingest"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "co.ingest.recompute", []byte(`{"args":{"tenant_id":77}}`)); err != nil {
		t.Fatal(err)
	}
	waitForRound(t, co, "recompute", `{"tenant_id":77}`, "the event stored after the consumer went was never decided")
}

// TestBadTraceparentHeaderOverNATS: a traceparent header that is not W3C is
// ignored, as HTTP ignores it, on both NATS paths. It was copied into the
// event unchecked: Submit refused the event, request/reply answered
// invalid_event, and the durable intake discarded a stored event for a
// header.
func TestBadTraceparentHeaderOverNATS(t *testing.T) {
	t.Parallel()
	nc, js, pub := natsWithPublisher(t)
	ctx := context.Background()
	co, err := debounce.New(debounce.Config{Redis: testenv.SharedRedis(t).Client(t), Publisher: pub, Policies: testPolicies, Prefix: testenv.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	in, err := daemon.StartIngest(ctx, daemon.IngestConfig{Conn: nc, JetStream: js, Coalescer: co, Prefix: "co", Requests: true, Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Stop()
	for _, tp := range []string{"not-a-trace", "00-" + strings.Repeat("a", 300), "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01"} {
		m := nats.NewMsg("co.events.recompute")
		m.Header.Set("traceparent", tp)
		m.Data = []byte(`{"args":{"tenant_id":31}}`)
		reply, err := nc.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(reply.Data, []byte(`"outcome":`)) {
			t.Errorf("request with traceparent %.20q: %s, want a decision", tp, reply.Data)
		}
	}
	m := nats.NewMsg("co.ingest.recompute")
	m.Header.Set("traceparent", "not-a-trace")
	m.Data = []byte(`{"args":{"tenant_id":32}}`)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	key, _ := co.RoundKeyOf(debounce.Event{Type: "recompute", Args: json.RawMessage(`{"tenant_id":32}`)})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, found, _ := co.Inspect(ctx, "recompute", key); found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the stored event with a bad traceparent header was never decided")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestIngestStreamFollowsTheSettings: the durable intake stream takes
// nats.replicas and nats.storage, and an operator's R3 intake stream is not
// scaled down to the configured R1 at start (it was: the stream was
// provisioned with a fixed R1 file configuration).
func TestIngestStreamFollowsTheSettings(t *testing.T) {
	t.Parallel()
	c := testenv.NewNATSCluster(t, 3)
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pub, err := publisher.New(ctx, js, &publisher.Config{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	co, err := debounce.New(debounce.Config{Redis: testenv.SharedRedis(t).Client(t), Publisher: pub, Policies: testPolicies, Prefix: testenv.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	start := func(stream string, replicas int, storage jetstream.StorageType) jetstream.StreamConfig {
		t.Helper()
		in, err := daemon.StartIngest(ctx, daemon.IngestConfig{Conn: nc, JetStream: js, Coalescer: co, Prefix: "co", Durable: true,
			Stream: stream, Replicas: replicas, Storage: storage})
		if err != nil {
			t.Fatal(err)
		}
		in.Stop()
		s, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		parked, err := js.Stream(ctx, daemon.ParkStream(stream))
		if err != nil {
			t.Fatal(err)
		}
		if p := parked.CachedInfo().Config; p.Replicas < max(1, replicas) || p.Storage != storage {
			t.Errorf("replicas %d, storage %v: the parking stream has %d replicas, %v storage", replicas, storage, p.Replicas, p.Storage)
		}
		return s.CachedInfo().Config
	}
	if got := start("INGEST_R3", 3, jetstream.MemoryStorage); got.Replicas != 3 || got.Storage != jetstream.MemoryStorage {
		t.Errorf("replicas 3, memory: the stream has %d replicas, %v storage", got.Replicas, got.Storage)
	}
	// An operator's R3 stream, started with the default R1.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "INGEST_OPS", Subjects: []string{"co.ingest.>"}, Retention: jetstream.WorkQueuePolicy, Replicas: 3}); err == nil {
		t.Fatal("two streams may not share co.ingest.>: the test is wrong")
	}
	for _, name := range []string{"INGEST_R3", daemon.ParkStream("INGEST_R3")} {
		if err := js.DeleteStream(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "INGEST_OPS", Subjects: []string{"co.ingest.>"}, Retention: jetstream.WorkQueuePolicy, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	if got := start("INGEST_OPS", 0, 0); got.Replicas != 3 {
		t.Errorf("an R3 intake stream started with the default replicas: %d replicas now", got.Replicas)
	}
}

// TestIngestDeadLettersWhatItCannotDecide: a stored event that can never be
// decided (not JSON) is not dropped with a log line: it goes to
// <prefix>.dead._ingest.<type> with the error code and message, and is
// counted. One of a type with no policy (yet: a rolling deploy) waits for
// the policy instead: it stays in the intake stream and is decided once a
// daemon that has the policy reads it. Both were terminated at once.
func TestIngestDeadLettersWhatItCannotDecide(t *testing.T) {
	t.Parallel()
	nc, js, pub := natsWithPublisher(t)
	ctx := context.Background()
	rdb := testenv.SharedRedis(t).Client(t)
	prefix := testenv.Prefix(t)
	co, err := debounce.New(debounce.Config{Redis: rdb, Publisher: pub, Policies: testPolicies, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	m := daemon.NewMetrics(testTypes()...)
	in, err := daemon.StartIngest(ctx, daemon.IngestConfig{Conn: nc, JetStream: js, Coalescer: co, Prefix: "co", Durable: true, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := nc.SubscribeSync("co.dead._ingest.>")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "co.ingest.recompute", []byte(`not json`)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "co.ingest.later", []byte(`{"args":{"n":1}}`)); err != nil {
		t.Fatal(err)
	}
	msg, err := dead.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no dead letter for a stored event that is not JSON: %v", err)
	}
	if msg.Subject != "co.dead._ingest.recompute" || string(msg.Data) != "not json" ||
		msg.Header.Get("Coalesce-Error-Code") != "invalid_json" || msg.Header.Get("Coalesce-Ingest-Subject") != "co.ingest.recompute" {
		t.Errorf("dead letter %s %q %v", msg.Subject, msg.Data, msg.Header)
	}
	// The event of a type with no policy waits in the stream.
	time.Sleep(2 * time.Second)
	if extra, err := dead.NextMsg(100 * time.Millisecond); err == nil {
		t.Errorf("an event of a type without a policy was dead-lettered: %s", extra.Subject)
	}
	// It waits parked, off the intake's consumer.
	s, _ := js.Stream(ctx, daemon.ParkStream(daemon.DefaultIngestStream))
	if info, _ := s.Info(ctx); info == nil || info.State.Msgs != 1 {
		t.Fatalf("parking stream holds %+v, want the event of the type without a policy", info)
	}
	in.Stop()
	// A daemon with the policy decides it.
	later := append([]debounce.Policy{{Type: "later", Mode: debounce.ModeDedup}}, testPolicies...)
	co2, err := debounce.New(debounce.Config{Redis: rdb, Publisher: pub, Policies: later, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	in2, err := daemon.StartIngest(ctx, daemon.IngestConfig{Conn: nc, JetStream: js, Coalescer: co2, Prefix: "co", Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer in2.Stop()
	waitForRound(t, co2, "later", `{"n":1}`, "the event of the new type was never decided")
}

// TestIngestRetryDelay: a stored event that fails for a transient reason
// (Redis or NATS unavailable) is retried with a growing delay, capped, and
// never dropped however many deliveries it took: it once was after 100 (a
// Redis outage of 1 m 50 s lost stored events).
func TestIngestRetryDelay(t *testing.T) {
	t.Parallel()
	prev := time.Duration(0)
	for n := 1; n <= 10_000; n++ {
		d := daemon.IngestRetryDelay(n)
		if d < prev/2 || d <= 0 || d > daemon.MaxIngestRetryDelay {
			t.Fatalf("delivery %d: delay %v after %v", n, d, prev)
		}
		prev = d
	}
	if d := daemon.IngestRetryDelay(1); d > 2*time.Second {
		t.Errorf("first retry after %v", d)
	}
}

// TestIngestFailingEventsDoNotBlockOthers: with Redis down, 300 stored
// events of a fail: closed type keep failing and wait to be retried; an
// event of a fail: open type stored behind them is still decided at once
// (published without a reservation). The waiting ones used to fill the
// consumer's 256 pending acks, so nothing behind them was even delivered.
func TestIngestFailingEventsDoNotBlockOthers(t *testing.T) {
	t.Parallel()
	nc, js, pub := natsWithPublisher(t)
	ctx := context.Background()
	rs := testenv.NewRedis(t)
	rdb := rs.Client(t)
	co, err := debounce.New(debounce.Config{Redis: rdb, Publisher: pub, Policies: testPolicies, Prefix: testenv.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	in, err := daemon.StartIngest(ctx, daemon.IngestConfig{Conn: nc, JetStream: js, Coalescer: co, Prefix: "co", Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Stop()
	rs.Stop()
	for i := range 300 {
		if _, err := js.Publish(ctx, "co.ingest.notify", []byte(fmt.Sprintf(`{"args":{"c":%d}}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	// recompute fails open: with Redis down its job is published at once as
	// a 30 s schedule, which a core subscriber sees on the sched subject.
	jobs, err := nc.SubscribeSync("co.sched.recompute.>")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the failing ones are delivered and waiting
	if _, err := js.Publish(ctx, "co.ingest.recompute", []byte(`{"args":{"tenant_id":5}}`)); err != nil {
		t.Fatal(err)
	}
	// Each failing decision holds a slot while go-redis dials (about 1.7 s
	// against a stopped server), so the 300 take a few rounds of 64 slots
	// first; behind 256 pending acks it was not delivered at all.
	m, err := jobs.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("the fail: open event behind 300 failing ones was not decided within 30 s: %v", err)
	}
	if string(m.Data) != `{"tenant_id":5}` {
		t.Errorf("the bypassed job carries %s, want the event's args", m.Data)
	}
	// The 300 waited parked, not lost: each one's job is published once
	// Redis is back.
	runs, err := nc.SubscribeSync("co.run.notify.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Start(); err != nil {
		t.Fatal(err)
	}
	if got := distinctJobs(runs, 300, 60*time.Second); got != 300 {
		t.Fatalf("%d of the 300 events stored during the outage reached a job after it", got)
	}
}

// distinctJobs counts the distinct job bodies sub receives, until it has
// want or within is over.
func distinctJobs(sub *nats.Subscription, want int, within time.Duration) int {
	seen := map[string]bool{}
	deadline := time.Now().Add(within)
	for len(seen) < want && time.Now().Before(deadline) {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			break
		}
		seen[string(m.Data)] = true
	}
	return len(seen)
}

// TestIngestOneTypeWaitingDoesNotStallOthers fills the intake consumer's
// pending acks (8 here, 16,384 in production) with events of a type that
// has no policy yet, which wait out the 10-minute grace. An event of a
// configured type stored after them must still be decided at once (issue
// 12, per-type isolation): on 1ba50f6 the waiting events held every
// pending slot and it was not delivered at all. The waiting events are then
// decided, all of them, by a daemon that has their policy.
func TestIngestOneTypeWaitingDoesNotStallOthers(t *testing.T) {
	t.Parallel()
	nc, js, pub := natsWithPublisher(t)
	ctx := context.Background()
	rdb := testenv.SharedRedis(t).Client(t)
	prefix := testenv.Prefix(t)
	co, err := debounce.New(debounce.Config{Redis: rdb, Publisher: pub, Policies: testPolicies, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	cfg := daemon.IngestConfig{Conn: nc, JetStream: js, Coalescer: co, Prefix: "co", Durable: true, Redis: rdb, RedisPrefix: prefix}
	daemon.SetMaxAckPending(&cfg, 8)
	in, err := daemon.StartIngest(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	const waiting = 40
	for i := range waiting {
		if _, err := js.Publish(ctx, "co.ingest.rollout", []byte(fmt.Sprintf(`{"args":{"n":%d}}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(ctx, "co.ingest.recompute", []byte(`{"args":{"tenant_id":9}}`)); err != nil {
		t.Fatal(err)
	}
	waitForRound(t, co, "recompute", `{"tenant_id":9}`, "an event stored behind 40 of a type without a policy was not decided")
	in.Stop()
	withRollout := append([]debounce.Policy{{Type: "rollout", Mode: debounce.ModeDedup}}, testPolicies...)
	co2, err := debounce.New(debounce.Config{Redis: rdb, Publisher: pub, Policies: withRollout, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Coalescer = co2
	in2, err := daemon.StartIngest(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer in2.Stop()
	for i := range waiting {
		waitForRound(t, co2, "rollout", fmt.Sprintf(`{"n":%d}`, i), fmt.Sprintf("waiting event %d was never decided once its policy came", i))
	}
	for _, name := range []string{daemon.DefaultIngestStream, daemon.ParkStream(daemon.DefaultIngestStream)} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != 0 {
			t.Errorf("stream %s still holds %d events after all were decided", name, info.State.Msgs)
		}
	}
}

// TestIngestOutlivesALongOutage stores events while Redis is down for two
// minutes, longer than the old cap (100 deliveries a second apart), and
// checks that each one's job is published once Redis is back (issue 12, bug
// 5: they were dropped after about 100 s). It runs alongside the package's
// other tests; the two minutes are the point of it.
func TestIngestOutlivesALongOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("a two-minute outage")
	}
	t.Parallel()
	nc, js, pub := natsWithPublisher(t)
	ctx := context.Background()
	rs := testenv.NewRedis(t)
	co, err := debounce.New(debounce.Config{Redis: rs.Client(t), Publisher: pub, Policies: testPolicies, Prefix: testenv.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	in, err := daemon.StartIngest(ctx, daemon.IngestConfig{Conn: nc, JetStream: js, Coalescer: co, Prefix: "co", Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Stop()
	jobs, err := nc.SubscribeSync("co.run.notify.>")
	if err != nil {
		t.Fatal(err)
	}
	rs.Stop()
	const n = 20
	for i := range n {
		if _, err := js.Publish(ctx, "co.ingest.notify", []byte(fmt.Sprintf(`{"args":{"c":%d}}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(125 * time.Second)
	if m, err := jobs.NextMsg(10 * time.Millisecond); err == nil {
		t.Fatalf("a job was published while Redis was down (notify fails closed): %s", m.Data)
	}
	if err := rs.Start(); err != nil {
		t.Fatal(err)
	}
	// The retry delay is at most 30 s.
	if got := distinctJobs(jobs, n, 60*time.Second); got != n {
		t.Fatalf("%d of %d events stored during a 125 s outage reached a job after it", got, n)
	}
}

// TestIngestRedeliveryIsNotDecidedTwice loses the ack of a decided stored
// event, as a dropped connection or a crash right after the decision would.
// Its redelivery (after the consumer's 30 s AckWait) must be acked, not
// decided again: for a throttle whose window has passed a second decision
// is a second job (issue 12, suspect 1). Without the Redis mark (the old
// code) the event runs twice.
func TestIngestRedeliveryIsNotDecidedTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the consumer's AckWait")
	}
	t.Parallel()
	nc, js, pub := natsWithPublisher(t)
	ctx := context.Background()
	rdb := testenv.NewRedis(t).Client(t)
	prefix := testenv.Prefix(t)
	co, err := debounce.New(debounce.Config{Redis: rdb, Publisher: pub, Prefix: prefix,
		Policies: []debounce.Policy{{Type: "ping", Mode: debounce.ModeThrottle, Window: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	m := daemon.NewMetrics("ping")
	in, err := daemon.StartIngest(ctx, daemon.IngestConfig{Conn: nc, JetStream: js, Coalescer: co, Prefix: "co", Durable: true,
		Redis: rdb, RedisPrefix: prefix, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Stop()
	var lost, redelivered atomic.Int32
	daemon.LoseAcks(in, func(msg jetstream.Msg) bool {
		md, err := msg.Metadata()
		if err == nil && md.NumDelivered == 1 {
			lost.Add(1)
			return true
		}
		redelivered.Add(1)
		return false
	})
	jobs, err := nc.SubscribeSync("co.run.ping.>")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "co.ingest.ping", []byte(`{"args":{"x":1}}`)); err != nil {
		t.Fatal(err)
	}
	first, err := jobs.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no job for the stored event: %v", err)
	}
	// The redelivery comes after AckWait (30 s); a second decision would
	// publish its job at once (the 1 s window is long over).
	if second, err := jobs.NextMsg(45 * time.Second); err == nil {
		t.Fatalf("the redelivered event was decided again: a second job %s after %s", second.Subject, first.Subject)
	}
	if lost.Load() != 1 || redelivered.Load() != 1 {
		t.Fatalf("lost %d acks and acked %d redeliveries, want 1 and 1", lost.Load(), redelivered.Load())
	}
	info, err := js.Consumer(ctx, daemon.DefaultIngestStream, "coalesce-ingest")
	if err != nil {
		t.Fatal(err)
	}
	if ci := info.CachedInfo(); ci.NumAckPending != 0 {
		t.Fatalf("consumer: %d pending; want the redelivery acked", ci.NumAckPending)
	}
	if got := daemon.IngestCount(m, "stream", "redelivered"); got != 1 {
		t.Errorf("ingest_total{result=redelivered} = %v, want 1", got)
	}
}

// TestIngestStopStartsNoDecisionAfterwards stops the intake while requests
// queue behind a slow Redis, longer than its drain. Once Stop returns no
// decision may start (the daemon closes Redis and NATS next), and each
// request is answered with a decision, answered "canceled", or not at all
// (issue 12, suspect 3: Stop's wg.Wait ran while the callback kept starting
// decisions, so Stop worked through the whole backlog, or returned with
// decisions about to start).
func TestIngestStopStartsNoDecisionAfterwards(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the drain")
	}
	t.Parallel()
	nc, js, pub := natsWithPublisher(t)
	ctx := context.Background()
	rs := testenv.SharedRedis(t)
	proxy, err := chaos.NewProxy(rs.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxy.SetLatency(400*time.Millisecond, 0, 0)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), PoolSize: 8, MaxRetries: -1})
	defer rdb.Close()
	var stopped atomic.Bool
	var late, decided atomic.Int32
	co, err := debounce.New(debounce.Config{Redis: rdb, Publisher: pub, Policies: testPolicies, Prefix: testenv.Prefix(t),
		Hooks: debounce.Hooks{Decision: func(_ string, _ debounce.Decision, err error, took time.Duration) {
			decided.Add(1)
			if stopped.Load() {
				late.Add(1)
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	in, err := daemon.StartIngest(ctx, daemon.IngestConfig{Conn: nc, JetStream: js, Coalescer: co, Prefix: "co", Requests: true, Parallel: 4})
	if err != nil {
		t.Fatal(err)
	}
	replies, err := nc.SubscribeSync(nats.NewInbox() + ".>")
	if err != nil {
		t.Fatal(err)
	}
	inbox := strings.TrimSuffix(replies.Subject, ">")
	const n = 150
	for i := range n {
		if err := nc.PublishRequest("co.events.notify", fmt.Sprintf("%s%d", inbox, i), []byte(fmt.Sprintf(`{"args":{"s":%d}}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	began := time.Now()
	in.Stop()
	stopped.Store(true)
	// The drain is 10 s; a decision under way then takes about a second
	// more. The backlog (about 25 s of decisions) is not worked through.
	if took := time.Since(began); took > 20*time.Second {
		t.Errorf("Stop took %v: it kept deciding the backlog past its 10 s drain", took.Round(time.Second))
	}
	time.Sleep(3 * time.Second) // a decision started late would finish by now
	if late.Load() != 0 {
		t.Fatalf("%d decisions ran after Stop returned", late.Load())
	}
	ok, canceled := 0, 0
	for {
		m, err := replies.NextMsg(100 * time.Millisecond)
		if err != nil {
			break
		}
		switch {
		case bytes.Contains(m.Data, []byte(`"code":"canceled"`)):
			canceled++
		case bytes.Contains(m.Data, []byte(`"outcome"`)):
			ok++
		default:
			t.Errorf("reply %s", m.Data)
		}
	}
	if ok != int(decided.Load()) {
		t.Errorf("%d decisions answered of %d made (%d canceled, %d unanswered of %d); want every decision answered",
			ok, decided.Load(), canceled, n-ok-canceled, n)
	}
	t.Logf("%d decided and answered, %d answered canceled, %d unanswered", ok, canceled, n-ok-canceled)
}

// natsWithPublisher starts an embedded JetStream for the test and returns a
// connection, its JetStream context and a publisher on the default stream.
func natsWithPublisher(t *testing.T) (*nats.Conn, jetstream.JetStream, *publisher.Publisher) {
	t.Helper()
	nc, js := testenv.NATS(t).Connect(t)
	pub, err := publisher.New(context.Background(), js, nil)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, pub
}

// waitForRound waits up to 15 s for the round of an event of jobType with
// args to be pending: the event was decided. It fails t with what otherwise.
func waitForRound(t *testing.T, co *debounce.Coalescer, jobType, args, what string) {
	t.Helper()
	key, err := co.RoundKeyOf(debounce.Event{Type: jobType, Args: json.RawMessage(args)})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, found, _ := co.Inspect(context.Background(), jobType, key); found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
