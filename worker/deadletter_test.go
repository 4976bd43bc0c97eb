package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/worker"
)

// TestLargeSummaryDeadLetterReplaysEveryItem: a 700-item accumulate round
// of ordinary args (about 120 bytes each; the default max_items is 1000)
// dies; its dead letter keeps the whole summary (some 90 KiB: in its body),
// and the replay runs with the 700 items. On 47bb46e the dead letter
// dropped a summary over 64 KiB, Finish deleted the round's taken copy, and
// the replay ran with no item.
func TestLargeSummaryDeadLetterReplaysEveryItem(t *testing.T) {
	t.Parallel()
	const n = 700
	p := debounce.Policy{Type: "digest", Mode: debounce.ModeDebounce, Window: 5 * time.Second,
		Payload: debounce.PayloadAccumulate, KeyFields: []string{"user"}}
	s := newStack(t, testenv.NATS(t), p)
	pad := strings.Repeat("x", 60)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			s.submit(t, p.Type, fmt.Sprintf(`{"user":"ann","comment_id":%d,"text":"%s","seen":false}`, 1_000_000+i, pad))
		})
	}
	wg.Wait()
	h := &diesOnce{}
	s.run(t, h.handle, worker.Config{Types: []string{p.Type}})
	dead, letter := oneDeadLetter(t, s, p.Type, 30*time.Second)
	first := h.ran()[0]
	if len(first.Summary.Items) != n {
		t.Fatalf("the first run had %d items, want %d", len(first.Summary.Items), n)
	}
	if b, _ := json.Marshal(first.Summary); len(b) <= 64<<10 {
		t.Fatalf("the summary is %d bytes: the test wants one over 64 KiB", len(b))
	}
	if sum := letter.Summary; sum == nil || len(sum.Items) != n || sum.Events != n {
		t.Fatalf("the dead letter's summary %v, want %d events and items", sum != nil, n)
	}
	if _, err := dead.Replay(context.Background(), letter.Seq); err != nil {
		t.Fatalf("replay: %v", err)
	}
	waitFor(t, 15*time.Second, "the replay", func() bool { return len(h.ran()) == 2 })
	replay := h.ran()[1]
	if replay.Release != worker.ReleaseReplayed || replay.Summary.Events != n || len(replay.Summary.Items) != n {
		t.Errorf("the replay ran %s with %d events and %d items, want replayed with %d", replay.Release, replay.Summary.Events, len(replay.Summary.Items), n)
	}
	if string(replay.Args) != string(first.Args) {
		t.Errorf("the replay's args %s, want %s", replay.Args, first.Args)
	}
}

// TestSummaryPacking: a small summary goes in a header, a large one in the
// body with the args, and both read back as written; a body marked as
// holding the summary that does not is an error naming the header.
func TestSummaryPacking(t *testing.T) {
	t.Parallel()
	args := []byte(`{"user":"ann"}`)
	small := debounce.Summary{Events: 2, Items: []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`2`)}}
	large := debounce.Summary{Events: 2000}
	for i := range 2000 {
		large.Items = append(large.Items, json.RawMessage(fmt.Sprintf(`{"id":%d,"pad":"%s"}`, i, strings.Repeat("y", 20))))
	}
	for name, sum := range map[string]debounce.Summary{"small": small, "large": large} {
		h := nats.Header{}
		body, err := worker.PackSummary(h, args, sum)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		inBody := h.Get(worker.HeaderSummaryInBody) != ""
		if inBody != (name == "large") || inBody == (h.Get(worker.HeaderSummary) != "") {
			t.Errorf("%s: headers %v", name, h)
		}
		gotArgs, got, found, err := worker.UnpackSummary(h, body)
		if err != nil || !found || string(gotArgs) != string(args) || got.Events != sum.Events || len(got.Items) != len(sum.Items) {
			t.Errorf("%s: read back %s %d events %d items %v %v", name, gotArgs, got.Events, len(got.Items), found, err)
		}
	}
	if _, err := worker.PackSummary(nats.Header{}, []byte("not json"), large); err == nil {
		t.Error("a large summary with args that are not JSON was packed")
	}
	h := nats.Header{}
	h.Set(worker.HeaderSummaryInBody, "1")
	if _, _, _, err := worker.UnpackSummary(h, args); !errors.Is(err, worker.ErrSummaryBody) || !strings.Contains(err.Error(), worker.HeaderSummaryInBody) {
		t.Errorf("a body without the summary: %v", err)
	}
}

// FuzzUnpackSummary: any body under either header reads back without
// panicking; what PackSummary wrote reads back the same.
func FuzzUnpackSummary(f *testing.F) {
	f.Add([]byte(`{"args":{"a":1},"summary":{"events":1}}`), true)
	f.Add([]byte(`{"a":1}`), false)
	f.Add([]byte(`{"args":1}`), true)
	f.Fuzz(func(t *testing.T, data []byte, inBody bool) {
		h := nats.Header{}
		if inBody {
			h.Set(worker.HeaderSummaryInBody, "1")
		} else {
			h.Set(worker.HeaderSummary, string(data))
		}
		args, sum, found, err := worker.UnpackSummary(h, data)
		if err != nil || !found {
			return
		}
		h2 := nats.Header{}
		body, err := worker.PackSummary(h2, args, sum)
		if err != nil {
			return // a large summary with args that are not JSON
		}
		args2, sum2, _, err := worker.UnpackSummary(h2, body)
		if err != nil || string(args2) != string(args) || sum2.Events != sum.Events || len(sum2.Items) != len(sum.Items) {
			t.Fatalf("round trip: %s %+v %v, want %s %+v", args2, sum2, err, args, sum)
		}
	})
}
