package debounce_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

func (f *fixture) submitKeyed(t *testing.T, typ, args, idem string) (debounce.Decision, error) {
	t.Helper()
	return f.c.Submit(context.Background(), debounce.Event{Type: typ, Args: json.RawMessage(args), IdempotencyKey: idem})
}

// TestIdempotencyKeyReplaysTheFirstDecision: an event sent again with its
// idempotency key gets the first decision back, marked Replayed, and
// counts nothing again (count, items, published jobs), in every layout and
// mode; the same key with other args is refused; the same args written
// differently are the same event.
func TestIdempotencyKeyReplaysTheFirstDecision(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b,
			debounce.Policy{Type: "packed", Mode: debounce.ModeDebounce, Window: 5 * time.Second, KeyFields: []string{"t"}},
			debounce.Policy{Type: "acc", Mode: debounce.ModeDebounce, Window: 5 * time.Second, KeyFields: []string{"t"}, Payload: debounce.PayloadAccumulate},
			debounce.Policy{Type: "ext", Mode: debounce.ModeDebounce, Window: 5 * time.Second, Extend: true, MaxWait: time.Minute, KeyFields: []string{"t"}},
			debounce.Policy{Type: "dedup", Mode: debounce.ModeDedup, KeyFields: []string{"t"}},
			debounce.Policy{Type: "thr", Mode: debounce.ModeThrottle, Window: 5 * time.Second, Trailing: true, KeyFields: []string{"t"}},
		)
		for _, typ := range []string{"packed", "acc", "ext", "dedup", "thr"} {
			t.Run(typ, func(t *testing.T) {
				k1, k2 := typ+"-1", typ+"-2"
				// Throttle: the first event is the leading edge, the next
				// ones gather into the trailing round.
				second, third := 2, 3
				if typ == "thr" {
					second, third = 1, 2
				}
				d1, err := f.submitKeyed(t, typ, `{"t":1,"n":1}`, k1)
				if err != nil || d1.Replayed {
					t.Fatalf("first: %+v %v", d1, err)
				}
				d2, err := f.submitKeyed(t, typ, `{"t":1,"n":2}`, k2)
				if err != nil || d2.Replayed || d2.Events != second {
					t.Fatalf("second event: %+v %v", d2, err)
				}
				before := len(f.pub.all())
				// Retries of both, the first written differently.
				r1, err := f.submitKeyed(t, typ, ` { "n" : 1.0, "t" : 1 } `, k1)
				if err != nil || !r1.Replayed {
					t.Fatalf("retry of the first: %+v %v", r1, err)
				}
				r1.Replayed = false
				if r1 != d1 {
					t.Errorf("retry of the first answered %+v, want the first decision %+v", r1, d1)
				}
				r2, err := f.submitKeyed(t, typ, `{"t":1,"n":2}`, k2)
				if err != nil || !r2.Replayed || r2.Outcome != d2.Outcome || r2.Events != second || r2.Round != d2.Round {
					t.Errorf("retry of the second: %+v %v, want %+v replayed", r2, err, d2)
				}
				if n := len(f.pub.all()) - before; n != 0 {
					t.Errorf("the retries published %d jobs", n)
				}
				// The same key with another event: refused, nothing counted.
				_, err = f.submitKeyed(t, typ, `{"t":1,"n":3}`, k1)
				var ee *debounce.EventError
				if !errors.Is(err, debounce.ErrIdempotencyKeyReused) || !errors.As(err, &ee) || ee.Field != "idempotency_key" || ee.Code != "idempotency_key_reused" {
					t.Errorf("same key, other args: %v, want ErrIdempotencyKeyReused", err)
				}
				r, found, err := f.c.Inspect(context.Background(), typ, d1.Key)
				if err != nil || !found {
					t.Fatalf("inspect: %v %v", found, err)
				}
				if want := 2; typ != "thr" && r.Events != want {
					t.Errorf("the round counts %d events, want %d", r.Events, want)
				}
				if typ == "acc" && r.Items != 2 {
					t.Errorf("the round holds %d items, want 2", r.Items)
				}
				// A plain event (no key) still counts.
				if d := f.submit(t, typ, `{"t":1,"n":4}`); d.Replayed || d.Events != third {
					t.Errorf("an unkeyed event after the replays: %+v", d)
				}
			})
		}
		if _, err := f.submitKeyed(t, "packed", `{"t":9}`, "has space"); !errors.Is(err, debounce.ErrInvalidEvent) {
			t.Errorf("an idempotency key with a space: %v, want ErrInvalidEvent", err)
		}
	})
}

// TestIdempotencyKeyRetryAfterAFailedPublish: the known double count. An
// event that joined a round not yet published and then failed to publish
// it was answered with an error yet counted; its retry used to count it
// again. With its key, the retry replays the decision, publishes the round
// (still unpublished), and the count stays. An opener whose publish failed
// had its round backed out: its retry opens a new one.
func TestIdempotencyKeyRetryAfterAFailedPublish(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b,
			debounce.Policy{Type: "packed", Mode: debounce.ModeDebounce, Window: 5 * time.Second},
			debounce.Policy{Type: "hash", Mode: debounce.ModeDebounce, Window: 5 * time.Second, Payload: debounce.PayloadAccumulate},
		)
		for _, typ := range []string{"packed", "hash"} {
			// The opener dies before publishing: the round stays unpublished.
			ctx, cancel := context.WithCancel(context.Background())
			dying := debounce.PublisherFunc(func(ctx context.Context, _ debounce.Job) error {
				cancel()
				<-ctx.Done()
				return ctx.Err()
			})
			opener, err := debounce.New(debounce.Config{Redis: b.rdb, Publisher: dying, Policies: f.c.Policies(), Prefix: f.prefix, Now: f.clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := opener.Submit(ctx, debounce.Event{Type: typ, Args: json.RawMessage(`{"a":1}`)}); err == nil {
				t.Fatalf("%s: the dying opener's Submit succeeded", typ)
			}
			// A joiner with a key fails to publish: answered an error, counted.
			f.pub.setFail(errors.New("nats: no responders"))
			if _, err := f.submitKeyed(t, typ, `{"a":1}`, "join-"+typ); !errors.Is(err, debounce.ErrPublish) {
				t.Fatalf("%s: joiner with NATS down: %v, want ErrPublish", typ, err)
			}
			f.pub.setFail(nil)
			before := len(f.pub.all())
			d, err := f.submitKeyed(t, typ, `{"a":1}`, "join-"+typ)
			if err != nil || !d.Replayed || d.Events != 2 {
				t.Fatalf("%s: the retry: %+v %v, want the joiner's decision (events 2) replayed", typ, d, err)
			}
			if jobs := f.pub.all()[before:]; len(jobs) != 1 || jobs[0].Token != d.Round {
				t.Errorf("%s: the retry published %+v, want the stranded round once", typ, jobs)
			}
			r, _, _ := f.c.Inspect(context.Background(), typ, d.Key)
			if r.Events != 2 || !r.Published {
				t.Errorf("%s: round after the retry: %+v, want 2 events, published", typ, r)
			}
			// Replayed again: published already, nothing more.
			if _, err := f.submitKeyed(t, typ, `{"a":1}`, "join-"+typ); err != nil || len(f.pub.all()) != before+1 {
				t.Errorf("%s: a second retry: %v, %d publishes", typ, err, len(f.pub.all())-before)
			}

			// An opener with a key whose publish fails: backed out, record
			// forgotten, its retry opens the round.
			f.pub.setFail(errors.New("nats: no responders"))
			args := fmt.Sprintf(`{"b":%q}`, typ)
			if _, err := f.submitKeyed(t, typ, args, "open-"+typ); !errors.Is(err, debounce.ErrPublish) {
				t.Fatalf("%s: opener with NATS down: %v", typ, err)
			}
			f.pub.setFail(nil)
			d, err = f.submitKeyed(t, typ, args, "open-"+typ)
			if err != nil || d.Replayed || d.Outcome != debounce.OutcomeScheduled {
				t.Errorf("%s: retry of a backed-out opener: %+v %v, want a new round", typ, d, err)
			}
		}
	})
}
