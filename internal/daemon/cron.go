package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/coalesce-io/coalesce/debounce"
)

// CronRule submits an event on a schedule, through the event type's policy.
type CronRule struct {
	Name     string
	Schedule string // robfig/cron/v3 spec with seconds ("0 */5 * * * *") or a descriptor ("@every 1m")
	Location *time.Location
	Event    debounce.Event
}

// CronParser parses the schedules CronRule accepts.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseCron checks a schedule spec.
func ParseCron(spec string) (cron.Schedule, error) { return cronParser.Parse(spec) }

// Cron runs the rules. Each tick is claimed in Redis (SET NX on the rule and
// the tick's scheduled time) before its event is submitted, so replicas of
// the daemon firing the same tick submit it once and open one round.
type Cron struct {
	c   *cron.Cron
	co  *debounce.Coalescer
	rdb redis.UniversalClient
	key string
	m   *Metrics
	log *slog.Logger
	now func() time.Time
}

// StartCron schedules the rules and starts the clock.
func StartCron(rules []CronRule, co *debounce.Coalescer, rdb redis.UniversalClient, keyPrefix string, m *Metrics, log *slog.Logger) (*Cron, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cr := &Cron{c: cron.New(cron.WithParser(cronParser), cron.WithSeconds()), co: co, rdb: rdb, key: keyPrefix + "cron:", m: m, log: log, now: time.Now}
	cr.c = cron.New(cron.WithParser(cronParser))
	for _, r := range rules {
		sched, err := cronParser.Parse(r.Schedule)
		if err != nil {
			return nil, fmt.Errorf("cron %s: schedule %q: %w", r.Name, r.Schedule, err)
		}
		loc := r.Location
		if loc == nil {
			loc = time.UTC
		}
		rule := r
		cr.c.Schedule(inLocation{sched, loc}, cron.FuncJob(func() { cr.tick(rule, sched, loc) }))
	}
	cr.c.Start()
	return cr, nil
}

// inLocation evaluates a schedule in the rule's time zone.
type inLocation struct {
	s   cron.Schedule
	loc *time.Location
}

func (l inLocation) Next(t time.Time) time.Time { return l.s.Next(t.In(l.loc)) }

// tickTime recovers the scheduled time being fired: the first scheduled time
// after now less a margin for clock skew between replicas.
func tickTime(sched cron.Schedule, loc *time.Location, now time.Time) time.Time {
	return sched.Next(now.Add(-2 * time.Second).In(loc))
}

func (cr *Cron) tick(r CronRule, sched cron.Schedule, loc *time.Location) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tick := tickTime(sched, loc, cr.now())
	claim := cr.key + r.Name + ":" + strconv.FormatInt(tick.Unix(), 10)
	won, err := cr.rdb.SetNX(ctx, claim, "1", 24*time.Hour).Result()
	result := "ok"
	switch {
	case err != nil:
		// Without Redis the decision would fail too; skip this tick.
		result = "error"
		cr.log.Warn("cron: cannot claim the tick", "rule", r.Name, "tick", tick, "err", err)
	case !won:
		result = "claimed_elsewhere"
	default:
		d, err := cr.co.Submit(ctx, r.Event)
		if err != nil {
			result = "error"
			cr.log.Warn("cron: submit failed", "rule", r.Name, "job_type", r.Event.Type, "err", err)
		} else {
			cr.log.Info("cron: submitted", "rule", r.Name, "job_type", r.Event.Type, "outcome", d.Outcome, "tick", tick)
		}
	}
	if cr.m != nil {
		cr.m.cron.WithLabelValues(r.Name, result).Inc()
	}
}

// Stop stops the clock and waits for ticks under way.
func (cr *Cron) Stop() { <-cr.c.Stop().Done() }

// EventArgs is a helper for rules built from configuration.
func EventArgs(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage(`{}`)
	}
	return raw
}
