// Notification dedup (seed 000): at most one push notification per (user,
// comment) while the push is pending. The seed's three duplicate sources — a
// web-tier retry of the enqueue, a comment edit that re-fires the event with a
// new message id, and a redelivery of the event by its queue — all reach
// Submit for user 7 and comment 42, and become one job: the policy is mode
// dedup keyed on key_fields [user_id, comment_id], so the message id does not
// count. User 8 on the same comment gets a notification of their own.
//
// The policy releases the reservation when the push succeeds (until:
// success), not when it starts (until: start): the first push attempt times
// out, and an edit arriving while it waits for its retry is still dropped.
// With until: start, that edit would have opened a second job and the user
// would get two notifications once the retry went through. An event after the
// push succeeded is new work: the dedup window ends there. For a window that
// lasts a day whatever the job does (the seed's SET NX EX 86400), use until:
// expiry with ttl: 24h. A redelivery of the push job itself, after a worker
// died before its ack, is the run-once guard's business (see
// examples/run-once-worker).
//
//	go run ./examples/notification-dedup                       # in-process NATS and Redis
//	go run ./examples/notification-dedup --redis redis://127.0.0.1:6379/0 --nats nats://127.0.0.1:4222
//
// The producer half is what the comment service embeds; the worker half is
// the push sender. They share Redis (reservations) and NATS (jobs).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
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
	stream      = "EXAMPLE_NOTIFY"
	prefix      = "ex-notify"
	jobType     = "push_notification"
	retryDelay  = time.Second      // the push worker's wait before retrying a failed push
	waitForJobs = 10 * time.Second // bound on every wait for a push
)

func main() {
	redisURL := flag.String("redis", "", "Redis URL (default: an in-process Redis)")
	natsURL := flag.String("nats", "", "NATS URL, server 2.12 or later (default: an in-process NATS)")
	flag.Parse()
	if err := run(context.Background(), *redisURL, *natsURL, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// comment is the event's args: who to notify about which comment, and the id
// of the message that carried it (which differs between duplicates).
type comment struct {
	UserID    int    `json:"user_id"`
	CommentID int    `json:"comment_id"`
	MessageID string `json:"message_id"`
}

// push is one call of the push provider.
type push struct {
	userID, commentID, attempt int
	err                        error
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
			KeyFields: []string{"user_id", "comment_id"}, // the effect, not the message
			Until:     debounce.UntilSuccess,
		}},
	})
	if err != nil {
		return err
	}

	// Worker half: the push sender. Its provider times out on the first push
	// to user 7 about comment 42; the worker retries it after retryDelay.
	pushes := make(chan push, 16)
	var timeoutOnce sync.Once
	w, err := worker.New(worker.Config{
		JetStream: js, // stream and subjects: the Publisher's
		Coalescer: co, Publisher: pub, Types: []string{jobType},
		Concurrency:     1, // one push at a time, so the story reads the same every run
		Backoff:         []time.Duration{retryDelay},
		ShutdownTimeout: 2 * time.Second,
	})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	runCtx, stop := context.WithCancel(ctx)
	defer wg.Wait()
	defer stop()
	wg.Go(func() {
		_ = w.Run(runCtx, func(ctx context.Context, job *worker.Job) error {
			var c comment
			if err := json.Unmarshal(job.Args, &c); err != nil {
				return worker.Permanent(err)
			}
			p := push{userID: c.UserID, commentID: c.CommentID, attempt: job.Attempt}
			if c.UserID == 7 && c.CommentID == 42 {
				timeoutOnce.Do(func() { p.err = errors.New("provider timed out") })
			}
			select {
			case pushes <- p: // here: call the push provider
			case <-ctx.Done():
				return ctx.Err()
			}
			return p.err
		})
	})

	// Producer half: the original event, its three duplicates, another user.
	submit := func(what string, c comment, want debounce.Outcome) (debounce.Decision, error) {
		args, _ := json.Marshal(c)
		d, err := co.Submit(ctx, debounce.Event{Type: jobType, Args: args})
		if err != nil {
			return d, err
		}
		fmt.Fprintf(out, "%-36s user %d comment %d %-4s -> %s\n", what, c.UserID, c.CommentID, c.MessageID, d.Outcome)
		if d.Outcome != want {
			return d, fmt.Errorf("%s: outcome %s, want %s", what, d.Outcome, want)
		}
		return d, nil
	}
	original := comment{UserID: 7, CommentID: 42, MessageID: "m-1"}
	first, err := submit("comment created", original, debounce.OutcomePublished)
	if err != nil {
		return err
	}
	for _, ev := range []struct {
		what string
		c    comment
	}{
		{"web tier retries the enqueue", original},
		{"comment edited: event fired again", comment{UserID: 7, CommentID: 42, MessageID: "m-2"}},
		{"event queue redelivers", original},
	} {
		if _, err := submit(ev.what, ev.c, debounce.OutcomeDuplicate); err != nil {
			return err
		}
	}
	if _, err := submit("comment created (another user)", comment{UserID: 8, CommentID: 42, MessageID: "m-3"}, debounce.OutcomePublished); err != nil {
		return err
	}

	sent := map[[2]int]int{}
	next := func(userID, attempt int, fails bool) error {
		select {
		case p := <-pushes:
			if p.userID != userID || p.attempt != attempt || (p.err != nil) != fails {
				return fmt.Errorf("push to user %d (attempt %d, err %v), want user %d attempt %d", p.userID, p.attempt, p.err, userID, attempt)
			}
			if p.err != nil {
				fmt.Fprintf(out, "push: user %d comment %d: %v (attempt %d), retrying in %v\n", p.userID, p.commentID, p.err, p.attempt, retryDelay)
				return nil
			}
			sent[[2]int{p.userID, p.commentID}]++
			fmt.Fprintf(out, "push: user %d comment %d: sent (attempt %d)\n", p.userID, p.commentID, p.attempt)
			return nil
		case <-time.After(waitForJobs):
			return fmt.Errorf("expected a push to user %d (attempt %d), timed out", userID, attempt)
		}
	}
	if err := next(7, 1, true); err != nil {
		return err
	}
	// The reservation holds until the push succeeds, retries included.
	if _, err := submit("comment edited again, during retry", comment{UserID: 7, CommentID: 42, MessageID: "m-4"}, debounce.OutcomeDuplicate); err != nil {
		return err
	}
	if err := next(8, 1, false); err != nil {
		return err
	}
	if err := next(7, 2, false); err != nil {
		return err
	}
	whilePending := sent[[2]int{7, 42}]

	// After the push succeeded the reservation is gone: a late duplicate is new work.
	if err := waitReleased(ctx, co, first.Key); err != nil {
		return err
	}
	if _, err := submit("late redelivery, after the push", original, debounce.OutcomePublished); err != nil {
		return err
	}
	if err := next(7, 1, false); err != nil {
		return err
	}
	select {
	case p := <-pushes:
		return fmt.Errorf("unexpected push to user %d comment %d (attempt %d)", p.userID, p.commentID, p.attempt)
	case <-time.After(500 * time.Millisecond):
	}
	fmt.Fprintf(out, "user 7, comment 42: 5 events while its push was pending -> %d push; 1 event after it succeeded -> %d more\n",
		whilePending, sent[[2]int{7, 42}]-whilePending)
	fmt.Fprintf(out, "user 8, comment 42: 1 event -> %d push\n", sent[[2]int{8, 42}])
	if whilePending != 1 || sent[[2]int{7, 42}] != 2 || sent[[2]int{8, 42}] != 1 {
		return fmt.Errorf("pushes sent %v, want 1 then 1 more to user 7 and 1 to user 8", sent)
	}
	return nil
}

// waitReleased waits until the worker has released the reservation of key
// (it does so after the handler returns).
func waitReleased(ctx context.Context, co *debounce.Coalescer, key debounce.RoundKey) error {
	deadline := time.Now().Add(waitForJobs)
	for {
		_, pending, err := co.Inspect(ctx, jobType, key)
		if err != nil || !pending {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("reservation of %s still held %v after the push succeeded", key, waitForJobs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
