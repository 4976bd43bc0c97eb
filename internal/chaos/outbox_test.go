package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/coalesce-io/coalesce/internal/pgtest"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/outbox"
)

// outboxYAML: one accumulate policy whose items are the events' ids, so a
// job's summary says exactly which committed rows reached it; the relay
// inside each `coalesce serve`.
func outboxYAML(pg string) string {
	return fmt.Sprintf(`worker:
  concurrency: 64
  ack_wait: 2s
policies:
  obx:
    mode: debounce
    window: 1s
    payload: accumulate
    item_field: eid
    max_items: 50
    key_fields: [tenant]
outbox:
  postgres: %s
  batch_size: 100
  poll_every: 200ms
`, pg)
}

// txLine is a chaosproducer log line (see chaosproducer.Line).
type txLine struct {
	EIDs     []string `json:"eids"`
	Sent     int64    `json:"sent"`
	At       int64    `json:"at"`
	Rollback bool     `json:"rollback"`
}

// TestChaosOutbox is scenario 14, outbox: two producer processes commit
// events to coalesce_outbox (1-3 rows a transaction, 10% rolled back on
// purpose) and are SIGKILLed every 0.7-1.5 s; two `coalesce serve` relays
// are SIGKILLed every 1-2 s; redis-server (AOF, everysec) is SIGKILLed and
// restarted every 1.5-2.5 s. Payload-level I1 from commit to job: every
// event whose commit returned is an item of a job that started after the
// commit; no rolled-back event reaches a job; nothing is left in the
// outbox or moved to its dead rows.
func TestChaosOutbox(t *testing.T) { chaosOutbox(t, false) }

// TestChaosOutboxEmbedded is scenario 14b: as 14, with one `coalesce serve`
// relaying on its embedded default (the workers connected to its NATS and
// Redis), SIGKILLed every 1-2 s and started again on its data folder. The
// relay deletes each row once decided, so the embedded Redis's journal is
// all that keeps those events.
func TestChaosOutboxEmbedded(t *testing.T) { chaosOutbox(t, true) }

func chaosOutbox(t *testing.T, embedded bool) {
	long := os.Getenv("COALESCE_CHAOS_LONG") == "1"
	if testing.Short() && !long {
		t.Skip("chaos suite: skipped with -short")
	}
	// The long form runs at least 2 minutes and until 100,000 events are
	// committed (at most 40 minutes).
	loadFor, target, limit := 10*time.Second, 0, 60*time.Second
	if long {
		loadFor, target, limit = 2*time.Minute, 100_000, 3*time.Minute
	}
	bins := buildBinaries(t)
	producerBin := filepath.Join(t.TempDir(), "chaosproducer")
	build := exec.Command("go", "build", "-o", producerBin, "./internal/chaos/chaosproducer")
	build.Dir = bins.root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build chaosproducer: %v: %s", err, out)
	}
	pg, err := pgtest.Start()
	if err != nil {
		if os.Getenv(testenv.RequireEnv) == "1" {
			t.Fatalf("postgres: %v", err)
		}
		t.Skipf("postgres: %v", err)
	}
	t.Cleanup(pg.Stop)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := outbox.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}

	name := "14-outbox"
	if embedded {
		name = "14b-outbox-embedded"
	}
	e := &env{t: t, dir: scenarioDir(t, name), proxies: map[string]*Proxy{}, jobOffsets: map[string]int64{}, redisKeeps: true}
	cfg := filepath.Join(e.dir, "coalesce.yaml")
	if err := os.WriteFile(cfg, []byte(outboxYAML(pg.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	var redisURL string
	relays := []string{"r0", "r1"}
	if embedded {
		redisAddr, natsAddr := freeAddr(t), freeAddr(t)
		redisURL, e.natsURL, relays = "redis://"+redisAddr+"/0", "nats://"+natsAddr, []string{"r0"}
		p := &proc{name: "r0", bin: bins.coalesce, dir: e.dir, addr: freeAddr(t), outArgs: func(int) []string { return nil }}
		p.args = []string{"serve", "--config", cfg, "--http", p.addr, "--nats-listen", natsAddr, "--redis-listen", redisAddr,
			"--data", filepath.Join(e.dir, "data"), "--reap-every", "5s", "--repair-after", "2s"}
		e.producers = append(e.producers, p) // the relay: heal restarts it
	} else {
		e.redis = testenv.NewRedisWith(t, "--appendonly", "yes", "--appendfsync", "everysec")
		e.nats = testenv.NATSProcess(t)
		e.natsURL = e.nats.URL
		redisURL = "redis://" + e.redis.Addr + "/0"
		for _, name := range relays {
			p := &proc{name: name, bin: bins.coalesce, dir: e.dir, addr: freeAddr(t), outArgs: func(int) []string { return nil }}
			p.args = []string{"serve", "--config", cfg, "--http", p.addr, "--redis", redisURL, "--nats", e.natsURL,
				"--reap-every", "5s", "--repair-after", "2s"}
			e.producers = append(e.producers, p) // the relays: heal restarts them
		}
	}
	for _, name := range []string{"w0", "w1"} {
		p := &proc{name: name, bin: bins.worker, dir: e.dir, addr: freeAddr(t), worker: true}
		p.args = []string{"--config", cfg, "--redis", redisURL, "--nats", e.natsURL, "--type", "obx", "--name", name,
			"--metrics", p.addr, "--ack-wait", "2s", "--sleep-max", "20ms"}
		p.outArgs = func(n int) []string {
			return []string{"--out", filepath.Join(e.dir, fmt.Sprintf("jobs-%s-%d.jsonl", name, n))}
		}
		e.workers = append(e.workers, p)
	}
	var writers []*proc
	for _, name := range []string{"p0", "p1"} {
		p := &proc{name: name, bin: producerBin, dir: e.dir, addr: freeAddr(t)}
		p.args = []string{"--postgres", pg.URL, "--addr", p.addr, "--type", "obx", "--tenants", "20", "--rate", "150"}
		p.outArgs = func(n int) []string {
			return []string{"--out", filepath.Join(e.dir, fmt.Sprintf("tx-%s-%d.jsonl", name, n)), "--prefix", fmt.Sprintf("%s.%d", name, n)}
		}
		writers = append(writers, p)
	}
	all := append(append(append([]*proc(nil), e.producers...), e.workers...), writers...)
	t.Cleanup(func() {
		for _, p := range all {
			p.stop()
		}
	})
	for _, p := range all {
		if err := p.startRetry(t, 5); err != nil {
			t.Fatal(err)
		}
	}

	fctx, stopFaults := context.WithCancel(ctx)
	go func() {
		loadStart := time.Now()
		for sleepCtx(fctx, 2*time.Second) {
			if time.Since(loadStart) < loadFor {
				continue
			}
			if countCommitted(e.dir) >= target || time.Since(loadStart) > 40*time.Minute {
				stopFaults()
			}
		}
	}()
	var wg sync.WaitGroup
	wg.Go(func() {
		killAndRestart(fctx, e, writers, 700*time.Millisecond, 1500*time.Millisecond, 100*time.Millisecond)
	})
	wg.Go(func() { killAndRestart(fctx, e, e.producers, time.Second, 2*time.Second, 200*time.Millisecond) })
	if !embedded {
		wg.Go(func() { faultRestartRedis(fctx, e) })
	}
	wg.Wait()
	stopFaults()
	for _, p := range writers {
		p.stop()
	}
	e.heal()

	committed, rolledBack := readTxLogs(t, e.dir)
	if len(committed) == 0 {
		t.Fatal("the producers committed nothing")
	}
	// Wait (bounded) for every committed event to reach a job started after
	// its commit, and for the outbox to drain.
	// A commit shortly before a SIGKILL of redis-server that held answered
	// writes outside its AOF (INFO persistence read before the kill: a slow
	// background fsync; Redis's own everysec behaviour, counted apart by
	// the main check too, check.go AOFLoss) may have been decided in the
	// writes it lost, its row deleted: such a loss is counted apart, not
	// failed. The window is the kill's 2 s of held writes plus 2 s from a
	// commit to its decision (the relay polls every 200 ms).
	e.mu.Lock()
	aofKills := append([]Interval(nil), e.aofLoss...)
	e.mu.Unlock()
	inAOFLoss := func(at int64) bool {
		for _, k := range aofKills {
			if at <= k.To && at >= k.From-int64(2*time.Second) {
				return true
			}
		}
		return false
	}
	start := time.Now()
	var lost, aofLost []string
	var backlog int64
	for {
		e.readJobs()
		lost, aofLost = lost[:0], aofLost[:0]
		covered := coveredItems(e.starts)
		for eid, at := range committed {
			if covered[eid] <= at {
				if inAOFLoss(at) {
					aofLost = append(aofLost, eid)
				} else {
					lost = append(lost, eid)
				}
			}
		}
		backlog, _, err = outbox.Backlog(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		if (len(lost) == 0 && backlog == 0) || time.Since(start) > limit {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	e.readJobs()
	inJobs := map[string]int{}
	for _, s := range e.starts {
		for _, it := range s.ItemList {
			var eid string
			if json.Unmarshal([]byte(it), &eid) == nil {
				inJobs[eid]++
			}
		}
	}
	again, unlogged := 0, 0
	for eid, n := range inJobs {
		if n > 1 {
			again++
		}
		if _, ok := committed[eid]; !ok && !rolledBack[eid] {
			unlogged++ // committed by a producer killed before it logged the commit
		}
	}
	var dead int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM coalesce_outbox_dead`).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	faults := len(e.faults)
	e.mu.Unlock()
	t.Logf("outbox chaos (%s): %d events committed (%d rolled back), %d jobs started; lost %d (and %d in a Redis kill's writes outside its AOF, of %d such kills), rolled back in a job %d, "+
		"in two jobs %d (relayed again after a relay kill), committed unlogged in a job %d, dead rows %d, outbox left %d; %d faults; settled in %v",
		name, len(committed), len(rolledBack), len(e.starts), len(lost), len(aofLost), len(aofKills), countIn(inJobs, rolledBack), again, unlogged, dead, backlog, faults, time.Since(start).Round(time.Millisecond))
	if len(lost) > 0 {
		e.mu.Lock()
		t.Logf("fault actions: %s", strings.Join(e.faults, "; "))
		e.mu.Unlock()
		sort.Strings(lost)
		for _, eid := range lost[:min(5, len(lost))] {
			t.Logf("lost %s: COMMIT sent at %s, in %d jobs, the latest started at %s", eid,
				time.Unix(0, committed[eid]).Format("15:04:05.000000"), inJobs[eid], time.Unix(0, coveredItems(e.starts)[eid]).Format("15:04:05.000000"))
		}
		t.Errorf("I1: %d committed events reached no job started after their commit, e.g. %v", len(lost), lost[:min(5, len(lost))])
	}
	if n := countIn(inJobs, rolledBack); n > 0 {
		t.Errorf("%d rolled-back events reached a job", n)
	}
	if dead > 0 || backlog > 0 {
		t.Errorf("the outbox keeps %d rows and %d dead rows", backlog, dead)
	}
}

// readTxLogs reads the producers' logs: committed event ids with the time
// their COMMIT was sent (the row is visible from some moment between that
// and the answer: a relay may decide it, and its job start, before the
// producer reads the answer), and the rolled-back ones.
func readTxLogs(t *testing.T, dir string) (map[string]int64, map[string]bool) {
	t.Helper()
	committed, rolledBack := map[string]int64{}, map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(dir, "tx-*.jsonl"))
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var l txLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				continue // a line cut by a SIGKILL
			}
			for _, eid := range l.EIDs {
				if l.Rollback {
					rolledBack[eid] = true
				} else {
					committed[eid] = l.Sent
				}
			}
		}
		fh.Close()
	}
	return committed, rolledBack
}

// countCommitted counts the events the producers' logs say they committed
// so far (approximately: a line being written is skipped).
func countCommitted(dir string) int {
	n := 0
	files, _ := filepath.Glob(filepath.Join(dir, "tx-*.jsonl"))
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var l txLine
			if json.Unmarshal(sc.Bytes(), &l) == nil && !l.Rollback {
				n += len(l.EIDs)
			}
		}
		fh.Close()
	}
	return n
}

// coveredItems maps each item (event id) to the latest start of a job
// carrying it.
func coveredItems(starts []JobStart) map[string]int64 {
	out := map[string]int64{}
	for _, s := range starts {
		for _, it := range s.ItemList {
			eid := strings.Trim(it, `"`)
			out[eid] = max(out[eid], s.At)
		}
	}
	return out
}

func countIn(m map[string]int, set map[string]bool) int {
	n := 0
	for k := range m {
		if set[k] {
			n++
		}
	}
	return n
}
