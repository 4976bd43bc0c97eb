// Run-once worker (seed 001): a worker sends Alan's payment SMS and dies
// before it can acknowledge the job, so JetStream redelivers the job to
// another worker after the ack wait. With the run-once guard
// (worker.GuardConfig) on the job type, the first worker claimed the job in
// Redis with SET NX before sending and marked the claim done after its
// handler returned; the second worker finds it done and acknowledges without
// sending. Alan gets one SMS.
//
// Two workers share the job type's consumer; whichever takes the job first
// sends the SMS and then loses its NATS connection (a connection with
// MaxReconnects(0), closed in the handler), so its acknowledgement never
// reaches the server. The ack wait is 1 second so the redelivery comes soon.
//
// The guard covers a death after the handler returns. A worker that dies
// inside the handler, after the provider call but before returning, leaves
// its claim "running": the redelivery is retried until the claim expires
// (ClaimTTL) and then sends again. Where twice is unacceptable, pass the
// provider an idempotency key too, such as the job's round token.
//
//	go run ./examples/run-once-worker                       # in-process NATS and Redis
//	go run ./examples/run-once-worker --redis redis://127.0.0.1:6379/0 --nats nats://127.0.0.1:4222
//
// The producer half is what the payment service embeds; the worker half
// sends the SMS. They share Redis (reservations and claims) and NATS (jobs).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/coalescetest"
	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/publisher"
	"github.com/coalesce-io/coalesce/worker"
)

// Names of this example's stream, subjects and keys, so it can share real
// servers with the other examples.
const (
	stream      = "EXAMPLE_SMS"
	prefix      = "ex-sms"
	jobType     = "send_sms"
	ackWait     = time.Second      // silence after which JetStream redelivers a job
	waitForJobs = 10 * time.Second // bound on every wait
)

func main() {
	redisURL := flag.String("redis", "", "Redis URL (default: an in-process Redis)")
	natsURL := flag.String("nats", "", "NATS URL, server 2.12 or later (default: an in-process NATS)")
	flag.Parse()
	if err := run(context.Background(), *redisURL, *natsURL, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// notification is the event's args.
type notification struct {
	ID   string `json:"notification_id"`
	To   string `json:"to"`
	Text string `json:"text"`
}

// step is something a worker did, reported to the story.
type step struct {
	worker string
	sent   *notification      // the handler sent this SMS
	guard  worker.GuardResult // or: the guard decided this
}

func run(ctx context.Context, redisURL, natsURL string, out io.Writer) error {
	if redisURL == "" || natsURL == "" {
		// In-process servers, as a test would use (package coalescetest).
		dev, err := coalescetest.StartServers()
		if err != nil {
			return err
		}
		defer dev.Close()
		redisURL, natsURL = dev.RedisURL, dev.NATSURL
	}
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return err
	}
	opt.DisableIdentity = true
	// Never resend a command whose reply was lost: a resent opening could
	// reopen a round that already ran (debounce.New refuses such a client).
	opt.MaxRetries = -1
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}

	// Both halves: the stream, and one policy for the job type.
	pub, err := publisher.New(ctx, js, &publisher.Config{Stream: stream, Prefix: prefix})
	if err != nil {
		return err
	}
	co, err := debounce.New(debounce.Config{
		Redis:     rdb,
		Publisher: pub,
		Prefix:    prefix,
		Policies: []debounce.Policy{{
			Type:      jobType,
			Mode:      debounce.ModeDedup,
			KeyFields: []string{"notification_id"},
		}},
	})
	if err != nil {
		return err
	}

	// Worker half: two workers, each on its own NATS connection. The first
	// SMS sent crashes its worker before the ack.
	steps := make(chan step, 32)
	report := func(s step) {
		select {
		case steps <- s:
		default: // never block a worker; the story then times out waiting
		}
	}
	var smsSent atomic.Int64
	var crashed atomic.Bool
	var wg sync.WaitGroup
	runCtx, stop := context.WithCancel(ctx)
	defer wg.Wait()
	defer stop()
	for _, name := range []string{"worker a", "worker b"} {
		wnc, err := nats.Connect(natsURL, nats.MaxReconnects(0)) // a dead process does not come back
		if err != nil {
			return err
		}
		defer wnc.Close()
		wjs, err := jetstream.New(wnc)
		if err != nil {
			return err
		}
		w, err := worker.New(worker.Config{
			JetStream: wjs, // stream and subjects: the Publisher's
			Coalescer: co, Publisher: pub, Types: []string{jobType},
			AckWait:         ackWait,
			ShutdownTimeout: 2 * time.Second,
			Guards: map[string]worker.GuardConfig{jobType: {
				Redis: rdb, Prefix: prefix + "-g",
				ClaimTTL: 10 * time.Second, // longer than a send takes; refreshed while it runs
			}},
			Hooks: worker.Hooks{Guard: func(_ string, r worker.GuardResult) {
				report(step{worker: name, guard: r})
			}},
		})
		if err != nil {
			return err
		}
		wg.Go(func() {
			_ = w.Run(runCtx, func(ctx context.Context, job *worker.Job) error {
				var n notification
				if err := json.Unmarshal(job.Args, &n); err != nil {
					return worker.Permanent(err)
				}
				smsSent.Add(1) // here: call the SMS provider
				report(step{worker: name, sent: &n})
				if crashed.CompareAndSwap(false, true) {
					wnc.Close() // "crash": the ack that follows never reaches the server
				}
				return nil
			})
		})
	}

	// Producer half: one payment notification.
	args, _ := json.Marshal(notification{ID: "n-1001", To: "Alan", Text: "Payment of $120.00 received"})
	d, err := co.Submit(ctx, debounce.Event{Type: jobType, Args: args})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "notification n-1001 to Alan -> %s\n", d.Outcome)
	if d.Outcome != debounce.OutcomePublished {
		return fmt.Errorf("notification: outcome %s, want %s", d.Outcome, debounce.OutcomePublished)
	}

	next := func(what string) (step, error) {
		select {
		case s := <-steps:
			return s, nil
		case <-time.After(waitForJobs):
			return step{}, fmt.Errorf("expected %s, timed out after %v", what, waitForJobs)
		}
	}
	s, err := next("the SMS to be sent")
	if err != nil {
		return err
	}
	if s.sent == nil {
		return fmt.Errorf("%s: guard %s before any SMS was sent", s.worker, s.guard)
	}
	first := s.worker
	fmt.Fprintf(out, "%s: claimed the job, sent %q to %s, then lost its NATS connection before the ack\n", first, s.sent.Text, s.sent.To)
	if s, err = next("the claim to be marked done"); err != nil {
		return err
	}
	if s.worker != first || s.guard != worker.GuardRan {
		return fmt.Errorf("%s: %+v, want the claim of %s marked done (%s)", s.worker, s, first, worker.GuardRan)
	}
	fmt.Fprintf(out, "%s: claim marked done in Redis (the handler returned)\n", first)
	if s, err = next("the redelivery"); err != nil {
		return err
	}
	if s.worker == first || s.guard != worker.GuardDuplicateDone {
		return fmt.Errorf("%s: %+v, want the other worker to find the claim done (%s)", s.worker, s, worker.GuardDuplicateDone)
	}
	fmt.Fprintf(out, "%s: got the job again after the %v ack wait; the claim says done: acknowledged without sending\n", s.worker, ackWait)

	// The acknowledgement reached the stream: the job is gone (work queue),
	// so nothing is redelivered again.
	if err := waitEmpty(ctx, js); err != nil {
		return err
	}
	fmt.Fprintf(out, "stream %s is empty: the acknowledgement went through\n", stream)
	select {
	case s := <-steps:
		return fmt.Errorf("%s: unexpected %+v", s.worker, s)
	default:
	}
	fmt.Fprintf(out, "SMS sent %d time(s)\n", smsSent.Load())
	if n := smsSent.Load(); n != 1 {
		return fmt.Errorf("SMS sent %d times, want 1", n)
	}
	return nil
}

// waitEmpty waits until the stream holds no job.
func waitEmpty(ctx context.Context, js jetstream.JetStream) error {
	deadline := time.Now().Add(waitForJobs)
	for {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stream %s still holds %d messages after %v", stream, info.State.Msgs, waitForJobs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
