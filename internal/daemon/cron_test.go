package daemon_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/daemon"
	"github.com/coalesce-io/coalesce/internal/testenv"
)

// TestCronReplicasOutOfPhaseShareTicks: two replicas started 700 ms apart run
// an @every 2s rule. Ticks are named by their scheduled time on a grid both
// share (the Unix epoch), so they claim the same ticks and each is submitted
// once. Named by each replica's own start phase, the claims never collided
// and every replica submitted every tick.
func TestCronReplicasOutOfPhaseShareTicks(t *testing.T) {
	t.Parallel()
	rdb := testenv.SharedRedis(t).Client(t)
	prefix := testenv.Prefix(t)
	policy := []debounce.Policy{{Type: "sweep", Mode: debounce.ModeDedup, Until: debounce.UntilExpiry, TTL: time.Hour}}
	rule := daemon.CronRule{Name: "sweep", Schedule: "@every 2s", Event: debounce.Event{Type: "sweep", Args: json.RawMessage(`{}`)}}
	var crons []*daemon.Cron
	var co *debounce.Coalescer
	start := time.Now()
	for i := range 2 {
		if i == 1 {
			time.Sleep(700 * time.Millisecond)
		}
		var err error
		co, err = debounce.New(debounce.Config{Redis: rdb, Publisher: debounce.PublisherFunc(func(context.Context, debounce.Job) error { return nil }),
			Policies: policy, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		cr, err := daemon.StartCron([]daemon.CronRule{rule}, co, rdb, prefix, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		crons = append(crons, cr)
	}
	time.Sleep(5 * time.Second)
	for _, cr := range crons {
		cr.Stop()
	}
	elapsed := time.Since(start)
	keys, err := rdb.Keys(context.Background(), prefix+"cron:sweep:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if max := int(elapsed/(2*time.Second)) + 1; len(keys) == 0 || len(keys) > max {
		t.Errorf("%d ticks claimed in %v of an @every 2s rule (%v); want at most %d", len(keys), elapsed.Round(time.Millisecond), keys, max)
	}
	for _, k := range keys {
		sec, _ := strconv.ParseInt(k[strings.LastIndexByte(k, ':')+1:], 10, 64)
		if sec%2 != 0 {
			t.Errorf("tick %s is not on the 2s grid from the epoch", k)
		}
	}
	key, _ := co.RoundKeyOf(rule.Event)
	r, found, _ := co.Inspect(context.Background(), "sweep", key)
	if !found || r.Events != len(keys) {
		t.Errorf("the round counts %d events for %d ticks claimed: each tick must be submitted once", r.Events, len(keys))
	}
}
