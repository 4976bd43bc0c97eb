package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/worker"
)

// downStack is a stack whose Redis is down (nothing listens at its
// address): under fail open every event is published without a
// reservation (bypassed).
func downStack(t *testing.T, policies ...debounce.Policy) *stack {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	down := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), DisableIdentity: true, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = down.Close() })
	return newStackWith(t, testenv.NATS(t), down, nil, policies...)
}

// idempotentHandler is an HTTP job handler that honours Idempotency-Key as
// the protocol tells it to: a key it completed is acknowledged without
// running again. Each key's first request fails (500), so every job is
// delivered twice.
type idempotentHandler struct {
	mu       sync.Mutex
	requests map[string]int      // Idempotency-Key -> requests
	done     map[string]bool     // keys completed
	ran      map[string][]string // Idempotency-Key -> args it ran with
}

func (h *idempotentHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var doc worker.Document
	_ = json.Unmarshal(body, &doc)
	key := r.Header.Get("Idempotency-Key")
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests[key]++
	switch {
	case h.done[key]:
	case h.requests[key] == 1:
		w.WriteHeader(http.StatusInternalServerError)
		return
	default:
		h.ran[key] = append(h.ran[key], string(doc.Args))
		h.done[key] = true
	}
	if doc.ID != key {
		h.ran["mismatch: document id "+doc.ID+", header "+key] = nil
	}
}

func (h *idempotentHandler) snapshot() (ran map[string][]string, requests map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ran, requests = map[string][]string{}, map[string]int{}
	for k, v := range h.ran {
		ran[k] = append([]string(nil), v...)
	}
	for k, v := range h.requests {
		requests[k] = v
	}
	return ran, requests
}

// TestBypassedJobsEachReachAnIdempotentPushHandler: jobs of one key
// published without a reservation (Redis down, fail open) each carry an
// Idempotency-Key of their own, the same on their retry: a push handler
// that honours it runs every one of them once. On 47bb46e every bypassed
// job of the key was "<key>.": the handler ran one and acknowledged the
// others unrun.
func TestBypassedJobsEachReachAnIdempotentPushHandler(t *testing.T) {
	t.Parallel()
	p := debounce.Policy{Type: "sync", Mode: debounce.ModeDedup, KeyFields: []string{"k"}}
	s := downStack(t, p)
	h := &idempotentHandler{requests: map[string]int{}, done: map[string]bool{}, ran: map[string][]string{}}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	push, err := worker.Push(worker.PushConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2, 3} {
		if d := s.submit(t, p.Type, fmt.Sprintf(`{"k":1,"n":%d}`, n)); d.Outcome != debounce.OutcomeBypassed {
			t.Fatalf("event %d: %+v, want bypassed", n, d)
		}
	}
	s.run(t, push, worker.Config{Types: []string{p.Type}})
	waitFor(t, 20*time.Second, "three jobs run by the handler", func() bool {
		ran, _ := h.snapshot()
		return len(ran) >= 3
	})
	quiet(t, 300*time.Millisecond, "requests", func() int {
		_, req := h.snapshot()
		n := 0
		for _, c := range req {
			n += c
		}
		return n
	})
	ran, requests := h.snapshot()
	args := map[string]bool{}
	for key, as := range ran {
		if len(as) != 1 || requests[key] != 2 {
			t.Errorf("Idempotency-Key %q: ran %v over %d requests, want one run after one failed request", key, as, requests[key])
		}
		for _, a := range as {
			args[a] = true
		}
	}
	if len(ran) != 3 || len(args) != 3 {
		t.Errorf("the handler ran %v, want each of the three jobs once under a key of its own", ran)
	}
}

// TestBypassedDeadLetterReplays: a bypassed job's dead letter is replayed
// as the same job (its identity kept), and runs. On 47bb46e the replay was
// published on "co.run.<type>.<key>." (empty token), which the stream
// refused: the API answered 503 stream_unavailable.
func TestBypassedDeadLetterReplays(t *testing.T) {
	t.Parallel()
	p := debounce.Policy{Type: "mail", Mode: debounce.ModeDedup, KeyFields: []string{"k"}}
	s := downStack(t, p)
	if d := s.submit(t, p.Type, `{"k":1}`); d.Outcome != debounce.OutcomeBypassed {
		t.Fatalf("%+v, want bypassed", d)
	}
	h := &diesOnce{}
	s.run(t, h.handle, worker.Config{Types: []string{p.Type}})
	dead, letter := oneDeadLetter(t, s, p.Type, 15*time.Second)
	if _, err := dead.Replay(context.Background(), letter.Seq); err != nil {
		t.Fatalf("replay: %v", err)
	}
	waitFor(t, 15*time.Second, "the replay", func() bool { return len(h.ran()) == 2 })
	runs := h.ran()
	first, replay := runs[0], runs[1]
	if first.ID() == "" || replay.ID() != first.ID() || replay.Replay == "" || replay.Release != worker.ReleaseReplayed {
		t.Errorf("the replay: id %q replay %q release %s; want the dead job's id %q, replayed", replay.ID(), replay.Replay, replay.Release, first.ID())
	}
}
