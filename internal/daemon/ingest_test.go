package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/daemon"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/publisher"
)

func TestNATSIngest(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	nc, js := srv.Connect(t)
	ctx := context.Background()
	pub, err := publisher.New(ctx, js, nil)
	if err != nil {
		t.Fatal(err)
	}
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
	srv := testenv.NATS(t)
	nc, js := srv.Connect(t)
	ctx := context.Background()
	pub, err := publisher.New(ctx, js, nil)
	if err != nil {
		t.Fatal(err)
	}
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
	key, _ := co.RoundKeyOf(debounce.Event{Type: "recompute", Args: json.RawMessage(`{"tenant_id":77}`)})
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, found, _ := co.Inspect(ctx, "recompute", key); found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the event stored after the consumer went was never decided")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBadTraceparentHeaderOverNATS: a traceparent header that is not W3C is
// ignored, as HTTP ignores it, on both NATS paths. It was copied into the
// event unchecked: Submit refused the event, request/reply answered
// invalid_event, and the durable intake discarded a stored event for a
// header.
func TestBadTraceparentHeaderOverNATS(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	nc, js := srv.Connect(t)
	ctx := context.Background()
	pub, err := publisher.New(ctx, js, nil)
	if err != nil {
		t.Fatal(err)
	}
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
		return s.CachedInfo().Config
	}
	if got := start("INGEST_R3", 3, jetstream.MemoryStorage); got.Replicas != 3 || got.Storage != jetstream.MemoryStorage {
		t.Errorf("replicas 3, memory: the stream has %d replicas, %v storage", got.Replicas, got.Storage)
	}
	// An operator's R3 stream, started with the default R1.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "INGEST_OPS", Subjects: []string{"co.ingest.>"}, Retention: jetstream.WorkQueuePolicy, Replicas: 3}); err == nil {
		t.Fatal("two streams may not share co.ingest.>: the test is wrong")
	}
	if err := js.DeleteStream(ctx, "INGEST_R3"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "INGEST_OPS", Subjects: []string{"co.ingest.>"}, Retention: jetstream.WorkQueuePolicy, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	if got := start("INGEST_OPS", 0, 0); got.Replicas != 3 {
		t.Errorf("an R3 intake stream started with the default replicas: %d replicas now", got.Replicas)
	}
}
