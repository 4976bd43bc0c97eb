package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/admin"
	"github.com/coalesce-io/coalesce/internal/daemon"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/publisher"
)

// TestProtocolOverHTTP: the worker protocol's start and finish over HTTP,
// with a job message's headers sent as HTTP headers (so canonicalised:
// Coalesce-Ttl, Traceparent). Start runs the job with its summary; a
// redelivery's start runs it again as a retry with the same summary; finish
// ends it, after which a start acks without running; bad requests name the
// header.
func TestProtocolOverHTTP(t *testing.T) {
	t.Parallel()
	f := newAPIWith(t, func(c *daemon.APIConfig) {
		c.Protocol = daemon.NewProtocol(daemon.ProtocolConfig{Coalescer: c.Coalescer, Publisher: c.Publisher, Metrics: c.Metrics})
	})
	args := fmt.Sprintf(`{"p":"%d"}`, time.Now().UnixNano())
	key, err := f.co.RoundKeyOf(debounce.Event{Type: "notify", Args: json.RawMessage(args)})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := f.nc.SubscribeSync("co.run.notify." + key.String() + ".>")
	if err != nil {
		t.Fatal(err)
	}
	if code, out := f.do(t, http.MethodPost, "/v1/events", `{"type":"notify","args":`+args+`,"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`); code != 200 {
		t.Fatalf("submit: %d %s", code, out)
	}
	msg, err := jobs.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no job message: %v", err)
	}
	headers := func(extra ...string) []string {
		var h []string
		for k, vs := range msg.Header {
			if !strings.HasPrefix(k, "Nats-") {
				h = append(h, k, vs[0])
			}
		}
		return append(h, extra...)
	}
	start := func(delivered string) daemon.StartAnswer {
		t.Helper()
		code, out := f.do(t, http.MethodPost, "/v1/jobs/start", string(msg.Data), headers("Coalesce-Delivered", delivered)...)
		if code != 200 {
			t.Fatalf("start: %d %s", code, out)
		}
		var a daemon.StartAnswer
		if err := json.Unmarshal(out, &a); err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := start("1")
	if a.Action != "run" || a.Job == nil || a.Job.Release != "released" || a.Job.Summary.Events != 1 || a.Job.Attempt != 1 ||
		string(a.Job.Args) != args || a.Job.TraceParent == "" || a.Job.V != 1 {
		t.Fatalf("start: %+v (job %+v)", a, a.Job)
	}
	// A redelivery (the worker died before finishing): run again, attempt 2.
	if r := start("2"); r.Action != "run" || r.Job.Release != "retry" || r.Job.Attempt != 2 || r.Job.Summary.Events != 1 {
		t.Fatalf("redelivered start: %+v (job %+v)", r, r.Job)
	}
	code, out := f.do(t, http.MethodPost, "/v1/jobs/finish", string(msg.Data), headers("Coalesce-Result", "ok")...)
	if code != 200 || !strings.Contains(string(out), `"release"`) {
		t.Fatalf("finish: %d %s", code, out)
	}
	// Delivered once more after it finished (an ack lost): not run again.
	if r := start("3"); r.Action != "ack" || r.Result != "done" || r.Job != nil {
		t.Errorf("start after finish: %+v, want ack (done)", r)
	}
	// The daemon counts the jobs it hands out as a coalesce worker counts
	// its own (the dashboard's coalescing ratio needs them), and the
	// round's events and age as its job starts.
	_, metrics := f.do(t, http.MethodGet, "/metrics", "")
	for _, want := range []string{`coalesce_jobs_total{result="ok",type="notify"} 1`, `coalesce_jobs_total{result="done",type="notify"} 1`,
		`coalesce_round_events_count{type="notify"} 1`, `coalesce_round_age_seconds_count{type="notify"} 1`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// Past Coalesce-Max-Deliver: dead, with the headers the dead letter
	// needs, and not finished (the worker finishes it after dead-lettering).
	args2 := fmt.Sprintf(`{"p":"%d"}`, time.Now().UnixNano())
	key2, _ := f.co.RoundKeyOf(debounce.Event{Type: "notify", Args: json.RawMessage(args2)})
	jobs2, _ := f.nc.SubscribeSync("co.run.notify." + key2.String() + ".>")
	if code, out := f.do(t, http.MethodPost, "/v1/events", `{"type":"notify","args":`+args2+`}`); code != 200 {
		t.Fatalf("submit: %d %s", code, out)
	}
	if msg, err = jobs2.NextMsg(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if r := start("1"); r.Action != "run" {
		t.Fatalf("first start: %+v", r)
	}
	code, out = f.do(t, http.MethodPost, "/v1/jobs/start", string(msg.Data), headers("Coalesce-Delivered", "2", "Coalesce-Max-Deliver", "1")...)
	var dead daemon.StartAnswer
	_ = json.Unmarshal(out, &dead)
	if code != 200 || dead.Action != "dead" || dead.DeadTo != "co.dead.notify" || dead.DeadHeaders["Coalesce-Attempts"] != "2" ||
		!strings.Contains(dead.DeadHeaders["Coalesce-Summary"], `"events":1`) || dead.DeadHeaders["Coalesce-Error"] == "" {
		t.Fatalf("start past max deliver: %d %s", code, out)
	}
	// Not finished yet: a redelivery (the dead letter failed to publish)
	// is dead again, not acked as done.
	code, out = f.do(t, http.MethodPost, "/v1/jobs/start", string(msg.Data), headers("Coalesce-Delivered", "3", "Coalesce-Max-Deliver", "1")...)
	if !strings.Contains(string(out), `"action":"dead"`) {
		t.Errorf("start again before the dead job was finished: %d %s, want dead again", code, out)
	}

	for _, c := range []struct {
		path, drop, header, value, code, field string
	}{
		{"/v1/jobs/start", "Coalesce-Key", "", "", "invalid_job", "Coalesce-Key"},
		{"/v1/jobs/start", "", "Coalesce-Delivered", "0", "invalid_header", "Coalesce-Delivered"},
		{"/v1/jobs/start", "", "Coalesce-Type", "nope", "no_policy", "Coalesce-Type"},
		{"/v1/jobs/finish", "", "Coalesce-Result", "maybe", "invalid_header", "Coalesce-Result"},
		{"/v1/jobs/finish", "Coalesce-Version", "Coalesce-Result", "ok", "invalid_job", "Coalesce-Version"},
	} {
		var h []string
		for k, vs := range msg.Header {
			if k != c.drop && k != c.header && !strings.HasPrefix(k, "Nats-") {
				h = append(h, k, vs[0])
			}
		}
		if c.header != "" {
			h = append(h, c.header, c.value)
		}
		code, out := f.do(t, http.MethodPost, c.path, string(msg.Data), h...)
		var e errBody
		_ = json.Unmarshal(out, &e)
		if code/100 != 4 || e.Error.Code != c.code || e.Error.Field != c.field {
			t.Errorf("%s without %s, %s %q: %d %s; want 4xx %s naming %s", c.path, c.drop, c.header, c.value, code, out, c.code, c.field)
		}
	}
}

// TestProtocolExclusiveKey: with an exclusive policy, start hands the job a
// lease of its key; the next round's job of the key is told to retry
// (key_busy) while the lease is held, progress refreshes it, and finish
// with the lease frees the key for that job at once.
func TestProtocolExclusiveKey(t *testing.T) {
	t.Parallel()
	nc, js := testenv.NATS(t).Connect(t)
	pub, err := publisher.New(context.Background(), js, nil)
	if err != nil {
		t.Fatal(err)
	}
	co, err := debounce.New(debounce.Config{Redis: testenv.SharedRedis(t).Client(t), Publisher: pub, Prefix: testenv.Prefix(t),
		Policies: []debounce.Policy{{Type: "sync", Mode: debounce.ModeDedup, KeyFields: []string{"tenant"}, Exclusive: true, Lease: 5 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	p := daemon.NewProtocol(daemon.ProtocolConfig{Coalescer: co, Publisher: pub})
	ctx := context.Background()
	jobs, err := nc.SubscribeSync("co.run.sync.>")
	if err != nil {
		t.Fatal(err)
	}
	next := func() *nats.Msg {
		t.Helper()
		if _, err := co.Submit(ctx, debounce.Event{Type: "sync", Args: json.RawMessage(`{"tenant":1}`)}); err != nil {
			t.Fatal(err)
		}
		m, err := jobs.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	with := func(m *nats.Msg, kv ...string) nats.Header {
		h := nats.Header{}
		for k, v := range m.Header {
			h[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	first := next()
	a, e := p.Start(ctx, with(first), first.Data)
	if e != nil || a.Action != "run" || a.Lease == "" || a.LeaseMs != 5000 {
		t.Fatalf("first start: %+v %v", a, e)
	}
	second := next() // its round opened after the first job started
	if b, e := p.Start(ctx, with(second), second.Data); e != nil || b.Action != "retry" || b.Result != "key_busy" || b.RetryInMs <= 0 {
		t.Fatalf("start while the key is busy: %+v %v", b, e)
	}
	if pr, e := p.Progress(ctx, with(first, daemon.HeaderLease, a.Lease), first.Data); e != nil || !pr.Held {
		t.Errorf("progress: %+v %v", pr, e)
	}
	if _, e := p.Progress(ctx, with(first, daemon.HeaderLease, "not-mine"), first.Data); e != nil {
		t.Errorf("progress with another lease: %v", e)
	}
	if _, e := p.Finish(ctx, with(first, daemon.HeaderResult, "ok", daemon.HeaderLease, a.Lease), first.Data); e != nil {
		t.Fatalf("finish: %v", e)
	}
	b, e := p.Start(ctx, with(second, daemon.HeaderDelivered, "2"), second.Data)
	if e != nil || b.Action != "run" || b.Job.Attempt != 1 || b.Lease == "" {
		t.Fatalf("start once the key is free: %+v %v (its wait is no attempt)", b, e)
	}
}

// TestProtocolDeadLetterKeepsALargeSummary: a job of the worker protocol
// dies with a summary too large for a header (40 and 80 items of 1 KiB):
// start's dead answer gives the dead letter's body (args and summary) and
// headers; the dead letter published so (as a protocol worker does) shows
// every item, and its replay starts with them. On 410d1a67 the 80-item
// summary (over 64 KiB) was left out of dead_letter_headers, and nothing
// else kept it (the dead letter had no summary); the 40-item one (over the
// 32 KiB a header now holds) went in a header then, and passes there.
func TestProtocolDeadLetterKeepsALargeSummary(t *testing.T) {
	t.Parallel()
	for _, n := range []int{40, 80} {
		t.Run(fmt.Sprintf("%d_items", n), func(t *testing.T) {
			t.Parallel()
			protocolDeadLetterKeepsASummary(t, n)
		})
	}
}

func protocolDeadLetterKeepsASummary(t *testing.T, n int) {
	ctx := context.Background()
	_, js := testenv.NATS(t).Connect(t)
	pub, err := publisher.New(ctx, js, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := debounce.Policy{Type: "digest", Mode: debounce.ModeDebounce, Window: time.Second, Payload: debounce.PayloadAccumulate, KeyFields: []string{"user"}}
	co, err := debounce.New(debounce.Config{Redis: testenv.SharedRedis(t).Client(t), Publisher: pub, Policies: []debounce.Policy{p}, Prefix: testenv.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	proto := daemon.NewProtocol(daemon.ProtocolConfig{Coalescer: co, Publisher: pub})
	cons, err := js.CreateOrUpdateConsumer(ctx, pub.Stream(), jetstream.ConsumerConfig{
		Durable: "protocol_test", FilterSubject: "co.run.digest.>", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	next := func() *nats.Msg {
		t.Helper()
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			_ = m.Ack()
			return &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
		}
		t.Fatalf("no job message within 10 s: %v", batch.Error())
		return nil
	}
	for i := range n {
		if _, err := co.Submit(ctx, debounce.Event{Type: p.Type, Args: json.RawMessage(fmt.Sprintf(`{"user":"ann","i":%d,"pad":"%s"}`, i, strings.Repeat("z", 1024)))}); err != nil {
			t.Fatal(err)
		}
	}
	msg := next()
	forward := func(m *nats.Msg, extra ...string) nats.Header {
		h := nats.Header{}
		for k, vs := range m.Header {
			if !strings.HasPrefix(k, "Nats-") {
				h[k] = vs
			}
		}
		for i := 0; i+1 < len(extra); i += 2 {
			h.Set(extra[i], extra[i+1])
		}
		return h
	}
	if a, e := proto.Start(ctx, forward(msg, daemon.HeaderDelivered, "1"), msg.Data); e != nil || a.Action != "run" || len(a.Job.Summary.Items) != n {
		t.Fatalf("start: %+v %v", a, e)
	}
	a, e := proto.Start(ctx, forward(msg, daemon.HeaderDelivered, "2", daemon.HeaderMaxDeliver, "1"), msg.Data)
	if e != nil || a.Action != "dead" || len(a.DeadBody) == 0 || a.DeadHeaders["Coalesce-Summary-In-Body"] != "1" || a.DeadHeaders["Coalesce-Summary"] != "" {
		t.Fatalf("start past max deliver: %+v %v; want dead with the summary in dead_letter_body", a, e)
	}
	dead := nats.NewMsg(a.DeadTo)
	dead.Header = forward(msg)
	for k, v := range a.DeadHeaders {
		dead.Header.Set(k, v)
	}
	dead.Data = a.DeadBody
	if _, err := js.PublishMsg(ctx, dead); err != nil {
		t.Fatal(err)
	}
	if _, e := proto.Finish(ctx, forward(msg, daemon.HeaderResult, "dead"), msg.Data); e != nil {
		t.Fatal(e)
	}
	dl := admin.Dead{JS: js, Stream: pub.Stream(), Subjects: pub.Subjects()}
	letters, err := dl.List(ctx, p.Type, "", 10)
	if err != nil || len(letters) != 1 || letters[0].Summary == nil || len(letters[0].Summary.Items) != n {
		t.Fatalf("dead letters %+v %v: want one with %d items", letters, err, n)
	}
	if _, err := dl.Replay(ctx, letters[0].Seq); err != nil {
		t.Fatal(err)
	}
	replayed := next()
	r, e := proto.Start(ctx, forward(replayed, daemon.HeaderDelivered, "1"), replayed.Data)
	if e != nil || r.Action != "run" || r.Job.Release != "replayed" || len(r.Job.Summary.Items) != n || string(r.Job.Args) != string(msg.Data) {
		t.Fatalf("the replay's start: %+v %v; want run, replayed, %d items, the job's args", r, e, n)
	}
}
