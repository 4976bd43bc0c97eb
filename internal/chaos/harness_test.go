package chaos

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
)

// Job types of the mixed workload, one policy each.
var jobTypes = []string{"fixed", "extend", "accum", "dedup", "throttle", "excl"}

// policyYAML is the configuration every process of a scenario reads.
func policyYAML(sc scenario) string {
	fail, minimal := sc.fail, sc.minimal
	maxWait, throttle := "4s", "2s"
	if minimal {
		maxWait, throttle = "2s", "1s"
	}
	natsYAML := ""
	if sc.natsCluster {
		natsYAML = "nats:\n  replicas: 3\n"
	}
	return natsYAML + fmt.Sprintf(`worker:
  concurrency: 64
  ack_wait: 2s
policies:
  fixed:
    mode: debounce
    window: 1s
    key_fields: [tenant]
    fail: %[1]s
  extend:
    mode: debounce
    window: 1s
    extend: true
    max_wait: %[2]s
    payload: last
    key_fields: [tenant]
    fail: %[1]s
  accum:
    mode: debounce
    window: 1s
    payload: accumulate
    item_field: id
    max_items: 50
    key_fields: [tenant]
    fail: %[1]s
  dedup:
    mode: dedup
    until: start
    key_fields: [tenant]
    fail: %[1]s
  throttle:
    mode: throttle
    window: %[3]s
    trailing: true
    key_fields: [tenant]
    fail: %[1]s
  excl:
    mode: debounce
    window: 1s
    key_fields: [tenant]
    exclusive: true
    lease: 2s
    fail: %[1]s
`, fail, maxWait, throttle)
}

// binaries are built once per test binary.
type binaries struct{ coalesce, worker, root string }

func buildBinaries(t *testing.T) binaries {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	dir := t.TempDir()
	b := binaries{coalesce: filepath.Join(dir, "coalesce"), worker: filepath.Join(dir, "chaosworker"), root: root}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, target := range [][2]string{{b.coalesce, "./cmd/coalesce"}, {b.worker, "./internal/chaos/chaosworker"}} {
		wg.Go(func() {
			cmd := exec.Command("go", "build", "-o", target[0], target[1])
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("go build %s: %v: %s", target[1], err, out)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// proc is one producer or worker slot; each (re)start is an incarnation.
type proc struct {
	name    string
	bin     string
	args    []string // without the per-incarnation ones
	dir     string
	addr    string // HTTP (producer) or metrics (worker) address, kept across restarts
	worker  bool
	outArgs func(n int) []string // per-incarnation args (worker: its job log)

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	n      int                  // incarnations started
	last   map[string]float64   // latest metrics scrape of the running incarnation
	closed []map[string]float64 // final scrape of each ended incarnation
	blind  int                  // incarnations ended with no scrape at all
	kills  []int64              // SIGKILLs sent, unix ns
}

func (p *proc) start(t *testing.T) error {
	p.mu.Lock()
	if p.cmd != nil {
		select {
		case <-p.done:
			p.endLocked() // exited on its own
		default:
			p.mu.Unlock()
			return nil // running
		}
	}
	p.n++
	n := p.n
	args := append(append([]string(nil), p.args...), p.outArgs(n)...)
	logf, err := os.Create(filepath.Join(p.dir, fmt.Sprintf("%s-%d.log", p.name, n)))
	if err != nil {
		p.mu.Unlock()
		return err
	}
	cmd := exec.Command(p.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	p.cmd, p.done, p.last = cmd, done, nil
	p.mu.Unlock()

	// Ready when it answers HTTP.
	url := "http://" + p.addr + "/healthz"
	if p.worker {
		url = "http://" + p.addr + "/metrics"
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(p.dir, fmt.Sprintf("%s-%d.log", p.name, n)))
			return fmt.Errorf("%s exited at start: %s", p.name, tail(string(log), 10))
		default:
		}
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after 20s: %v", p.name, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// startRetry starts the process, trying again when it exits at start (a
// server it needs may be down for a moment).
func (p *proc) startRetry(t *testing.T, attempts int) error {
	var err error
	for range attempts {
		if err = p.start(t); err == nil {
			return nil
		}
		time.Sleep(300 * time.Millisecond)
	}
	return err
}

// scrape reads the incarnation's /metrics (best effort).
func (p *proc) scrape() bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + p.addr + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	m := parseMetrics(resp.Body)
	p.mu.Lock()
	p.last = m
	p.mu.Unlock()
	return true
}

// end closes the books of the running incarnation after it exited.
func (p *proc) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLocked()
}

func (p *proc) endLocked() {
	if p.cmd == nil {
		return
	}
	if p.last == nil {
		p.blind++
	} else {
		p.closed = append(p.closed, p.last)
	}
	p.last, p.cmd = nil, nil
}

// kill scrapes the metrics, then SIGKILLs the process.
func (p *proc) kill() {
	if !p.running() {
		return
	}
	p.scrape()
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	at := time.Now().UnixNano()
	_ = cmd.Process.Kill()
	<-done
	p.mu.Lock()
	p.kills = append(p.kills, at)
	p.mu.Unlock()
	p.end()
}

// killedAt is when each SIGKILL of p was sent, unix ns.
func (p *proc) killedAt() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int64(nil), p.kills...)
}

// stop scrapes, then SIGTERMs the process (SIGKILL after 10s).
func (p *proc) stop() {
	if !p.running() {
		p.end()
		return
	}
	p.scrape()
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	p.end()
}

// metric sums the final scrapes of every incarnation: series whose name is
// name and whose labels contain every one of labels.
func (p *proc) metric(name string, labels ...string) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var sum float64
	for _, m := range p.closed {
		sum += sumMetric(m, name, labels...)
	}
	return sum
}

func parseMetrics(r io.Reader) map[string]float64 {
	m := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "coalesce_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

func sumMetric(m map[string]float64, name string, labels ...string) float64 {
	var sum float64
	for series, v := range m {
		n, rest, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				ok = false
			}
		}
		if ok {
			sum += v
		}
	}
	return sum
}

// env is one scenario's world: servers, proxies, processes, logs.
type env struct {
	t         *testing.T
	dir       string
	redis     *testenv.RedisServer
	nats      *testenv.NATSServer
	cluster   *testenv.NATSCluster // a 3-node cluster instead of nats (natsCluster scenarios)
	natsURL   string               // where the checks read the stream
	proxies   map[string]*Proxy    // "p0.redis", "w1.nats", ...
	producers []*proc
	workers   []*proc

	redisKeeps bool // redis-server runs with persistence: a restart keeps the data

	// Sentinel and Redis Cluster scenarios.
	nodes          []*testenv.RedisNode // a primary and its replica
	sentinels      *testenv.Sentinels
	rcluster       *testenv.RedisCluster
	acksOff        bool
	failoverLoss   []Interval
	ackedFailovers []Interval

	mu           sync.Mutex
	redisLoss    []Interval
	aofLoss      []Interval // kills of an everysec redis-server holding answered writes outside its AOF
	heldInRedis  bool       // every debounce round held in Redis (COALESCE_CHAOS_SCHEDULES=redis)
	snapshotLoss []Interval // embedded daemon SIGKILLs: the interval its snapshot may lack
	faults       []string   // what the fault program did, for the log

	jobOffsets map[string]int64
	starts     []JobStart
	ends       []JobStart // the end lines of the jobs whose handler returned
	badLines   int
}

func (e *env) note(format string, args ...any) {
	e.mu.Lock()
	e.faults = append(e.faults, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
	e.mu.Unlock()
}

func (e *env) allProxies() []*Proxy {
	out := make([]*Proxy, 0, len(e.proxies))
	for _, p := range e.proxies {
		out = append(out, p)
	}
	return out
}

func (e *env) proxiesOf(server string) []*Proxy {
	var out []*Proxy
	for name, p := range e.proxies {
		if strings.HasSuffix(name, "."+server) {
			out = append(out, p)
		}
	}
	return out
}

// newEnv starts fresh servers, the proxies, 2 producers and 2 workers: or,
// for an embedded scenario, one `coalesce serve` on its embedded servers and
// 2 workers connected to them; for a NATS cluster scenario, three clustered
// nats-servers that every process reaches directly.
func newEnv(t *testing.T, bins binaries, sc scenario) *env {
	t.Helper()
	e := &env{t: t, dir: scenarioDir(t, sc.name), proxies: map[string]*Proxy{}, jobOffsets: map[string]int64{},
		redisKeeps: len(sc.redisArgs) > 0, acksOff: sc.acks == "off"}
	cfg := filepath.Join(e.dir, "coalesce.yaml")
	redisYAML := "" // a Redis every process reaches directly (Sentinel, Cluster)
	redisAddr, natsAddr := "", ""
	natsDirect := "" // URLs every process uses as they are (no proxy)
	switch {
	case sc.sentinel:
		// A restarted primary comes back as a replica: its full sync starts
		// at once (Redis waits 5 s by default for more replicas to share it).
		aof := []string{"--appendonly", "yes", "--appendfsync", "everysec", "--repl-diskless-sync-delay", "0"}
		e.nodes = []*testenv.RedisNode{testenv.NewRedisNode(t, aof...), testenv.NewRedisNode(t, aof...)}
		e.nodes[1].ReplicaOf(t, e.nodes[0])
		e.sentinels = testenv.NewSentinels(t, 3, "coalesce", e.nodes[0])
		e.nats = testenv.NATSProcess(t)
		natsAddr = strings.TrimPrefix(e.nats.URL, "nats://")
		redisYAML = fmt.Sprintf("redis:\n  sentinel:\n    master: coalesce\n    addrs: [%s]\n  replicas:\n    acks: %s\n", strings.Join(e.sentinels.Addrs, ", "), sc.acks)
	case sc.redisCluster:
		e.rcluster = testenv.NewClusterWithReplicas(t, "--appendonly", "yes", "--appendfsync", "everysec", "--repl-diskless-sync-delay", "0")
		e.nats = testenv.NATSProcess(t)
		natsAddr = strings.TrimPrefix(e.nats.URL, "nats://")
		redisYAML = fmt.Sprintf("redis:\n  addrs: [%s]\n  replicas:\n    acks: %s\n", strings.Join(e.rcluster.Addrs, ", "), sc.acks)
	case sc.embedded:
		redisAddr, natsAddr = freeAddr(t), freeAddr(t)
	case sc.natsCluster:
		e.redis = testenv.NewRedisWith(t, sc.redisArgs...)
		e.cluster = testenv.NewNATSCluster(t, 3)
		redisAddr, natsDirect = e.redis.Addr, e.cluster.URLs()
	default:
		e.redis = testenv.NewRedisWith(t, sc.redisArgs...)
		e.nats = testenv.NATSProcess(t)
		redisAddr, natsAddr = e.redis.Addr, strings.TrimPrefix(e.nats.URL, "nats://")
	}
	// COALESCE_CHAOS_SCHEDULES=redis holds every debounce round in Redis
	// until due, =jetstream gives each a JetStream schedule, in every
	// scenario but the Cluster's and the embedded store's (no sorted sets:
	// refused at start). Without it auto decides as in production: held in
	// Redis where Redis keeps its data (an append-only file: 12a, 12b and
	// the Sentinel nodes), a schedule each elsewhere.
	schedYAML := ""
	e.heldInRedis = !sc.redisCluster && !sc.embedded && (sc.sentinel || slices.Contains(sc.redisArgs, "--appendonly"))
	if s := os.Getenv("COALESCE_CHAOS_SCHEDULES"); s != "" && !sc.redisCluster && !sc.embedded {
		e.heldInRedis = s == string(debounce.SchedulesRedis)
		if redisYAML != "" {
			redisYAML += "  schedules: " + s + "\n"
		} else {
			schedYAML = "redis:\n  schedules: " + s + "\n"
		}
	}
	if err := os.WriteFile(cfg, []byte(redisYAML+schedYAML+policyYAML(sc)), 0o644); err != nil {
		t.Fatal(err)
	}
	e.natsURL = cmp.Or(natsDirect, "nats://"+natsAddr)
	producers, workers := []string{"p0", "p1"}, []string{"w0", "w1"}
	if sc.embedded {
		producers = []string{"p0"} // the embedded servers live in it; it needs no proxy
	}
	targets := map[string]string{"redis": redisAddr, "nats": natsAddr}
	for _, who := range append(producers, workers...) {
		if sc.embedded && who == "p0" {
			continue
		}
		for server, target := range targets {
			if server == "nats" && natsDirect != "" || server == "redis" && redisYAML != "" {
				continue
			}
			p, err := NewProxy(target)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			e.proxies[who+"."+server] = p
		}
	}
	redisFor := func(who string) []string {
		if redisYAML != "" {
			return nil // the file's sentinel or cluster section
		}
		return []string{"--redis", "redis://" + e.proxies[who+".redis"].Addr() + "/0"}
	}
	natsFor := func(who string) string {
		if natsDirect != "" {
			return natsDirect
		}
		return "nats://" + e.proxies[who+".nats"].Addr()
	}
	for _, name := range producers {
		p := &proc{name: name, bin: bins.coalesce, dir: e.dir, addr: freeAddr(t),
			outArgs: func(int) []string { return nil }}
		p.args = []string{"serve", "--config", cfg, "--http", p.addr, "--reap-every", "5s", "--repair-after", "2s", "--log-format", "json"}
		if sc.embedded {
			p.args = append(p.args, "--nats-listen", natsAddr, "--redis-listen", redisAddr, "--data", filepath.Join(e.dir, "data"))
		} else {
			p.args = append(append(p.args, redisFor(name)...), "--nats", natsFor(name))
		}
		e.producers = append(e.producers, p)
	}
	for _, name := range workers {
		p := &proc{name: name, bin: bins.worker, dir: e.dir, addr: freeAddr(t), worker: true}
		p.args = append([]string{"--config", cfg}, redisFor(name)...)
		p.args = append(p.args, "--nats", natsFor(name),
			"--type", strings.Join(jobTypes, ","), "--name", name, "--metrics", p.addr,
			"--ack-wait", "2s", "--sleep-max", sc.jobSleep.String())
		p.outArgs = func(n int) []string {
			return []string{"--out", filepath.Join(e.dir, fmt.Sprintf("jobs-%s-%d.jsonl", name, n))}
		}
		e.workers = append(e.workers, p)
	}
	// Producers first: an embedded one runs the servers the workers need.
	startAll := func(ps []*proc) {
		errs := make([]error, len(ps))
		var wg sync.WaitGroup
		for i, p := range ps {
			wg.Go(func() { errs[i] = p.startRetry(t, 5) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	all := append(append([]*proc(nil), e.producers...), e.workers...)
	t.Cleanup(func() {
		for _, p := range all {
			p.stop()
		}
	})
	startAll(e.producers)
	startAll(e.workers)
	return e
}

// scenarioDir keeps the logs under COALESCE_CHAOS_KEEP when set.
func scenarioDir(t *testing.T, name string) string {
	if keep := os.Getenv("COALESCE_CHAOS_KEEP"); keep != "" {
		d := filepath.Join(keep, name)
		_ = os.RemoveAll(d)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// restartRedis kills redis-server (SIGKILL) and starts it again on the same
// port: empty, unless it runs with persistence (AOF), which it reloads.
func (e *env) restartRedis(down time.Duration, keepsData bool) {
	pending := ""
	if keepsData {
		pending = aofPending(e.redis.Addr)
	}
	from := time.Now().UnixNano()
	e.redis.Stop()
	if pending != "" {
		e.mu.Lock()
		e.aofLoss = append(e.aofLoss, Interval{From: from - int64(2*time.Second), To: from})
		e.mu.Unlock()
		e.note("redis-server killed with writes outside its AOF (%s)", pending)
	}
	time.Sleep(down)
	if err := e.redis.Start(); err != nil {
		e.t.Errorf("restart redis-server: %v", err)
	}
	if keepsData {
		e.note("redis-server killed and restarted on its AOF, down %v", down)
		return
	}
	e.mu.Lock()
	e.redisLoss = append(e.redisLoss, Interval{From: from, To: time.Now().UnixNano()})
	e.mu.Unlock()
	e.note("redis-server restarted (data lost), down %v", down)
}

// aofPending says what a redis-server with appendfsync everysec holds of
// answered writes outside its AOF file ("" when nothing): while a
// background fsync is slow, Redis keeps its AOF buffer for up to 2 s and
// answers the writes in it; a SIGKILL then loses them.
func aofPending(addr string) string {
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	info, err := c.Info(ctx, "persistence").Result()
	if err != nil {
		return ""
	}
	var held []string
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "aof_buffer_length" || k == "aof_pending_bio_fsync") && v != "0" {
			held = append(held, line)
		}
	}
	return strings.Join(held, " ")
}

// restartNATS kills nats-server (SIGKILL) and starts it on the same store.
func (e *env) restartNATS(down time.Duration) {
	e.nats.Stop()
	time.Sleep(down)
	for attempt := 0; ; attempt++ {
		err := e.nats.Start()
		if err == nil {
			break
		}
		if attempt == 5 {
			e.t.Errorf("restart nats-server: %v", err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.note("nats-server killed and restarted on its store, down %v", down)
}

// heal removes every proxy fault and restarts whatever is down.
func (e *env) heal() {
	for _, p := range e.proxies {
		p.Heal()
	}
	for _, n := range e.nodes {
		n.HoldReplicas(false)
		if err := n.Start(); err != nil {
			e.t.Errorf("heal: redis node %s: %v", n.Addr, err)
		}
	}
	if e.rcluster != nil {
		for _, a := range e.rcluster.Addrs {
			if err := e.rcluster.Restart(a); err != nil {
				e.t.Errorf("heal: cluster node %s: %v", a, err)
			}
		}
	}
	for _, p := range append(append([]*proc(nil), e.producers...), e.workers...) {
		if !p.running() {
			if err := p.startRetry(e.t, 5); err != nil {
				e.t.Errorf("heal: %v", err)
			}
		}
	}
}

// readJobs reads what the workers logged since the last call.
func (e *env) readJobs() {
	files, _ := filepath.Glob(filepath.Join(e.dir, "jobs-*.jsonl"))
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		off := e.jobOffsets[f]
		if _, err := fh.Seek(off, io.SeekStart); err != nil {
			fh.Close()
			continue
		}
		data, _ := io.ReadAll(fh)
		fh.Close()
		// Only whole lines; a line being written is read next time.
		end := bytes.LastIndexByte(data, '\n')
		if end < 0 {
			continue
		}
		for line := range bytes.SplitSeq(data[:end], []byte{'\n'}) {
			var s JobStart
			if err := json.Unmarshal(line, &s); err != nil {
				e.badLines++
				continue
			}
			if s.End > 0 {
				e.ends = append(e.ends, s)
			} else {
				e.starts = append(e.starts, s)
			}
		}
		e.jobOffsets[f] = off + int64(end) + 1
	}
}

// streamState counts the stream's pending schedules, jobs and dead letters.
func (e *env) streamState(ctx context.Context) (sched, jobs, dead uint64, err error) {
	nc, err := nats.Connect(e.natsURL, nats.Timeout(2*time.Second))
	if err != nil {
		return 0, 0, 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, 0, 0, err
	}
	s, err := js.Stream(ctx, "COALESCE")
	if err != nil {
		return 0, 0, 0, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("co.>"))
	if err != nil {
		return 0, 0, 0, err
	}
	for subj, n := range info.State.Subjects {
		switch {
		case strings.HasPrefix(subj, "co.sched."):
			sched += n
		case strings.HasPrefix(subj, "co.run."), strings.HasPrefix(subj, "co.jobs."):
			jobs += n
		case strings.HasPrefix(subj, "co.dead."):
			dead += n
		}
	}
	return sched, jobs, dead, nil
}

// quiesce waits until every accepted event is covered by a job start and
// the stream holds no schedule and no job, or until the deadline.
func (e *env) quiesce(events []EventRecord, limit time.Duration) (waited time.Duration, settled bool, dead uint64) {
	start := time.Now()
	need := map[string]int64{} // round (type/key/token) -> latest send of an event in it
	e.mu.Lock()
	killed := Input{SnapshotLoss: e.snapshotLoss, FailoverLoss: e.failoverLoss, AOFLoss: e.aofLoss, RedisLoss: e.redisLoss, HeldInRedis: e.heldInRedis}
	e.mu.Unlock()
	needEID := map[string]int64{}
	opened := map[string]int64{} // round -> its first accepted event's send
	for i := range events {
		if ev := &events[i]; ev.Accepted() && ev.Round != "" {
			rid := roundID(ev.Type, ev.Key, ev.Round)
			if at, ok := opened[rid]; !ok || ev.Sent < at {
				opened[rid] = ev.Sent
			}
		}
	}
	for i := range events {
		ev := &events[i]
		if !ev.Accepted() || ev.Outcome == "throttled" {
			continue
		}
		if ev.Outcome == "bypassed" {
			needEID[ev.EID] = ev.Sent
			continue
		}
		if snapshotCause(ev.Sent, ev.Done, killed) != "" || failoverCause(ev.Sent, ev.Done, killed) != "" {
			// Its change may have gone with a killed embedded daemon's
			// snapshot (a documented loss the checks explain): waiting for
			// its round to start could wait for ever.
			continue
		}
		rid := roundID(ev.Type, ev.Key, ev.Round)
		if heldLossCause(ev, opened[rid], killed) != "" {
			// Held in Redis and lost with it (a restart without its data,
			// a failover without acks): it may never start (explained).
			continue
		}
		need[rid] = max(need[rid], ev.Sent)
	}
	latest := map[string]int64{}
	seen := 0
	for {
		e.readJobs()
		for _, s := range e.starts[seen:] {
			if s.Round == "" {
				if t, ok := needEID[s.EID]; ok && s.At > t {
					delete(needEID, s.EID)
				}
				continue
			}
			rid := roundID(s.Type, s.Key, s.Round)
			latest[rid] = max(latest[rid], s.At)
		}
		seen = len(e.starts)
		for r, sent := range need {
			if latest[r] > sent {
				delete(need, r)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		sched, jobs, d, err := e.streamState(ctx)
		cancel()
		dead = d
		if len(need) == 0 && len(needEID) == 0 && err == nil && sched == 0 && jobs == 0 {
			time.Sleep(500 * time.Millisecond) // let the last log lines land
			e.readJobs()
			return time.Since(start), true, dead
		}
		if time.Since(start) > limit {
			e.t.Logf("quiescence not reached after %v: %d rounds and %d bypassed events uncovered, stream: %d schedules, %d jobs (err %v)",
				limit, len(need), len(needEID), sched, jobs, err)
			e.readJobs()
			return time.Since(start), false, dead
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// load sends events over HTTP to the producers, alternating, with a fixed
// number in flight and an optional rate, and logs each one.
type load struct {
	urls     []string
	client   *http.Client
	prefix   string // of event ids
	keys     int    // tenants per job type
	rate     int    // events/s, 0: as fast as the in-flight limit allows
	inflight int

	seq      atomic.Int64
	accepted atomic.Int64
	mu       sync.Mutex
	recs     []EventRecord
}

func newLoad(e *env, sc scenario, prefix string) *load {
	l := &load{prefix: prefix, keys: sc.keys, rate: sc.rate, inflight: sc.inflight}
	for _, p := range e.producers {
		l.urls = append(l.urls, "http://"+p.addr+"/v1/events")
	}
	l.client = &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			MaxIdleConnsPerHost: sc.inflight, DisableCompression: true,
			DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		},
	}
	return l
}

// run sends until ctx ends.
func (l *load) run(ctx context.Context) {
	var tokens chan struct{}
	if l.rate > 0 {
		tokens = make(chan struct{}, l.inflight)
		go func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			per := float64(l.rate) / 100
			acc := 0.0
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				for acc += per; acc >= 1; acc-- {
					select {
					case tokens <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	var wg sync.WaitGroup
	for range l.inflight {
		wg.Go(func() {
			for ctx.Err() == nil {
				if tokens != nil {
					select {
					case <-ctx.Done():
						return
					case <-tokens:
					}
				}
				rec := l.send()
				l.mu.Lock()
				l.recs = append(l.recs, rec)
				l.mu.Unlock()
				if rec.Status == 0 {
					time.Sleep(20 * time.Millisecond) // producer down: do not spin
				}
			}
		})
	}
	wg.Wait()
}

// pick chooses a job type and a tenant: 30% of a type's events go to 4 hot
// tenants (long rounds, accumulate filling up), the rest uniformly.
func (l *load) pick() (string, string) {
	typ := jobTypes[rand.IntN(len(jobTypes))]
	n := rand.IntN(l.keys)
	if rand.IntN(10) < 3 {
		n = rand.IntN(4)
	}
	return typ, "t" + strconv.Itoa(n)
}

type decision struct {
	Outcome string    `json:"outcome"`
	Key     string    `json:"key"`
	Round   string    `json:"round"`
	DueAt   time.Time `json:"due_at"`
	Events  int       `json:"events"`
}

func (l *load) send() EventRecord {
	seq := l.seq.Add(1)
	typ, tenant := l.pick()
	rec := EventRecord{Seq: seq, EID: l.prefix + "-" + strconv.FormatInt(seq, 10), Type: typ, Tenant: tenant,
		Producer: int(seq % int64(len(l.urls))), ID: rand.IntN(1000)}
	body := fmt.Sprintf(`{"type":%q,"args":{"tenant":%q,"id":%d,"eid":%q}}`, typ, tenant, rec.ID, rec.EID)
	rec.Sent = time.Now().UnixNano()
	resp, err := l.client.Post(l.urls[rec.Producer], "application/json", strings.NewReader(body))
	if err != nil {
		rec.Done = time.Now().UnixNano()
		rec.Err = err.Error()
		return rec
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	rec.Done = time.Now().UnixNano()
	rec.Status = resp.StatusCode
	if err != nil {
		rec.Status, rec.Err = 0, err.Error()
		return rec
	}
	if rec.Status != 200 {
		rec.Err = strings.TrimSpace(string(data))
		if len(rec.Err) > 300 {
			rec.Err = rec.Err[:300]
		}
		return rec
	}
	var d decision
	if err := json.Unmarshal(data, &d); err != nil {
		rec.Status, rec.Err = 0, "undecodable decision: "+err.Error()
		return rec
	}
	rec.Outcome, rec.Key, rec.Round, rec.Events = d.Outcome, d.Key, d.Round, d.Events
	if !d.DueAt.IsZero() {
		rec.DueAt = d.DueAt.UnixMilli()
	}
	l.accepted.Add(1)
	return rec
}

func (l *load) records() []EventRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.recs
}

func writeEvents(path string, recs []EventRecord) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	enc := json.NewEncoder(w)
	for i := range recs {
		if err := enc.Encode(&recs[i]); err != nil {
			f.Close()
			return err
		}
	}
	return errors.Join(w.Flush(), f.Close())
}

// sleepCtx sleeps d or until ctx ends; false when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func between(lo, hi time.Duration) time.Duration {
	return lo + rand.N(hi-lo+1)
}

// readResubmissions reads, from the producers' logs in dir, the lines
// saying locally joined events were submitted again.
func readResubmissions(t *testing.T, dir string) []Resubmission {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "p*-*.log"))
	var out []Resubmission
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Errorf("producer log: %v", err)
			continue
		}
		for line := range bytes.SplitSeq(b, []byte{'\n'}) {
			if !bytes.Contains(line, []byte(debounce.ResubmittedMessage)) {
				continue
			}
			var r struct {
				Time time.Time `json:"time"`
				Resubmission
			}
			if err := json.Unmarshal(line, &r); err != nil {
				t.Errorf("%s: %v: %s", f, err, line)
				continue
			}
			r.Resubmission.At = r.Time.UnixNano()
			out = append(out, r.Resubmission)
		}
	}
	return out
}
