package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
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

// Cron runs the rules. Each tick is named by its scheduled time, on a grid
// every replica shares (a cron spec's wall-clock times; for @every D, the
// multiples of D since the Unix epoch), and claimed in Redis (SET NX on the
// rule and that time) before its event is submitted: replicas firing the
// same tick submit it once and open one round, however far apart they
// started, and a tick that fires late still claims its own time.
type Cron struct {
	co   *debounce.Coalescer
	rdb  redis.UniversalClient
	key  string
	m    *Metrics
	log  *slog.Logger
	now  func() time.Time
	stop chan struct{}
	done sync.WaitGroup
}

// StartCron schedules the rules and starts the clock.
func StartCron(rules []CronRule, co *debounce.Coalescer, rdb redis.UniversalClient, keyPrefix string, m *Metrics, log *slog.Logger) (*Cron, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cr := &Cron{co: co, rdb: rdb, key: keyPrefix + "cron:", m: m, log: log, now: time.Now, stop: make(chan struct{})}
	scheds := make([]cron.Schedule, len(rules))
	for i, r := range rules {
		sched, err := cronParser.Parse(r.Schedule)
		if err != nil {
			return nil, fmt.Errorf("cron %s: schedule %q: %w", r.Name, r.Schedule, err)
		}
		scheds[i] = gridSchedule(sched, r.Location)
	}
	for i, r := range rules {
		cr.done.Go(func() { cr.run(r, scheds[i]) })
	}
	return cr, nil
}

// gridSchedule makes a schedule whose times are the same whichever replica
// computes them: a cron spec in the rule's time zone, or @every D aligned
// to the Unix epoch (robfig's @every counts from the moment it starts).
func gridSchedule(s cron.Schedule, loc *time.Location) cron.Schedule {
	if loc == nil {
		loc = time.UTC
	}
	if every, ok := s.(cron.ConstantDelaySchedule); ok {
		return epochEvery{every.Delay}
	}
	return inLocation{s, loc}
}

// epochEvery is @every D on the grid of multiples of D since the epoch.
type epochEvery struct{ d time.Duration }

func (e epochEvery) Next(t time.Time) time.Time {
	return time.Unix(0, (t.UnixNano()/int64(e.d)+1)*int64(e.d))
}

// inLocation evaluates a schedule in the rule's time zone.
type inLocation struct {
	s   cron.Schedule
	loc *time.Location
}

func (l inLocation) Next(t time.Time) time.Time { return l.s.Next(t.In(l.loc)) }

// run fires the rule at each scheduled time until Stop. A tick whose time
// passed long ago (the process was stopped or starved) is not caught up:
// the next one comes from now.
func (cr *Cron) run(r CronRule, sched cron.Schedule) {
	tick := sched.Next(cr.now())
	for {
		t := time.NewTimer(time.Until(tick))
		select {
		case <-cr.stop:
			t.Stop()
			return
		case <-t.C:
		}
		cr.fire(r, tick)
		next := sched.Next(tick)
		if now := cr.now(); next.Before(now.Add(-time.Minute)) {
			next = sched.Next(now)
		}
		tick = next
	}
}

// fire claims the tick scheduled at tick and submits the rule's event.
func (cr *Cron) fire(r CronRule, tick time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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
func (cr *Cron) Stop() {
	close(cr.stop)
	cr.done.Wait()
}

// EventArgs is a helper for rules built from configuration.
func EventArgs(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage(`{}`)
	}
	return raw
}
