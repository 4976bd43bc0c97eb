package daemon

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
)

// TestParkedCopyAndRedeliveryAreDecidedOnce: a stored event's parked copy
// and a redelivery of its original (whose ack was lost) reach two deciders
// at the same moment. One decides it; the other finds the claim taken and
// comes back, then finds it decided and acks it: the round counts the event
// once. On 47bb46e both checked the decided mark before either set it, and
// both decided (the round counted 2).
func TestParkedCopyAndRedeliveryAreDecidedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, js := testenv.NATS(t).Connect(t)
	for name, subject := range map[string]string{"INTAKE_T": "co.ingest.>", "PARKED_T": "co.ingest-parked.>"} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Retention: jetstream.WorkQueuePolicy}); err != nil {
			t.Fatal(err)
		}
	}
	consumer := func(stream string) jetstream.Consumer {
		c, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "t", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	fetch := func(c jetstream.Consumer) jetstream.Msg {
		t.Helper()
		batch, err := c.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			return m
		}
		t.Fatalf("no message within 10 s: %v", batch.Error())
		return nil
	}
	body := []byte(`{"args":{"k":1}}`)
	if _, err := js.Publish(ctx, "co.ingest.recompute", body); err != nil {
		t.Fatal(err)
	}
	intake := consumer("INTAKE_T")
	first := fetch(intake)
	_ = first.Nak() // its ack lost: delivered again
	redelivery := fetch(intake)

	rdb := testenv.SharedRedis(t).Client(t)
	prefix := testenv.Prefix(t)
	var pubMu sync.Mutex
	var published int
	slow := debounce.PublisherFunc(func(context.Context, debounce.Job) error {
		time.Sleep(300 * time.Millisecond) // NATS slow: the two decisions overlap
		pubMu.Lock()
		published++
		pubMu.Unlock()
		return nil
	})
	p := debounce.Policy{Type: "recompute", Mode: debounce.ModeDebounce, Window: time.Minute, KeyFields: []string{"k"}}
	co, err := debounce.New(debounce.Config{Redis: rdb, Publisher: slow, Prefix: prefix, Policies: []debounce.Policy{p}})
	if err != nil {
		t.Fatal(err)
	}
	in := &Ingest{cfg: IngestConfig{Coalescer: co, Prefix: "co", Redis: rdb, RedisPrefix: prefix}, log: slog.New(slog.DiscardHandler)}
	ev, err := in.storedEvent(redelivery, false)
	if err != nil || ev.n != 2 {
		t.Fatalf("the redelivery: %+v %v", ev, err)
	}
	park := nats.NewMsg("co.ingest-parked.t.recompute")
	park.Header.Set(hdrParkedSubject, ev.subject)
	park.Header.Set(hdrParkedID, ev.id)
	park.Header.Set(hdrParkedStored, ev.stored.UTC().Format(time.RFC3339Nano))
	park.Header.Set(hdrParkedDeliveries, "1")
	park.Data = body
	if _, err := js.PublishMsg(ctx, park); err != nil {
		t.Fatal(err)
	}
	parkedC := consumer("PARKED_T")
	parked := fetch(parkedC)

	var wg sync.WaitGroup
	wg.Go(func() { in.onStored(redelivery, false) })
	wg.Go(func() { in.onStored(parked, true) })
	wg.Wait()
	// The copy that found the claim taken comes back (nak'ed with a delay).
	for _, c := range []jetstream.Consumer{intake, parkedC} {
		batch, err := c.Fetch(1, jetstream.FetchMaxWait(ingestClaimBusyDelay+3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			in.onStored(m, c == parkedC)
		}
	}
	key, _ := co.RoundKeyOf(debounce.Event{Type: p.Type, Args: json.RawMessage(`{"k":1}`)})
	r, found, err := co.Inspect(ctx, p.Type, key)
	if err != nil || !found || r.Events != 1 {
		t.Errorf("the round %+v %v %v: want the event counted once", r, found, err)
	}
	for _, c := range []jetstream.Consumer{intake, parkedC} {
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			t.Errorf("consumer on %s: %d pending acks, %d pending; want both copies acked", info.Stream, info.NumAckPending, info.NumPending)
		}
	}
}
