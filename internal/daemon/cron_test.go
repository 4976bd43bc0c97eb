package daemon_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/chaos"
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

// TestCronLateTickClaimsItsOwnTime: the claim of one tick hangs on a stalled
// Redis connection past the next tick. The late tick still claims its own
// scheduled time, and the one it overran is claimed right after it: no tick
// of the grid is skipped, none claimed twice. (The claim was once computed
// at fire time from the clock, so a tick more than 2 s late took the next
// tick's name and that tick was skipped everywhere.)
func TestCronLateTickClaimsItsOwnTime(t *testing.T) {
	t.Parallel()
	shared := testenv.SharedRedis(t)
	rdb := shared.Client(t)
	proxy, err := chaos.NewProxy(shared.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	// The claims go through the proxy; a long read timeout lets a stalled
	// claim land late instead of failing.
	slow := redis.NewClient(&redis.Options{Addr: proxy.Addr(), DisableIdentity: true, MaxRetries: -1, ReadTimeout: 20 * time.Second, WriteTimeout: 20 * time.Second})
	defer slow.Close()
	prefix := testenv.Prefix(t)
	policy := []debounce.Policy{{Type: "sweep", Mode: debounce.ModeDedup, Until: debounce.UntilExpiry, TTL: time.Hour}}
	rule := daemon.CronRule{Name: "sweep", Schedule: "@every 2s", Event: debounce.Event{Type: "sweep", Args: json.RawMessage(`{}`)}}
	co, err := debounce.New(debounce.Config{Redis: rdb, Publisher: debounce.PublisherFunc(func(context.Context, debounce.Job) error { return nil }),
		Policies: policy, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	cr, err := daemon.StartCron([]daemon.CronRule{rule}, co, slow, prefix, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	claims := func() []int64 {
		keys, err := rdb.Keys(context.Background(), prefix+"cron:sweep:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		var secs []int64
		for _, k := range keys {
			sec, _ := strconv.ParseInt(k[strings.LastIndexByte(k, ':')+1:], 10, 64)
			secs = append(secs, sec)
		}
		slices.Sort(secs)
		return secs
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(claims()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no tick claimed in 5 s of an @every 2s rule")
		}
		time.Sleep(20 * time.Millisecond)
	}
	first := claims()[0]
	// Stall from 1 s after the first tick to 7 s after it: the next tick's
	// claim (due at first+2) lands at about first+7, so the tick due at
	// first+4 fires 3 s late, when the clock's nearest tick is first+6.
	time.Sleep(time.Until(time.Unix(first+1, 0)))
	proxy.Stall(true)
	time.Sleep(time.Until(time.Unix(first+7, 0)))
	proxy.Stall(false)
	time.Sleep(time.Until(time.Unix(first+9, 0).Add(500 * time.Millisecond)))
	cr.Stop()
	got := claims()
	want := []int64{first, first + 2, first + 4, first + 6, first + 8}
	if !slices.Equal(got, want) {
		t.Errorf("ticks claimed %v, want every tick of the grid once: %v", got, want)
	}
	key, _ := co.RoundKeyOf(rule.Event)
	r, found, _ := co.Inspect(context.Background(), "sweep", key)
	if !found || r.Events != len(got) {
		t.Errorf("the round counts %d events for %d ticks claimed: each tick must be submitted once", r.Events, len(got))
	}
}
