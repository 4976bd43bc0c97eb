package coalescetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/coalescetest"
	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/worker"
)

// TestEnvRunsWhatTheProducerMeant: three events of one tenant and one of
// another, debounced, reach the worker as two jobs with the right counts,
// and nothing more.
func TestEnvRunsWhatTheProducerMeant(t *testing.T) {
	env := coalescetest.New(t, debounce.Policy{Type: "recompute", Mode: debounce.ModeDebounce,
		Window: time.Second, KeyFields: []string{"tenant_id"}, Payload: debounce.PayloadLast})
	jobs := env.Jobs(t, "recompute")
	ctx := context.Background()
	for _, args := range []string{`{"tenant_id":1,"v":1}`, `{"tenant_id":2,"v":1}`, `{"tenant_id":1,"v":2}`, `{"tenant_id":1,"v":3}`} {
		if _, err := env.Submit(ctx, "recompute", args); err != nil {
			t.Fatal(err)
		}
	}
	got := map[int]*worker.Job{}
	for range 2 {
		job := coalescetest.Next(t, jobs, 10*time.Second)
		var a struct {
			TenantID int `json:"tenant_id"`
		}
		if err := json.Unmarshal(job.Summary.Payload, &a); err != nil {
			t.Fatalf("last args %s: %v", job.Summary.Payload, err)
		}
		got[a.TenantID] = job
	}
	if j := got[1]; j == nil || j.Summary.Events != 3 || string(j.Summary.Payload) != `{"tenant_id":1,"v":3}` {
		t.Errorf("tenant 1: %+v, want 3 events, last v 3", j)
	}
	if j := got[2]; j == nil || j.Summary.Events != 1 {
		t.Errorf("tenant 2: %+v, want 1 event", j)
	}
	coalescetest.None(t, jobs, time.Second)
}

// Two Envs on the same servers do not see each other's jobs.
func TestEnvsAreIsolated(t *testing.T) {
	srv, err := coalescetest.StartServers()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	p := debounce.Policy{Type: "ping", Mode: debounce.ModeDedup}
	a, err := coalescetest.Wire(context.Background(), srv.NATSURL, srv.RedisURL, p)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := coalescetest.Wire(context.Background(), srv.NATSURL, srv.RedisURL, p)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ja, jb := a.Jobs(t, "ping"), b.Jobs(t, "ping")
	if _, err := a.Submit(context.Background(), "ping", `{"n":1}`); err != nil {
		t.Fatal(err)
	}
	if d, err := b.Submit(context.Background(), "ping", `{"n":1}`); err != nil || d.Outcome != debounce.OutcomePublished {
		t.Fatalf("the same event in the other Env: %+v %v, want it published (its own Redis prefix)", d, err)
	}
	coalescetest.Next(t, ja, 5*time.Second)
	coalescetest.Next(t, jb, 5*time.Second)
	coalescetest.None(t, ja, 500*time.Millisecond)
}

// A producer and a worker on in-process servers: a storm of one tenant's
// events becomes one job that knows how many it covers.
func Example() {
	srv, err := coalescetest.StartServers()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	ctx := context.Background()
	env, err := coalescetest.Wire(ctx, srv.NATSURL, srv.RedisURL, debounce.Policy{
		Type: "recompute", Mode: debounce.ModeDebounce, Window: time.Second, KeyFields: []string{"tenant_id"}})
	if err != nil {
		panic(err)
	}
	defer env.Close()
	done := make(chan *worker.Job, 1)
	runCtx, stop := context.WithCancel(ctx)
	wait, err := env.Run(runCtx, func(_ context.Context, job *worker.Job) error {
		done <- job
		return nil
	}, "recompute")
	if err != nil {
		panic(err)
	}
	for i := range 100 {
		if _, err := env.Submit(ctx, "recompute", fmt.Sprintf(`{"tenant_id":7,"order":%d}`, i)); err != nil {
			panic(err)
		}
	}
	job := <-done
	fmt.Println("one job for", job.Summary.Events, "events")
	stop()
	_ = wait()
	// Output: one job for 100 events
}

// A worker config naming another stream or subject prefix than its
// Publisher's is refused, not left to consume nothing.
func TestWorkerRefusesAnotherStream(t *testing.T) {
	env := coalescetest.New(t, debounce.Policy{Type: "ping", Mode: debounce.ModeDedup})
	for _, edit := range []func(*worker.Config){
		func(c *worker.Config) { c.Stream = "OTHER" },
		func(c *worker.Config) { c.Subjects.Prefix = "other" },
	} {
		if _, err := env.NewWorker(edit, "ping"); !errors.Is(err, worker.ErrInvalidConfig) {
			t.Errorf("a worker on another stream or prefix than its Publisher's: %v, want ErrInvalidConfig", err)
		}
	}
	same := func(c *worker.Config) { c.Stream, c.Subjects = env.Publisher.Stream(), env.Publisher.Subjects() }
	if _, err := env.NewWorker(same, "ping"); err != nil {
		t.Errorf("the Publisher's own stream and subjects: %v", err)
	}
}
