package main

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/worker"
)

// jobLog counts the jobs `coalesce work` ran and logs one line per job that
// ran (at info: a worker's log is where an operator looks for "did my job
// run"; the worker package logs the failures itself) and one at shutdown.
type jobLog struct {
	log *slog.Logger
	// ran: deliveries run and acknowledged; failed: run, failed and sent
	// back; dead: dead-lettered; other: not run (done already, another
	// message of the round, a busy key, ...).
	ran, failed, dead, other atomic.Int64
}

// handler wraps h: each job that ran is logged with what it ran.
func (l *jobLog) handler(h worker.Handler) worker.Handler {
	return func(ctx context.Context, job *worker.Job) error {
		began := time.Now()
		err := h(ctx, job)
		if err == nil {
			attrs := []any{"job_type", job.Type, "key", job.Key.String(), "events", job.Summary.Events, "attempt", job.Attempt,
				"release", string(job.Release), "took", time.Since(began).Round(time.Millisecond)}
			if job.Token != 0 {
				attrs = append(attrs, "token", job.Token.String())
			}
			if job.Replay != "" {
				attrs = append(attrs, "replay_of", job.Replay)
			}
			l.log.InfoContext(ctx, "job ran", attrs...)
		}
		return err
	}
}

// hooks wraps the metrics' job hook to count each delivery's result.
func (l *jobLog) hooks(h worker.Hooks) worker.Hooks {
	next := h.Job
	h.Job = func(jobType string, result worker.JobResult, release debounce.ReleaseResult, took time.Duration) {
		switch result {
		case worker.JobOK:
			l.ran.Add(1)
		case worker.JobRetry:
			l.failed.Add(1)
		case worker.JobDead:
			l.dead.Add(1)
		default:
			l.other.Add(1)
		}
		if next != nil {
			next(jobType, result, release, took)
		}
	}
	return h
}

// stopping logs the start of the shutdown when ctx ends, and returns the
// func that logs its end with what this worker did.
func (l *jobLog) stopping(ctx context.Context) func() {
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			l.log.Info("shutting down: no new jobs; finishing the running ones")
		case <-done:
		}
	}()
	return func() {
		close(done)
		l.log.Info("stopped", "ran", l.ran.Load(), "failed", l.failed.Load(), "dead_lettered", l.dead.Load(), "not_run", l.other.Load())
	}
}
