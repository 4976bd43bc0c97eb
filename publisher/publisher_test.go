package publisher_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/publisher"
	"github.com/nats-io/nats.go/jetstream"
)

// maxLate bounds how late a schedule may fire (the server checks its timers
// at most every 250 ms; the rest is slack for a loaded CI machine with -race).
const maxLate = 3 * time.Second

func TestProvision(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     publisher.Config
		wantErr error
		want    func(t *testing.T, si *jetstream.StreamInfo)
	}{
		{name: "defaults", want: func(t *testing.T, si *jetstream.StreamInfo) {
			c := si.Config
			if c.Name != "COALESCE" || c.Retention != jetstream.WorkQueuePolicy || c.Storage != jetstream.FileStorage ||
				c.Replicas != 1 || c.Duplicates != 10*time.Minute || c.MaxAge != 7*24*time.Hour || !c.AllowMsgSchedules ||
				!reflect.DeepEqual(c.Subjects, []string{"co.sched.>", "co.run.>", "co.jobs.>", "co.dead.>"}) {
				t.Fatalf("stream config %+v", c)
			}
		}},
		{name: "limits memory", cfg: publisher.Config{Stream: "LIM", Prefix: "app.co", Retention: publisher.RetentionLimits,
			Storage: publisher.StorageMemory, MaxAge: time.Hour, Duplicates: time.Minute},
			want: func(t *testing.T, si *jetstream.StreamInfo) {
				c := si.Config
				if c.Name != "LIM" || c.Retention != jetstream.LimitsPolicy || c.Storage != jetstream.MemoryStorage ||
					c.MaxAge != time.Hour || c.Duplicates != time.Minute || c.Subjects[0] != "app.co.sched.>" {
					t.Fatalf("stream config %+v", c)
				}
			}},
		{name: "interest refused", cfg: publisher.Config{Retention: publisher.RetentionInterest}, wantErr: publisher.ErrInvalidConfig},
		{name: "unknown retention", cfg: publisher.Config{Retention: "forever"}, wantErr: publisher.ErrInvalidConfig},
		{name: "unknown storage", cfg: publisher.Config{Storage: "tape"}, wantErr: publisher.ErrInvalidConfig},
		{name: "wildcard prefix", cfg: publisher.Config{Prefix: "co.*"}, wantErr: publisher.ErrInvalidConfig},
		{name: "empty prefix token", cfg: publisher.Config{Prefix: "co..x"}, wantErr: publisher.ErrInvalidConfig},
		{name: "dotted stream", cfg: publisher.Config{Stream: "A.B"}, wantErr: publisher.ErrInvalidConfig},
		{name: "replicas", cfg: publisher.Config{Replicas: 7}, wantErr: publisher.ErrInvalidConfig},
		{name: "duplicates over max age", cfg: publisher.Config{MaxAge: time.Minute, Duplicates: time.Hour}, wantErr: publisher.ErrInvalidConfig},
		{name: "negative max age", cfg: publisher.Config{MaxAge: -time.Second}, wantErr: publisher.ErrInvalidConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, js := testenv.NATS(t).Connect(t)
			ctx := testCtx(t)
			p, err := publisher.New(ctx, js, &tt.cfg)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("New: %v, want %v", err, tt.wantErr)
				}
				if _, err := js.Stream(ctx, "COALESCE"); !errors.Is(err, jetstream.ErrStreamNotFound) {
					t.Fatalf("a refused config created the stream: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s, err := js.Stream(ctx, p.Stream())
			if err != nil {
				t.Fatal(err)
			}
			tt.want(t, s.CachedInfo())
		})
	}
}

func TestInterestRefusalSaysWhy(t *testing.T) {
	t.Parallel()
	_, js := testenv.NATS(t).Connect(t)
	_, err := publisher.New(testCtx(t), js, &publisher.Config{Retention: publisher.RetentionInterest})
	if err == nil || !strings.Contains(err.Error(), "never fires message schedules") {
		t.Fatalf("New with Interest: %v", err)
	}
}

// TestProvisionIdempotent runs New again on the same stream: unchanged,
// then with another duplicate window, which the stream takes.
func TestProvisionIdempotent(t *testing.T) {
	t.Parallel()
	_, js := testenv.NATS(t).Connect(t)
	ctx := testCtx(t)
	p, err := publisher.New(ctx, js, nil)
	if err != nil {
		t.Fatal(err)
	}
	job := testJob(t, "idem", time.Now().Add(time.Hour))
	if err := p.Publish(ctx, job); err != nil {
		t.Fatal(err)
	}
	for _, dup := range []time.Duration{0, 2 * time.Minute} {
		if _, err := publisher.New(ctx, js, &publisher.Config{Duplicates: dup}); err != nil {
			t.Fatalf("New again (duplicates %v): %v", dup, err)
		}
		s, err := js.Stream(ctx, publisher.DefaultStream)
		if err != nil {
			t.Fatal(err)
		}
		si := s.CachedInfo()
		if want := cmp.Or(dup, publisher.DefaultDuplicates); si.Config.Duplicates != want {
			t.Fatalf("duplicates %v, want %v", si.Config.Duplicates, want)
		}
		if si.State.Msgs != 1 {
			t.Fatalf("re-provisioning changed the stored messages: %d", si.State.Msgs)
		}
	}
	// A change the server cannot make is an error, not a silent new stream.
	_, err = publisher.New(ctx, js, &publisher.Config{Storage: publisher.StorageMemory})
	if !errors.Is(err, publisher.ErrProvision) {
		t.Fatalf("changing storage: %v, want ErrProvision", err)
	}
}

// TestOldServerRefused runs against Debian's nats-server 2.9.10, which stores
// schedule messages and never fires them.
func TestOldServerRefused(t *testing.T) {
	t.Parallel()
	srv := testenv.OldNATSProcess(t)
	_, js := srv.Connect(t)
	ctx := testCtx(t)
	_, err := publisher.New(ctx, js, nil)
	if !errors.Is(err, publisher.ErrServerTooOld) {
		t.Fatalf("New on nats-server %s: %v, want ErrServerTooOld", srv.Version, err)
	}
	for _, want := range []string{srv.Version, "2.9.10", "2.12"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name %q", err, want)
		}
	}
	// The version is checked before anything is created: the old server has
	// no stream at all (it would have accepted one, see
	// TestSchedulesDisabledOnOldServer).
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		t.Fatalf("stream %q exists on the old server", name)
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestScheduleFires(t *testing.T) {
	t.Parallel()
	p, js := newPublisher(t, nil)
	col := collect(t, p, js)
	ctx := testCtx(t)
	job := testJob(t, "billing.recompute", time.Now().Add(1500*time.Millisecond)) // dots in the type are fine
	if err := p.Publish(ctx, job); err != nil {
		t.Fatal(err)
	}
	got := col.waitN(t, 1, time.Until(job.DueAt)+maxLate)
	if len(got) != 1 {
		t.Fatalf("%d messages by due+%v, want 1", len(got), maxLate)
	}
	f := got[0]
	if st := f.stored(t); st.Before(job.DueAt) || f.at.Before(job.DueAt) {
		t.Fatalf("fired early: stored %v, received %v, due %v", st, f.at, job.DueAt)
	}
	t.Logf("fired %v after due (received %v after)", f.stored(t).Sub(job.DueAt), f.at.Sub(job.DueAt))
	if s := f.msg.Subject(); s != p.Subjects().Run(job.Type, job.Key, job.Token) || !strings.HasPrefix(s, "co.run.billing.recompute.") {
		t.Fatalf("fired on %s", s)
	}
	h := f.msg.Headers()
	if want := p.Subjects().Schedule(job.Type, job.Key, job.Token); h.Get(jetstream.SchedulerHeader) != want {
		t.Fatalf("Nats-Scheduler %q, want %q", h.Get(jetstream.SchedulerHeader), want)
	}
	dec, err := publisher.DecodeJob(h, f.msg.Data())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(dec, job) {
		t.Fatalf("fired job differs:\n got %+v\nwant %+v", dec, job)
	}
	// The schedule itself is gone once fired.
	s, _ := js.Stream(ctx, p.Stream())
	if _, err := s.GetLastMsgForSubject(ctx, p.Subjects().KeySchedules(job.Type, job.Key)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("schedule message still stored: %v", err)
	}
}

// TestSubSecondPrecision: a due time with a large fraction of a second must
// not fire at the whole second before it (jetstream.WithScheduleAt would).
func TestSubSecondPrecision(t *testing.T) {
	t.Parallel()
	p, js := newPublisher(t, nil)
	col := collect(t, p, js)
	due := time.Now().Add(1300 * time.Millisecond)
	if frac := due.Sub(due.Truncate(time.Second)); frac < 700*time.Millisecond {
		due = due.Add(700*time.Millisecond - frac) // truncating would fire >= 0.7 s early
	}
	job := testJob(t, "precise", due)
	if err := p.Publish(testCtx(t), job); err != nil {
		t.Fatal(err)
	}
	got := col.waitN(t, 1, time.Until(job.DueAt)+maxLate)
	if len(got) != 1 {
		t.Fatalf("%d messages", len(got))
	}
	if st := got[0].stored(t); st.Before(job.DueAt) {
		t.Fatalf("fired %v before due %v", job.DueAt.Sub(st), job.DueAt)
	} else {
		t.Logf("fired %v after due", st.Sub(job.DueAt))
	}
}

// TestReschedule: a later version of a round replaces its pending schedule;
// the same version again is stored once.
func TestReschedule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		second  func(first debounce.Job) debounce.Job
		wantVer int
	}{
		{"later version replaces", func(j debounce.Job) debounce.Job {
			j.DueAt, j.Version = j.DueAt.Add(1500*time.Millisecond), j.Version+1
			return j
		}, 1},
		{"same version deduplicated", func(j debounce.Job) debounce.Job {
			j.DueAt = j.DueAt.Add(1500 * time.Millisecond) // ignored: same message id
			return j
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var dups atomic.Int32
			p, js := newPublisher(t, &publisher.Config{OnPublish: func(i publisher.PublishInfo) {
				if i.Duplicate {
					dups.Add(1)
				}
			}})
			col := collect(t, p, js)
			ctx := testCtx(t)
			first := testJob(t, "resched", time.Now().Add(time.Second))
			second := tt.second(first)
			for _, j := range []debounce.Job{first, second} {
				if err := p.Publish(ctx, j); err != nil {
					t.Fatal(err)
				}
			}
			wantDue := first.DueAt
			if tt.wantVer == 1 {
				wantDue = second.DueAt
			}
			got := col.waitN(t, 1, time.Until(wantDue)+maxLate)
			if len(got) != 1 {
				t.Fatalf("%d messages by due+%v", len(got), maxLate)
			}
			if st := got[0].stored(t); st.Before(wantDue) {
				t.Fatalf("fired at %v, before due %v", st, wantDue)
			}
			dec, err := publisher.DecodeJob(got[0].msg.Headers(), got[0].msg.Data())
			if err != nil {
				t.Fatal(err)
			}
			if dec.Version != tt.wantVer || !dec.DueAt.Equal(wantDue) {
				t.Fatalf("fired version %d due %v, want %d due %v", dec.Version, dec.DueAt, tt.wantVer, wantDue)
			}
			col.quietUntil(t, 1, second.DueAt.Add(1500*time.Millisecond))
			if wantDups := int32(1 - tt.wantVer); dups.Load() != wantDups {
				t.Fatalf("%d duplicate acks, want %d", dups.Load(), wantDups)
			}
		})
	}
}

// TestRoundsOfOneKey: a new round of a key never replaces the pending
// schedule of the previous round; bypassed jobs (no token) never replace nor
// deduplicate anything.
func TestRoundsOfOneKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		tokens []debounce.Token
	}{
		{"two rounds", []debounce.Token{randomToken(), randomToken()}},
		{"bypassed twice", []debounce.Token{0, 0}},
		{"bypassed and a round", []debounce.Token{0, randomToken()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, js := newPublisher(t, nil)
			col := collect(t, p, js)
			ctx := testCtx(t)
			base := testJob(t, "rounds", time.Now().Add(time.Second))
			for _, tok := range tt.tokens {
				j := base
				j.Token = tok
				if err := p.Publish(ctx, j); err != nil {
					t.Fatal(err)
				}
			}
			got := col.waitN(t, len(tt.tokens), time.Until(base.DueAt)+maxLate)
			if len(got) != len(tt.tokens) {
				t.Fatalf("%d fired, want %d", len(got), len(tt.tokens))
			}
			seen := map[debounce.Token]int{}
			for _, f := range got {
				dec, err := publisher.DecodeJob(f.msg.Headers(), f.msg.Data())
				if err != nil {
					t.Fatal(err)
				}
				if f.msg.Headers().Get(publisher.HeaderRound) == "" != (dec.Token == 0) {
					t.Fatalf("round header %q for token %v", f.msg.Headers().Get(publisher.HeaderRound), dec.Token)
				}
				seen[dec.Token]++
			}
			for _, tok := range tt.tokens {
				if seen[tok] == 0 {
					t.Fatalf("round %v did not fire: %v", tok, seen)
				}
			}
		})
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	p, js := newPublisher(t, nil)
	col := collect(t, p, js)
	ctx := testCtx(t)
	due := time.Now().Add(1500 * time.Millisecond)
	a := testJob(t, "cancel.me", due)
	b := a
	b.Token = randomToken()
	c := testJob(t, "cancel.me", due) // another key: left alone
	for _, j := range []debounce.Job{a, b, c} {
		if err := p.Publish(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		token debounce.Token
		want  uint64
	}{
		{a.Token, 1},       // one round
		{a.Token, 0},       // already gone
		{0, 1},             // every round of the key: b
		{randomToken(), 0}, // never scheduled
	}
	for _, s := range steps {
		n, err := p.Cancel(ctx, a.Type, a.Key, s.token)
		if err != nil {
			t.Fatal(err)
		}
		if n != s.want {
			t.Fatalf("Cancel(token %v) purged %d, want %d", s.token, n, s.want)
		}
	}
	got := col.waitN(t, 1, time.Until(due)+maxLate)
	col.quietUntil(t, 1, due.Add(2*time.Second))
	if len(got) != 1 || got[0].msg.Headers().Get(publisher.HeaderKey) != c.Key.String() {
		t.Fatalf("fired %d, want only the other key's job", len(got))
	}
	if _, err := p.Cancel(ctx, "bad..type", a.Key, 0); !errors.Is(err, publisher.ErrInvalidJob) {
		t.Fatalf("Cancel with a bad type: %v", err)
	}
}

// TestImmediate: an immediate job, and one whose due time has passed, go
// straight to the job subject.
func TestImmediate(t *testing.T) {
	t.Parallel()
	inAnHour := time.Now().Add(time.Hour)
	tests := []struct {
		name string
		due  time.Time
		now  func() time.Time
	}{
		{"immediate", time.Time{}, nil},
		{"past due", time.Now().Add(-time.Minute), nil},
		{"past due by the clock", inAnHour, func() time.Time { return inAnHour.Add(time.Millisecond) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, js := newPublisher(t, &publisher.Config{Now: tt.now})
			col := collect(t, p, js)
			job := testJob(t, "now", tt.due)
			sent := time.Now()
			if err := p.Publish(testCtx(t), job); err != nil {
				t.Fatal(err)
			}
			got := col.waitN(t, 1, 2*time.Second)
			if len(got) != 1 {
				t.Fatalf("%d messages within 2s", len(got))
			}
			if d := got[0].at.Sub(sent); d > time.Second {
				t.Fatalf("arrived %v after publish", d)
			}
			h := got[0].msg.Headers()
			if h.Get(jetstream.SchedulerHeader) != "" || h.Get(jetstream.ScheduleHeader) != "" {
				t.Fatalf("immediate job went through a schedule: %v", h)
			}
			if (h.Get(publisher.HeaderDueAt) == "") != tt.due.IsZero() {
				t.Fatalf("Coalesce-Due-At %q for due %v", h.Get(publisher.HeaderDueAt), tt.due)
			}
			dec, err := publisher.DecodeJob(h, got[0].msg.Data())
			if err != nil || !reflect.DeepEqual(dec, job) {
				t.Fatalf("decoded %+v, %v; want %+v", dec, err, job)
			}
		})
	}
}

// TestSeparateServerProcess runs a schedule through a nats-server process
// built from go.mod, not the one embedded in the test binary.
func TestSeparateServerProcess(t *testing.T) {
	t.Parallel()
	srv := testenv.NATSProcess(t)
	_, js := srv.Connect(t)
	ctx := testCtx(t)
	p, err := publisher.New(ctx, js, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.ServerVersion() != srv.Version {
		t.Fatalf("publisher saw %s, server is %s", p.ServerVersion(), srv.Version)
	}
	col := collect(t, p, js)
	job := testJob(t, "separate", time.Now().Add(1200*time.Millisecond))
	if err := p.Publish(ctx, job); err != nil {
		t.Fatal(err)
	}
	got := col.waitN(t, 1, time.Until(job.DueAt)+maxLate)
	if len(got) != 1 {
		t.Fatalf("%d messages", len(got))
	}
	if st := got[0].stored(t); st.Before(job.DueAt) {
		t.Fatalf("fired early: %v < %v", st, job.DueAt)
	}
}

// TestConcurrentPublish: 50 goroutines publish 2,000 schedules on one
// connection; every one fires.
func TestConcurrentPublish(t *testing.T) {
	t.Parallel()
	const workers, perWorker = 50, 40
	var attempts atomic.Int64
	p, js := newPublisher(t, &publisher.Config{OnPublish: func(i publisher.PublishInfo) { attempts.Add(int64(i.Attempts)) }})
	col := collect(t, p, js)
	ctx := testCtx(t)
	due := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				j := testJob(t, fmt.Sprintf("bulk.w%d", w%5), due.Add(time.Duration(i)*time.Millisecond))
				if err := p.Publish(ctx, j); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("published %d schedules in %v (%d attempts)", workers*perWorker, time.Since(start), attempts.Load())
	got := col.waitN(t, workers*perWorker, time.Until(due)+10*time.Second)
	if len(got) != workers*perWorker {
		t.Fatalf("%d of %d schedules fired", len(got), workers*perWorker)
	}
	rounds := map[string]bool{}
	for _, f := range got {
		if f.msg.Headers().Get(jetstream.SchedulerHeader) == "" {
			t.Fatal("a job arrived without going through a schedule")
		}
		rounds[f.msg.Headers().Get(publisher.HeaderRound)] = true
	}
	if len(rounds) != workers*perWorker {
		t.Fatalf("%d distinct rounds fired", len(rounds))
	}
}

// TestRetryAcrossRestart: publishes during a server outage are retried until
// the server is back, and stored once (the message id deduplicates attempts
// the client had buffered).
func TestRetryAcrossRestart(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	_, js := srv.Connect(t)
	ctx := testCtx(t)
	var maxAttempts atomic.Int64
	p, err := publisher.New(ctx, js, &publisher.Config{
		AckTimeout: 250 * time.Millisecond, MaxAttempts: 40, RetryBackoff: 20 * time.Millisecond,
		OnPublish: func(i publisher.PublishInfo) {
			if int64(i.Attempts) > maxAttempts.Load() {
				maxAttempts.Store(int64(i.Attempts))
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	restarted := make(chan error, 1)
	time.AfterFunc(600*time.Millisecond, func() { restarted <- srv.Start() }) // the outage
	jobs := []debounce.Job{testJob(t, "outage", time.Time{}), testJob(t, "outage", time.Now().Add(5*time.Second))}
	for _, j := range jobs {
		if err := p.Publish(ctx, j); err != nil {
			t.Fatalf("publish across a restart: %v", err)
		}
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	if maxAttempts.Load() < 2 {
		t.Fatalf("published during an outage in %d attempt(s)", maxAttempts.Load())
	}
	s, err := js.Stream(ctx, p.Stream())
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 2 {
		t.Fatalf("%d messages stored, want 2 (one job, one schedule)", n)
	}
}

func TestPublishErrors(t *testing.T) {
	t.Parallel()
	p, _ := newPublisher(t, nil)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		mutate  func(*debounce.Job)
		wantErr []error
	}{
		{"empty type", t.Context(), func(j *debounce.Job) { j.Type = "" }, []error{publisher.ErrInvalidJob}},
		{"empty subject token", t.Context(), func(j *debounce.Job) { j.Type = "a..b" }, []error{publisher.ErrInvalidJob}},
		{"trailing dot", t.Context(), func(j *debounce.Job) { j.Type = "a." }, []error{publisher.ErrInvalidJob}},
		{"wildcard", t.Context(), func(j *debounce.Job) { j.Type = "a.>" }, []error{publisher.ErrInvalidJob}},
		{"header injection", t.Context(), func(j *debounce.Job) { j.TraceParent = "00-x\r\nNats-Msg-Id: y" }, []error{publisher.ErrInvalidJob}},
		{"negative version", t.Context(), func(j *debounce.Job) { j.Version = -1 }, []error{publisher.ErrInvalidJob}},
		{"cancelled context", cancelled, func(*debounce.Job) {}, []error{publisher.ErrPublish, context.Canceled}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j := testJob(t, "errs", time.Now().Add(time.Hour))
			tt.mutate(&j)
			err := p.Publish(tt.ctx, j)
			for _, want := range tt.wantErr {
				if !errors.Is(err, want) {
					t.Fatalf("Publish: %v, want %v", err, want)
				}
			}
		})
	}
}

func TestPublishBatch(t *testing.T) {
	t.Parallel()
	p, js := newPublisher(t, nil)
	col := collect(t, p, js)
	jobs := []debounce.Job{
		testJob(t, "batch", time.Time{}),
		testJob(t, "bad..type", time.Time{}),
		testJob(t, "batch", time.Now().Add(time.Second)),
	}
	errs := p.PublishBatch(testCtx(t), jobs)
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], publisher.ErrInvalidJob) {
		t.Fatalf("PublishBatch errors %v", errs)
	}
	if got := col.waitN(t, 2, time.Until(jobs[2].DueAt)+maxLate); len(got) != 2 {
		t.Fatalf("%d fired, want 2", len(got))
	}
}

// TestRescheduleToNow: a later version of a round due now (an accumulated
// round that filled up) replaces the pending schedule and fires at once;
// the pending one never fires.
func TestRescheduleToNow(t *testing.T) {
	t.Parallel()
	p, js := newPublisher(t, nil)
	col := collect(t, p, js)
	ctx := testCtx(t)
	job := testJob(t, "fill", time.Now().Add(3*time.Second))
	if err := p.Publish(ctx, job); err != nil {
		t.Fatal(err)
	}
	now := job
	now.Version, now.DueAt = 1, time.Now()
	sent := time.Now()
	if err := p.Publish(ctx, now); err != nil {
		t.Fatal(err)
	}
	got := col.waitN(t, 1, 2*time.Second)
	if d := got[0].at.Sub(sent); d > time.Second {
		t.Fatalf("the reschedule to now fired %v later", d)
	}
	if v := got[0].msg.Headers().Get(publisher.HeaderVersion); v != "1" {
		t.Fatalf("fired version %s, want 1", v)
	}
	col.quietUntil(t, 1, job.DueAt.Add(2*time.Second)) // the version 0 schedule was replaced
}

// TestJobTooLarge: a job over the server's max payload can never be stored.
// JobFits says so before anything is reserved, Publish fails at once with
// ErrJobTooLarge (one attempt, not five), and a job just within the limit
// (less the room kept for reschedule and dead-letter headers) fits.
func TestJobTooLarge(t *testing.T) {
	t.Parallel()
	p, _ := newPublisher(t, nil)
	limit := p.MaxPayload()
	if limit < 1<<16 {
		t.Fatalf("MaxPayload %d", limit)
	}
	arg := func(n int) json.RawMessage { return json.RawMessage(`"` + strings.Repeat("a", n-2) + `"`) }
	big := testJob(t, "big", time.Now().Add(time.Hour))
	big.Args = arg(int(limit))
	if err := p.JobFits(big); !errors.Is(err, debounce.ErrJobTooLarge) || !strings.Contains(err.Error(), "max payload of") {
		t.Errorf("JobFits of a job over max payload: %v", err)
	}
	start := time.Now()
	err := p.Publish(testCtx(t), big)
	if !errors.Is(err, debounce.ErrJobTooLarge) || !errors.Is(err, publisher.ErrPublish) {
		t.Errorf("Publish of a job over max payload: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Publish took %v to refuse it", d)
	}
	fits := testJob(t, "big", time.Now().Add(time.Hour))
	fits.Args = arg(int(limit) - 4<<10)
	if err := p.JobFits(fits); err != nil {
		t.Errorf("JobFits of a job 4 KiB under max payload: %v", err)
	}
	if err := p.Publish(testCtx(t), fits); err != nil {
		t.Errorf("Publish of a job JobFits accepts: %v", err)
	}
}

// TestProvisionKeepsTheOperatorsSettings: New on a stream an operator has
// edited keeps what it does not own (extra subjects, a description,
// compression, more replicas than configured) and refuses, leaving the
// stream as it was, a limit under which JetStream would drop pending
// schedules to make room (max messages, bytes, messages per subject: the
// only discard policy schedules allow is discard-old). It used to replace
// the whole configuration, removing them.
func TestProvisionKeepsTheOperatorsSettings(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	t.Run("kept", func(t *testing.T) {
		t.Parallel()
		_, js := testenv.NATS(t).Connect(t)
		if _, err := publisher.New(ctx, js, nil); err != nil {
			t.Fatal(err)
		}
		s, _ := js.Stream(ctx, publisher.DefaultStream)
		c := s.CachedInfo().Config
		c.Subjects = append(c.Subjects, "ops.audit.>")
		c.Description = "edited by ops"
		c.Compression = jetstream.S2Compression
		if _, err := js.UpdateStream(ctx, c); err != nil {
			t.Fatal(err)
		}
		if _, err := publisher.New(ctx, js, &publisher.Config{Duplicates: 2 * time.Minute}); err != nil {
			t.Fatalf("New on the edited stream: %v", err)
		}
		s, _ = js.Stream(ctx, publisher.DefaultStream)
		got := s.CachedInfo().Config
		if !slices.Contains(got.Subjects, "ops.audit.>") || !slices.Contains(got.Subjects, "co.run.>") ||
			got.Description != "edited by ops" || got.Compression != jetstream.S2Compression || got.Duplicates != 2*time.Minute {
			t.Errorf("after New: subjects %v, description %q, compression %v, duplicates %v", got.Subjects, got.Description, got.Compression, got.Duplicates)
		}
	})
	for _, lim := range []struct {
		name string
		set  func(*jetstream.StreamConfig)
	}{
		{"max_msgs", func(c *jetstream.StreamConfig) { c.MaxMsgs = 2 }},
		{"max_bytes", func(c *jetstream.StreamConfig) { c.MaxBytes = 1 << 20 }},
		{"max_msgs_per_subject", func(c *jetstream.StreamConfig) { c.MaxMsgsPerSubject = 5 }},
	} {
		t.Run(lim.name, func(t *testing.T) {
			t.Parallel()
			_, js := testenv.NATS(t).Connect(t)
			if _, err := publisher.New(ctx, js, nil); err != nil {
				t.Fatal(err)
			}
			s, _ := js.Stream(ctx, publisher.DefaultStream)
			c := s.CachedInfo().Config
			lim.set(&c)
			if _, err := js.UpdateStream(ctx, c); err != nil {
				t.Fatal(err)
			}
			_, err := publisher.New(ctx, js, nil)
			if !errors.Is(err, publisher.ErrProvision) || !strings.Contains(err.Error(), lim.name) || !strings.Contains(err.Error(), "drop") {
				t.Fatalf("New on a stream with %s: %v, want ErrProvision naming it", lim.name, err)
			}
			s, _ = js.Stream(ctx, publisher.DefaultStream)
			if after := s.CachedInfo().Config; !reflect.DeepEqual(after, c) {
				t.Errorf("the refusal changed the stream:\n%+v\nwas\n%+v", after, c)
			}
		})
	}
}
