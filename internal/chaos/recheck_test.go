package chaos

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// meta is what a scenario saves beside its logs so that the checks can be
// run again on them (TestRecheck).
type meta struct {
	Scenario  string     `json:"scenario"`
	RedisLoss []Interval `json:"redis_loss"`
	// SnapshotLoss: SIGKILLs of an embedded daemon (the interval its
	// snapshot may lack).
	SnapshotLoss []Interval `json:"snapshot_loss,omitempty"`
	// AOFLoss: kills of an everysec redis-server holding answered writes
	// outside its AOF.
	AOFLoss []Interval `json:"aof_loss,omitempty"`
	// ClockSlack: how far the Redis clock may lag (embedded scenarios).
	ClockSlack time.Duration `json:"clock_slack,omitempty"`
	Throttle   time.Duration `json:"throttle_window"`
	Faults     []string      `json:"faults"`
	// HeldInRedis: debounce rounds were held in Redis until due
	// (COALESCE_CHAOS_SCHEDULES=redis).
	HeldInRedis bool `json:"held_in_redis,omitempty"`
}

func writeMeta(path string, m meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// TestRecheck runs the checks again on the logs a run kept
// (COALESCE_CHAOS_KEEP=dir), one scenario folder at a time:
// COALESCE_CHAOS_RECHECK=dir go test ./internal/chaos -run TestRecheck -v
func TestRecheck(t *testing.T) {
	root := os.Getenv("COALESCE_CHAOS_RECHECK")
	if root == "" {
		t.Skip("set COALESCE_CHAOS_RECHECK to a folder kept with COALESCE_CHAOS_KEEP")
	}
	dirs, _ := filepath.Glob(filepath.Join(root, "*", "meta.json"))
	for _, mf := range dirs {
		dir := filepath.Dir(mf)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			var m meta
			b, err := os.ReadFile(mf)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			events := readJSONL[EventRecord](t, filepath.Join(dir, "events.jsonl"))
			files, _ := filepath.Glob(filepath.Join(dir, "jobs-*.jsonl"))
			var starts []JobStart
			for _, f := range files {
				starts = append(starts, readJSONL[JobStart](t, f)...)
			}
			held := m.HeldInRedis || os.Getenv("COALESCE_CHAOS_SCHEDULES") == "redis" // logs kept before the field
			res := Check(Input{Events: events, Starts: starts, RedisLoss: m.RedisLoss, SnapshotLoss: m.SnapshotLoss, AOFLoss: m.AOFLoss, ClockSlack: m.ClockSlack, HeldInRedis: held,
				Throttle:   map[string]time.Duration{"throttle": m.Throttle},
				Accumulate: map[string]bool{"accum": true}, Last: map[string]bool{"extend": true}})
			t.Logf("sent %d accepted %d rounds %d starts %d lost %d dups %d %v fencing %d artifacts %d (max %v) collisions %d (lost events in them %d) nominal-window-overlaps %d born-expired %d",
				res.Sent, res.Accepted, res.Rounds, res.JobsStarted, res.Lost, res.Dups, res.DupCauses, res.Fencing,
				res.Artifacts, res.ArtifactMax, res.TokenCollisions, res.LostToCollisions, res.StaleWindows, res.BornExpired)
			t.Logf("payload lost %d %v (items reached %d, last rounds %d); counts exact %d, more by unanswered %d, off %d; fencing explained %v",
				res.PayloadLost, res.PayloadCauses, res.PayloadItems, res.PayloadLast, res.CountExact, res.CountSurplus, res.CountOff, res.FencingExplained)
			for _, d := range append(append(append(res.LostDetail, res.DupDetail...), res.FenceDtl...), append(append(res.CollisionDetail, res.ArtifactDetail...), append(res.PayloadDetail, res.CountDetail...)...)...) {
				t.Log(d)
			}
		})
	}
}

func readJSONL[T any](t *testing.T, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err == nil {
			out = append(out, v)
		}
	}
	return out
}
