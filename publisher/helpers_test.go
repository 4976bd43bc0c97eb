package publisher_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/fingerprint"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/publisher"
	"github.com/nats-io/nats.go/jetstream"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// testCtx is a context bounded well inside the package's time budget.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newPublisher starts an embedded server and a publisher on it.
func newPublisher(t testing.TB, cfg *publisher.Config) (*publisher.Publisher, jetstream.JetStream) {
	t.Helper()
	_, js := testenv.NATS(t).Connect(t)
	p, err := publisher.New(testCtx(t), js, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p, js
}

func randomKey() debounce.RoundKey {
	var k debounce.RoundKey
	_, _ = rand.Read(k[:])
	return k
}

func randomToken() debounce.Token {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if t := debounce.Token(binary.LittleEndian.Uint64(b[:])); t != 0 {
			return t
		}
	}
}

// testJob is a debounce round of jobType due at due (zero: immediate), with
// times already at millisecond precision so a decoded copy compares equal.
func testJob(t testing.TB, jobType string, due time.Time) debounce.Job {
	t.Helper()
	args := json.RawMessage(`{"tenant_id":42,"period":"2026-08"}`)
	fp, err := fingerprint.FromJSON(jobType, args)
	if err != nil {
		t.Fatal(err)
	}
	j := debounce.Job{
		Type:        jobType,
		Key:         randomKey(),
		Fingerprint: fp,
		Token:       randomToken(),
		Mode:        debounce.ModeDebounce,
		Payload:     debounce.PayloadFirst,
		Args:        args,
		OpenedAt:    time.Now().UTC().Truncate(time.Millisecond),
		TTL:         90 * time.Second,
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
	if !due.IsZero() {
		j.DueAt = due.UTC().Truncate(time.Millisecond)
	}
	return j
}

// fired is one message received on a job subject.
type fired struct {
	msg jetstream.Msg
	at  time.Time // when the consumer received it
}

// stored is when the stream stored the message (the schedule fired).
func (f fired) stored(t testing.TB) time.Time {
	t.Helper()
	md, err := f.msg.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	return md.Timestamp
}

// collector consumes the job subjects of a stream and keeps what arrives.
type collector struct {
	mu   sync.Mutex
	msgs []fired
}

// collect starts a consumer on every job subject of p's stream.
func collect(t testing.TB, p *publisher.Publisher, js jetstream.JetStream) *collector {
	t.Helper()
	ctx := testCtx(t)
	c, err := js.CreateOrUpdateConsumer(ctx, p.Stream(), jetstream.ConsumerConfig{
		Durable:       "test-jobs",
		FilterSubject: p.Subjects().AllRuns(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		MaxAckPending: 100000,
	})
	if err != nil {
		t.Fatal(err)
	}
	col := &collector{}
	cc, err := c.Consume(func(m jetstream.Msg) {
		now := time.Now()
		_ = m.Ack()
		col.mu.Lock()
		col.msgs = append(col.msgs, fired{msg: m, at: now})
		col.mu.Unlock()
	}, jetstream.PullMaxMessages(2000))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return col
}

func (c *collector) snapshot() []fired {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]fired(nil), c.msgs...)
}

// waitN polls until at least n messages arrived or limit passes, and returns
// what arrived.
func (c *collector) waitN(t testing.TB, n int, limit time.Duration) []fired {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got := c.snapshot()
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// quietUntil polls until the moment `until` and fails if more than n
// messages arrive by then.
func (c *collector) quietUntil(t testing.TB, n int, until time.Time) []fired {
	t.Helper()
	for {
		got := c.snapshot()
		if len(got) > n {
			t.Fatalf("%d messages arrived, want %d", len(got), n)
		}
		if time.Now().After(until) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}
