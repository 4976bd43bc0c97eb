package publisher

import (
	"fmt"
	"strings"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/fingerprint"
)

// Subjects names the NATS subjects of one stream prefix. The worker and the
// admin tools use it to find jobs, schedules and dead letters:
//
//	<prefix>.run.<type>.<key hex>.<token hex>   the job of one round, to run (schedule target)
//	<prefix>.sched.<type>.<key hex>.<token hex> the pending schedule of one round
//	<prefix>.dead.<type>                        dead letters
//	<prefix>.jobs.<type>                        jobs published before the run subjects (still consumed)
//
// A job type may contain dots; the key and token are always the last two
// tokens of a run or schedule subject, so subjects of different types never
// collide, and a round's job can be looked up by its subject: the reaper
// tells a job waiting for a worker from one the stream lost that way. A job
// published without a reservation (bypassed) has a one-off token there.
type Subjects struct {
	Prefix string // DefaultPrefix when empty
}

func (s Subjects) prefix() string {
	if s.Prefix == "" {
		return DefaultPrefix
	}
	return s.Prefix
}

// Run returns the subject the job of one round of jobType is published (or
// fired) on.
func (s Subjects) Run(jobType string, key debounce.RoundKey, token debounce.Token) string {
	return s.run(jobType, key, token.String())
}

// RunOf returns the subject job is published on: its round's run subject,
// or for a bypassed job the one its Bypass names (which must be set).
func (s Subjects) RunOf(job debounce.Job) string {
	if job.Token == 0 {
		return s.run(job.Type, job.Key, job.Bypass)
	}
	return s.run(job.Type, job.Key, job.Token.String())
}

func (s Subjects) run(jobType string, key debounce.RoundKey, round string) string {
	return s.prefix() + ".run." + jobType + "." + key.String() + "." + round
}

// Runs returns a wildcard subject matching the jobs of every round of
// jobType, for a consumer filter.
func (s Subjects) Runs(jobType string) string { return s.prefix() + ".run." + jobType + ".*.*" }

// RunType returns the job type of a run subject, or "" when subject is not one.
func (s Subjects) RunType(subject string) string {
	rest, ok := strings.CutPrefix(subject, s.prefix()+".run.")
	if !ok {
		return ""
	}
	for range 2 {
		i := strings.LastIndexByte(rest, '.')
		if i <= 0 {
			return ""
		}
		rest = rest[:i]
	}
	return rest
}

// Job returns the subject coalesce published the jobs of jobType on before
// run subjects: a worker still consumes it, so that jobs queued by an older
// producer run.
func (s Subjects) Job(jobType string) string { return s.prefix() + ".jobs." + jobType }

// Schedule returns the subject of one round's pending schedule. Publishing
// on it again replaces that schedule (a reschedule); another round of the
// same key has another token, hence its own subject. For the zero token it
// returns KeySchedules (every round of key), which is what Cancel purges.
func (s Subjects) Schedule(jobType string, key debounce.RoundKey, token debounce.Token) string {
	if token == 0 {
		return s.KeySchedules(jobType, key)
	}
	return s.roundSchedule(jobType, key, token.String())
}

func (s Subjects) roundSchedule(jobType string, key debounce.RoundKey, round string) string {
	return s.prefix() + ".sched." + jobType + "." + key.String() + "." + round
}

// KeySchedules returns a wildcard subject matching the pending schedules of
// every round of key.
func (s Subjects) KeySchedules(jobType string, key debounce.RoundKey) string {
	return s.prefix() + ".sched." + jobType + "." + key.String() + ".*"
}

// Dead returns the dead-letter subject of jobType.
func (s Subjects) Dead(jobType string) string { return s.prefix() + ".dead." + jobType }

// Stream returns the subjects the stream must cover: schedules, jobs (run
// subjects and the older job subjects) and dead letters.
func (s Subjects) Stream() []string {
	p := s.prefix()
	return []string{p + ".sched.>", p + ".run.>", p + ".jobs.>", p + ".dead.>"}
}

// AllRuns returns a wildcard subject matching the jobs of every type, for a
// consumer filter. (Consumers must never cover the schedule subjects: on a
// WorkQueue stream consuming a schedule deletes it.)
func (s Subjects) AllRuns() string { return s.prefix() + ".run.>" }

// AllJobs returns a wildcard subject matching the older job subjects of
// every type.
func (s Subjects) AllJobs() string { return s.prefix() + ".jobs.>" }

// Consumer returns the filters of a consumer of jobType's jobs: its run
// subjects and its older job subject.
func (s Subjects) Consumer(jobType string) []string { return []string{s.Runs(jobType), s.Job(jobType)} }

// validateJobType checks jobType is a job type (fingerprint.ValidateType)
// that also makes a NATS subject: no empty tokens, so no ".." and no trailing ".".
func validateJobType(jobType string) error {
	if err := fingerprint.ValidateType(jobType); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	if strings.Contains(jobType, "..") || strings.HasSuffix(jobType, ".") {
		return fmt.Errorf("%w: job type %q has an empty subject token (\"..\" or a trailing \".\")", ErrInvalidJob, jobType)
	}
	return nil
}

// validatePrefix checks a subject prefix: dot-separated tokens without
// wildcards, whitespace or empty tokens.
func validatePrefix(p string) error {
	for tok := range strings.SplitSeq(p, ".") {
		if tok == "" || strings.ContainsAny(tok, "*> \t\r\n") {
			return fmt.Errorf("%w: Prefix %q must be dot-separated tokens without empty tokens, wildcards (* >) or whitespace", ErrInvalidConfig, p)
		}
	}
	return nil
}
