package publisher

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"

	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestSchedulesDisabledOnOldServer skips the version check to show why it
// exists: nats-server 2.9 accepts the stream, silently drops
// allow_msg_schedules, and would then store schedules that never fire. The
// echoed config is checked too.
func TestSchedulesDisabledOnOldServer(t *testing.T) {
	t.Parallel()
	srv := testenv.OldNATSProcess(t)
	_, js := srv.Connect(t)
	p := &Publisher{js: js, cfg: Config{}.withDefaults()}
	p.log, p.version = p.cfg.Logger, srv.Version
	err := p.ensureStream(t.Context())
	if !errors.Is(err, ErrSchedulesDisabled) {
		t.Fatalf("ensureStream on nats-server %s: %v, want ErrSchedulesDisabled", srv.Version, err)
	}
	if !strings.Contains(err.Error(), srv.Version) {
		t.Fatalf("error does not name the server version: %v", err)
	}
	// The old server did create the stream, so checking the version first is
	// what keeps New from leaving one behind (TestOldServerRefused).
	s, err := js.Stream(t.Context(), DefaultStream)
	if err != nil {
		t.Fatalf("old server did not keep the stream: %v", err)
	}
	if s.CachedInfo().Config.AllowMsgSchedules {
		t.Fatal("old server echoed allow_msg_schedules")
	}
	// And it stores a schedule message without complaint, due at once, that
	// never fires (checked for half a second).
	m := &nats.Msg{Subject: "co.sched.x.k.t", Header: nats.Header{}}
	m.Header.Set(jetstream.ScheduleHeader, "@at "+time.Now().UTC().Format(time.RFC3339Nano))
	m.Header.Set(jetstream.ScheduleTargetHeader, "co.jobs.x")
	if _, err := js.PublishMsg(t.Context(), m); err != nil {
		t.Fatalf("old server refused a schedule message: %v", err)
	}
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if _, err := s.GetLastMsgForSubject(t.Context(), "co.jobs.x"); err == nil {
			t.Fatal("old server fired a schedule")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestCheckServerVersion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		version string
		ok      bool
	}{
		{"2.12.0", true},
		{"2.15.2", true},
		{"v2.12.0-RC.3", true},
		{"2.13", true},
		{"3.0.0", true},
		{"2.11.9", false},
		{"2.9.10", false},
		{"1.99.0", false},
		{"", false},
		{"garbage", false},
		{"2.x.1", false},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			t.Parallel()
			err := CheckServerVersion(tt.version)
			if (err == nil) != tt.ok {
				t.Fatalf("CheckServerVersion(%q) = %v, want ok=%v", tt.version, err, tt.ok)
			}
			if err != nil && (!errors.Is(err, ErrServerTooOld) || !strings.Contains(err.Error(), "2.12") || !strings.Contains(err.Error(), tt.version)) {
				t.Fatalf("error %q must wrap ErrServerTooOld and name %q and 2.12", err, tt.version)
			}
		})
	}
}

func TestRetryable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want bool
	}{
		{jetstream.ErrTooManyStalledMsgs, true},
		{jetstream.ErrAsyncPublishTimeout, true},
		{jetstream.ErrNoStreamResponse, true},
		{nats.ErrNoResponders, true},
		{nats.ErrTimeout, true},
		{nats.ErrDisconnected, true},
		{nats.ErrConnectionClosed, false},
		{jetstream.ErrMessageSchedulesDisabled, false},
		{jetstream.ErrScheduleTargetInvalid, false},
		{errors.New("other"), false},
	}
	for _, tt := range tests {
		t.Run(tt.err.Error(), func(t *testing.T) {
			t.Parallel()
			if got := retryable(tt.err); got != tt.want {
				t.Fatalf("retryable(%v) = %v", tt.err, got)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	p := &Publisher{cfg: Config{}.withDefaults()}
	for attempt := 1; attempt < 40; attempt++ {
		d := p.backoff(attempt)
		want := min(DefaultRetryBackoff<<min(attempt-1, 16), MaxRetryBackoff)
		if d < want/2 || d > want {
			t.Fatalf("backoff(%d) = %v, want %v..%v", attempt, d, want/2, want)
		}
	}
}

// TestUncertainPublishes: a publish that failed after an attempt was sent and
// never answered may be stored; Publish says so (debounce.ErrMaybePublished)
// and the Coalescer keeps the round instead of backing it out. A failure
// the server answered is definite.
func TestUncertainPublishes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err       error
		uncertain bool
	}{
		{jetstream.ErrAsyncPublishTimeout, true},
		{context.DeadlineExceeded, true},
		{nats.ErrDisconnected, true},
		{nats.ErrNoResponders, false},
		{jetstream.ErrNoStreamResponse, false},
		{&jetstream.APIError{Code: 503, Description: "no suitable peers"}, false},
	} {
		if got := unanswered(tc.err); got != tc.uncertain {
			t.Errorf("unanswered(%v) = %v, want %v", tc.err, got, tc.uncertain)
		}
	}
	p := &Publisher{cfg: Config{}.withDefaults()}
	job := debounce.Job{Type: "t", Token: 1}
	m := &nats.Msg{Subject: "co.run.t"}
	if err := p.finish(context.Background(), job, m, nil, 2, time.Now(), &uncertainError{jetstream.ErrAsyncPublishTimeout}); !errors.Is(err, debounce.ErrMaybePublished) || !errors.Is(err, ErrPublish) {
		t.Errorf("uncertain failure: %v, want ErrPublish and debounce.ErrMaybePublished", err)
	}
	if err := p.finish(context.Background(), job, m, nil, 1, time.Now(), nats.ErrNoResponders); errors.Is(err, debounce.ErrMaybePublished) || !errors.Is(err, ErrPublish) {
		t.Errorf("definite failure: %v, want ErrPublish only", err)
	}
}
