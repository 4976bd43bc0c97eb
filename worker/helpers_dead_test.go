package worker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/admin"
	"github.com/coalesce-io/coalesce/worker"
)

// diesOnce is a handler whose first run fails for good (its job is
// dead-lettered) and whose later runs succeed; it records every run.
type diesOnce struct {
	mu   sync.Mutex
	runs []*worker.Job
}

func (d *diesOnce) handle(_ context.Context, j *worker.Job) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.runs = append(d.runs, j)
	if len(d.runs) == 1 {
		return worker.Permanent(errors.New("the first run fails for good"))
	}
	return nil
}

// ran returns the runs so far.
func (d *diesOnce) ran() []*worker.Job {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*worker.Job(nil), d.runs...)
}

// oneDeadLetter waits up to limit for the one dead letter of typ on s's
// stream, and returns it with the dead letters' admin.
func oneDeadLetter(t *testing.T, s *stack, typ string, limit time.Duration) (admin.Dead, admin.DeadLetter) {
	t.Helper()
	dead := admin.Dead{JS: s.js, Stream: s.pub.Stream(), Subjects: s.pub.Subjects()}
	var letters []admin.DeadLetter
	waitFor(t, limit, "the dead letter", func() bool {
		var err error
		letters, err = dead.List(context.Background(), typ, "", 10)
		return err == nil && len(letters) == 1
	})
	return dead, letters[0]
}

// countResults returns worker hooks that count the deliveries that found
// their key busy and the jobs dead-lettered.
func countResults(busy, dead *atomic.Int64) worker.Hooks {
	return worker.Hooks{Job: func(_ string, r worker.JobResult, _ debounce.ReleaseResult, _ time.Duration) {
		switch r {
		case worker.JobKeyBusy:
			busy.Add(1)
		case worker.JobDead:
			dead.Add(1)
		}
	}}
}
