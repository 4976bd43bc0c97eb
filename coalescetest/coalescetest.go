// Package coalescetest lets users test their own producers and workers
// against coalesce, and run examples, without installing anything: an
// in-process NATS JetStream (nats-server 2.12 or later, embedded) and an
// in-process Redis (miniredis), with a Coalescer, a publisher and a worker
// wired to them as production code would be.
//
//	func TestMyProducer(t *testing.T) {
//		env := coalescetest.New(t, debounce.Policy{Type: "recompute", Mode: debounce.ModeDebounce,
//			Window: time.Second, KeyFields: []string{"tenant_id"}})
//		jobs := env.Jobs(t, "recompute")
//		myProducer(env.Coalescer) // the code under test submits its events
//		job := coalescetest.Next(t, jobs, 5*time.Second)
//		if job.Summary.Events != 3 { ... }
//	}
//
// The servers are for tests and development: the in-process Redis keeps
// everything in memory, and its Lua is slower than Redis's. Point real
// code at real servers.
package coalescetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/devservers"
	"github.com/coalesce-io/coalesce/publisher"
	"github.com/coalesce-io/coalesce/worker"
)

// Servers are an in-process NATS JetStream and Redis on free loopback
// ports, for a test or an example's main.
type Servers struct {
	NATSURL  string // nats://127.0.0.1:port
	RedisURL string // redis://127.0.0.1:port/0

	dev *devservers.Servers
	dir string
}

// StartServers starts the servers; Close stops them and removes their data.
func StartServers() (*Servers, error) {
	dir, err := os.MkdirTemp("", "coalescetest-")
	if err != nil {
		return nil, err
	}
	dev, err := devservers.Start(devservers.Options{NATSListen: "127.0.0.1:0", RedisListen: "127.0.0.1:0", DataDir: dir})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("coalescetest: %w", err)
	}
	return &Servers{NATSURL: dev.NATSURL, RedisURL: dev.RedisURL, dev: dev, dir: dir}, nil
}

// Close stops the servers and removes their data.
func (s *Servers) Close() {
	s.dev.Close()
	_ = os.RemoveAll(s.dir)
}

// RedisClient returns a client of url as coalesce needs it: commands never
// resent after a lost reply (MaxRetries -1; debounce.New refuses others).
func RedisClient(url string) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opt.DisableIdentity = true
	opt.MaxRetries = -1
	return redis.NewClient(opt), nil
}

// Env is a producer and a worker side wired to the same servers: the
// publisher's stream and subjects, the Coalescer's Redis prefix and
// policies. Each Env has a stream and prefix of its own, so tests may share
// servers and run in parallel.
type Env struct {
	Redis     *redis.Client
	NATS      *nats.Conn
	JetStream jetstream.JetStream
	Publisher *publisher.Publisher
	Coalescer *debounce.Coalescer

	servers *Servers
	owned   bool
}

// Wire builds an Env on servers (StartServers, or real ones) for policies.
// Close releases its clients, and the servers too when New started them.
func Wire(ctx context.Context, natsURL, redisURL string, policies ...debounce.Policy) (*Env, error) {
	rdb, err := RedisClient(redisURL)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	env := &Env{Redis: rdb, NATS: nc}
	fail := func(err error) (*Env, error) {
		env.Close()
		return nil, err
	}
	if env.JetStream, err = jetstream.New(nc); err != nil {
		return fail(err)
	}
	id := randomID()
	if env.Publisher, err = publisher.New(ctx, env.JetStream, &publisher.Config{Stream: "COALESCETEST_" + id, Prefix: "t" + id}); err != nil {
		return fail(err)
	}
	if env.Coalescer, err = debounce.New(debounce.Config{Redis: rdb, Publisher: env.Publisher, Policies: policies, Prefix: "t" + id}); err != nil {
		return fail(err)
	}
	return env, nil
}

// New starts servers for t and wires an Env to them for policies; both are
// closed when t ends. It fails t when they cannot start.
func New(t testing.TB, policies ...debounce.Policy) *Env {
	t.Helper()
	srv, err := StartServers()
	if err != nil {
		t.Fatal(err)
	}
	env, err := Wire(context.Background(), srv.NATSURL, srv.RedisURL, policies...)
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	env.servers, env.owned = srv, true
	t.Cleanup(env.Close)
	return env
}

// Close closes the Env's clients, and its servers when New started them.
func (e *Env) Close() {
	if e.NATS != nil {
		e.NATS.Close()
	}
	if e.Redis != nil {
		_ = e.Redis.Close()
	}
	if e.owned && e.servers != nil {
		e.servers.Close()
		e.servers = nil
	}
}

// Submit submits an event of jobType with args (JSON).
func (e *Env) Submit(ctx context.Context, jobType, args string) (debounce.Decision, error) {
	return e.Coalescer.Submit(ctx, debounce.Event{Type: jobType, Args: []byte(args)})
}

// NewWorker returns a worker for types wired to the Env: its stream,
// subjects, Coalescer and Publisher. edit, when not nil, changes the rest
// of the config (concurrency, backoff, guards) before it is built.
func (e *Env) NewWorker(edit func(*worker.Config), types ...string) (*worker.Worker, error) {
	// The worker takes the stream and subjects from the Publisher.
	cfg := worker.Config{JetStream: e.JetStream, Coalescer: e.Coalescer, Publisher: e.Publisher, Types: types}
	if edit != nil {
		edit(&cfg)
	}
	return worker.New(cfg)
}

// Run runs a worker for types with handler until ctx ends; wait waits for
// it to stop.
func (e *Env) Run(ctx context.Context, handler worker.Handler, types ...string) (wait func() error, err error) {
	w, err := e.NewWorker(nil, types...)
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = w.Run(ctx, handler) })
	return func() error {
		wg.Wait()
		if errors.Is(runErr, context.Canceled) {
			return nil
		}
		return runErr
	}, nil
}

// Jobs runs a worker for types whose handler succeeds at once and sends
// each job it started to the channel returned, until t ends: the jobs the
// code under test produced, with their summaries, as a worker sees them.
func (e *Env) Jobs(t testing.TB, types ...string) <-chan *worker.Job {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	jobs := make(chan *worker.Job, 1024)
	wait, err := e.Run(ctx, func(_ context.Context, job *worker.Job) error {
		select {
		case jobs <- job:
		case <-ctx.Done():
		}
		return nil
	}, types...)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := wait(); err != nil {
			t.Errorf("coalescetest: worker: %v", err)
		}
	})
	return jobs
}

// Next returns the next job from jobs, failing t when none comes within
// timeout.
func Next(t testing.TB, jobs <-chan *worker.Job, timeout time.Duration) *worker.Job {
	t.Helper()
	select {
	case job := <-jobs:
		return job
	case <-time.After(timeout):
		t.Fatalf("coalescetest: no job within %v", timeout)
		return nil
	}
}

// None fails t when a job arrives on jobs within d: nothing more was due.
func None(t testing.TB, jobs <-chan *worker.Job, d time.Duration) {
	t.Helper()
	select {
	case job := <-jobs:
		t.Fatalf("coalescetest: an unexpected job %s of round %s (%d events)", job.Type, job.Token, job.Summary.Events)
	case <-time.After(d):
	}
}

func randomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
