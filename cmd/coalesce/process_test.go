package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/internal/loadgen"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/worker"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds the coalesce binary once for the process-level tests.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "coalesce-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "coalesce")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// freeAddr is a free loopback address, outside the ephemeral port range
// (testenv.FreePort).
func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// proc is a coalesce process with its output captured.
type proc struct {
	cmd *exec.Cmd
	out *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func start(t *testing.T, args ...string) *proc {
	t.Helper()
	return startCmd(t, exec.Command(binary(t), args...))
}

// startCmd starts cmd (a coalesce or a foreign process) as a proc, killed
// at the test's end.
func startCmd(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{cmd: cmd, out: &syncBuffer{}}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	return p
}

// stop sends SIGTERM and returns the exit status.
func (p *proc) stop(t *testing.T) int {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
		t.Fatalf("did not exit within 30s of SIGTERM; output:\n%s", p.out.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

func runBin(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &stdout, &stderr
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

func waitHTTP(t *testing.T, url string, p *proc) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within 20s; output:\n%s", url, p.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// served is a `coalesce serve` on its embedded servers, on free ports.
type served struct {
	dir, cfgPath, natsAddr, redisAddr, base string
	serve                                   *proc
}

// serveEmbedded writes config to a file and serves it, ready.
func serveEmbedded(t *testing.T, config string) served {
	t.Helper()
	d := served{dir: t.TempDir(), natsAddr: freeAddr(t), redisAddr: freeAddr(t)}
	d.cfgPath = filepath.Join(d.dir, "coalesce.yaml")
	if err := os.WriteFile(d.cfgPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	httpAddr := freeAddr(t)
	d.serve = start(t, "serve", "--config", d.cfgPath, "--http", httpAddr, "--nats-listen", d.natsAddr,
		"--redis-listen", d.redisAddr, "--data", filepath.Join(d.dir, "data"))
	d.base = "http://" + httpAddr
	waitHTTP(t, d.base+"/readyz", d.serve)
	return d
}

const processConfig = `# coalesce serve for the process-level test
policies:
  recompute_financials:
    mode: debounce
    window: 1s
    key_fields: [tenant_id]
  notify:
    mode: dedup
    key_fields: [user_id, comment_id]
`

// TestServeAndWorkProcesses is the newcomer's path: the built binary serves
// on its embedded default with a config file, a burst of events goes in, and
// coalesce work runs exactly the expected jobs.
func TestServeAndWorkProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "coalesce.yaml")
	if err := os.WriteFile(cfgPath, []byte(processConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	httpAddr, natsAddr, redisAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	serve := start(t, "serve", "--config", cfgPath, "--http", httpAddr, "--nats-listen", natsAddr,
		"--redis-listen", redisAddr, "--data", filepath.Join(dir, "data"))
	base := "http://" + httpAddr
	waitHTTP(t, base+"/readyz", serve)
	if !strings.Contains(serve.out.String(), "single-node development mode") {
		t.Errorf("first log lines do not say development mode:\n%s", serve.out.String())
	}

	// A burst: 300 events over 3 tenants, in one batch.
	var batch strings.Builder
	for i := range 300 {
		fmt.Fprintf(&batch, `{"type":"recompute_financials","args":{"tenant_id":%d,"order":%d}}`+"\n", i%3, i)
	}
	code, out, stderr := runBin(t, batch.String(), "submit", "--server", base)
	if code != 0 || strings.Count(out, `"outcome":"scheduled"`) != 3 || strings.Count(out, `"outcome":"coalesced"`) != 297 {
		t.Fatalf("submit: exit %d, %d scheduled, stderr %s", code, strings.Count(out, `"outcome":"scheduled"`), stderr)
	}

	// coalesce work runs each job's command with the job JSON on stdin.
	jobsFile := filepath.Join(dir, "jobs.ndjson")
	metricsAddr := freeAddr(t)
	work := start(t, "work", "--config", cfgPath, "--redis", "redis://"+redisAddr+"/0", "--nats", "nats://"+natsAddr, "--metrics", metricsAddr,
		"--type", "recompute_financials", "--exec", "cat >> "+jobsFile+"; echo >> "+jobsFile)
	readJobs := func() []worker.Document {
		raw, _ := os.ReadFile(jobsFile)
		var jobs []worker.Document
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
				var j worker.Document
				if err := json.Unmarshal(line, &j); err != nil {
					t.Fatalf("job line %s: %v", line, err)
				}
				jobs = append(jobs, j)
			}
		}
		return jobs
	}
	deadline := time.Now().Add(15 * time.Second)
	for len(readJobs()) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("jobs within 15s: %d; work output:\n%s\nserve output:\n%s", len(readJobs()), work.out.String(), serve.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // and no more
	jobs := readJobs()
	total, tenants := 0, map[string]bool{}
	for _, j := range jobs {
		total += j.Summary.Events
		tenants[j.Key] = true
		if j.Release != "released" || j.Type != "recompute_financials" || j.Attempt != 1 {
			t.Errorf("job %+v", j)
		}
	}
	if len(jobs) != 3 || len(tenants) != 3 || total != 300 {
		t.Fatalf("%d jobs over %d keys covering %d events; want 3, 3, 300", len(jobs), len(tenants), total)
	}

	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(metrics, []byte(`coalesce_jobs_total{result="ok",type="recompute_financials"} 3`)) {
		t.Errorf("work --metrics lacks the 3 jobs:\n%s", metrics)
	}

	// The other client commands against the same daemon.
	code, out, _ = runBin(t, "", "submit", "--server", base, "--type", "notify", "--args", `{"user_id":7,"comment_id":42}`)
	if code != 0 || !strings.Contains(out, `"outcome":"published"`) {
		t.Errorf("submit one: %d %s", code, out)
	}
	code, out, _ = runBin(t, "", "explain", "--server", base, "--type", "notify", "--args", `{"comment_id":42,"user_id":7}`)
	if code != 0 || !strings.Contains(out, `"would": "duplicate"`) {
		t.Errorf("explain: %d %s", code, out)
	}
	code, out, _ = runBin(t, "", "inspect", "--server", base, "--type", "notify", "--args", `{"user_id":7,"comment_id":42}`)
	if code != 0 || !strings.Contains(out, `"events": 1`) {
		t.Errorf("inspect: %d %s", code, out)
	}
	code, out, _ = runBin(t, "", "cancel", "--server", base, "--type", "notify", "--args", `{"user_id":7,"comment_id":42}`)
	if code != 0 || !strings.Contains(out, `"cancelled"`) {
		t.Errorf("cancel: %d %s", code, out)
	}
	code, _, stderr = runBin(t, "", "inspect", "--server", base, "--type", "notify", "--args", `{"user_id":7,"comment_id":42}`)
	if code != 1 || !strings.Contains(stderr, "no round pending") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("inspect after cancel: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runBin(t, "", "submit", "--server", base, "--type", "nope", "--args", `{}`)
	if code != 1 || !strings.Contains(stderr, "404 no_policy") {
		t.Errorf("submit to an unknown type: exit %d, stderr %q", code, stderr)
	}

	if c := work.stop(t); c != 0 {
		t.Errorf("work exit %d after SIGTERM; output:\n%s", c, work.out.String())
	}
	if c := serve.stop(t); c != 0 {
		t.Errorf("serve exit %d after SIGTERM; output:\n%s", c, serve.out.String())
	}
	if !strings.Contains(serve.out.String(), "shutting down") {
		t.Errorf("serve did not shut down gracefully:\n%s", serve.out.String())
	}
}

func TestServeRefusals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("policies:\n  recompute:\n    mode: debounce\n    window: 3x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runBin(t, "", "serve", "--config", bad, "--http", freeAddr(t))
	if code != 1 || !strings.Contains(stderr, "bad.yaml") || !strings.Contains(stderr, "policies.recompute.window") {
		t.Errorf("bad config: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runBin(t, "", "serve", "--config", filepath.Join(dir, "missing.yaml"))
	if code != 1 || !strings.Contains(stderr, "missing.yaml") {
		t.Errorf("missing config: exit %d, stderr %q", code, stderr)
	}
	// The development Redis port is taken: a clear error, exit 1.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	code, _, stderr = runBin(t, "", "serve", "--redis-listen", l.Addr().String(), "--nats-listen", freeAddr(t),
		"--http", freeAddr(t), "--data", filepath.Join(dir, "data"))
	if code != 1 || !strings.Contains(stderr, "address in use") || !strings.Contains(stderr, l.Addr().String()) {
		t.Errorf("port taken: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runBin(t, "", "serve", "--frobnicate")
	if code != 2 || !strings.Contains(stderr, "flag provided but not defined") {
		t.Errorf("bad flag: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runBin(t, "", "submit", "--server", "http://"+freeAddr(t), "--type", "t", "--args", "{}")
	if code != 1 || !strings.Contains(stderr, "cannot reach the daemon") {
		t.Errorf("no daemon: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runBin(t, "", "work", "--type", "t")
	if code != 2 || !strings.Contains(stderr, "--exec or --post is required") {
		t.Errorf("work without exec: exit %d, stderr %q", code, stderr)
	}
	for _, c := range []string{"serve", "submit", "explain", "inspect", "cancel", "work", "dedupe-stream", "fingerprint"} {
		code, out, stderr := runBin(t, "", c, "--help")
		if code != 0 || !strings.Contains(stderr+out, "Usage: coalesce "+c) {
			t.Errorf("%s --help: exit %d", c, code)
		}
	}
}

func TestBenchCommand(t *testing.T) {
	t.Parallel()
	code, out, stderr := runBin(t, "", "bench", "--events", "300", "--keys", "10", "--concurrency", "4", "--window", "1m")
	var r loadgen.Result
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil {
		t.Fatalf("bench: exit %d, %v, stdout %q stderr %q", code, err, out, stderr)
	}
	if r.Events != 300 || r.RoundsOpened != 10 || r.JobsPublished != 10 || r.Errors != 0 || r.EventsPerS <= 0 || r.Via != "library" {
		t.Errorf("bench result %+v", r)
	}
	if r.JoinedP50us == nil || r.JoinedP99us == nil || *r.JoinedP99us < *r.JoinedP50us {
		t.Errorf("bench result without the coalesced path's latency: %+v", r)
	}
	if code, _, stderr := runBin(t, "", "bench", "--mode", "sideways"); code != 2 || !strings.Contains(stderr, "not a mode") {
		t.Errorf("bad mode: exit %d %q", code, stderr)
	}
}

// TestBenchSchedulesFlag: --schedules chooses where the measured rounds
// wait. It was set and then overwritten by the configuration's (auto), so
// `bench --schedules redis` measured JetStream schedules while reporting
// its flag taken (issue 25's reproduction command); without a real Redis
// it bypassed the store instead of refusing.
func TestBenchSchedulesFlag(t *testing.T) {
	t.Parallel()
	rs := testenv.NewRedis(t)
	ns := testenv.NATS(t)
	for _, want := range []string{"redis", "jetstream"} {
		code, out, stderr := runBin(t, "", "bench", "--redis", rs.URL, "--nats", ns.URL, "--prefix", "sched-"+want+":",
			"--events", "200", "--keys", "10", "--concurrency", "4", "--window", "1m", "--schedules", want)
		var r loadgen.Result
		if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil {
			t.Fatalf("bench --schedules %s: exit %d, %v, stdout %q stderr %q", want, code, err, out, stderr)
		}
		if r.Schedules != want || r.RoundsOpened != 10 || r.Errors != 0 {
			t.Errorf("bench --schedules %s: schedules %q, %d rounds opened, %d errors; want %q, 10, 0", want, r.Schedules, r.RoundsOpened, r.Errors, want)
		}
	}
	code, _, stderr := runBin(t, "", "bench", "--events", "10", "--keys", "10", "--schedules", "redis")
	if code == 0 || !strings.Contains(stderr, "schedules") || !strings.Contains(stderr, "real Redis") {
		t.Errorf("bench --schedules redis on the embedded store: exit %d, %q; want a refusal naming the setting", code, stderr)
	}
}

// TestVersion: coalesce version and --version name the build, the Go
// version and the embedded nats-server's.
func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, stderr := runBin(t, "", args...)
		if code != 0 || !strings.HasPrefix(out, "coalesce ") || !strings.Contains(out, "go       go1.") ||
			!strings.Contains(out, "nats-server (embedded) v2.") {
			t.Errorf("coalesce %s: exit %d, %q %q", args[0], code, out, stderr)
		}
	}
	if _, out, _ := runBin(t, "", "help"); !strings.Contains(out, "  dedupe-stream  remove") || !strings.Contains(out, "  serve          run") {
		t.Errorf("help is not aligned:\n%s", out)
	}
}

// TestWorkFindsAMovedEmbeddedDaemon is issue 15's first finding: with the
// embedded servers moved (--redis-listen, --nats-listen), `coalesce work`
// with no server flags connected to the default 6379 — an unrelated Redis
// — and ran jobs without their rounds. It now reads where the daemon's
// servers listen from the data folder and runs the job with its round.
func TestWorkFindsAMovedEmbeddedDaemon(t *testing.T) {
	t.Parallel()
	sd := serveEmbedded(t, processConfig) // on free ports, its data in sd.dir/data
	dataDir := filepath.Join(sd.dir, "data")
	if _, err := os.Stat(filepath.Join(dataDir, "servers.json")); err != nil {
		t.Fatalf("serve wrote no servers file in its data folder: %v", err)
	}
	workCfg := filepath.Join(sd.dir, "work.yaml")
	if err := os.WriteFile(workCfg, []byte(processConfig+"embedded:\n  data_dir: "+dataDir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	jobs := filepath.Join(sd.dir, "jobs.ndjson")
	work := start(t, "work", "--config", workCfg, "--type", "recompute_financials", "--exec", "cat >> "+jobs+"; echo >> "+jobs)
	code, out, stderr := runBin(t, `{"type":"recompute_financials","args":{"tenant_id":1}}`+"\n", "submit", "--server", sd.base)
	if code != 0 || !strings.Contains(out, `"scheduled"`) {
		t.Fatalf("submit: %d %s %s", code, out, stderr)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		raw, _ := os.ReadFile(jobs)
		if bytes.Contains(raw, []byte(`"release":"released"`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no job with its round within 15 s: %q\nwork:\n%s", raw, work.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(work.out.String(), "servers.json") {
		t.Errorf("work does not say where it found the servers:\n%s", work.out.String())
	}
}

// TestClientCommandsReadTheConfig: submit, explain, inspect and cancel take
// the daemon's --config for where it listens and its token (issue 15: it
// was "flag provided but not defined: -config"); --server and the token
// variable still override it.
func TestClientCommandsReadTheConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	listen := freeAddr(t)
	cfgPath := filepath.Join(dir, "coalesce.yaml")
	cfg := processConfig + "http:\n  listen: " + listen + "\n  tokens: [s3cret-token]\n"
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	serve := start(t, "serve", "--config", cfgPath, "--nats-listen", freeAddr(t), "--redis-listen", freeAddr(t), "--data", filepath.Join(dir, "data"))
	waitHTTP(t, "http://"+listen+"/healthz", serve)
	ev := []string{"--type", "notify", "--args", `{"user_id":1,"comment_id":2}`}
	for _, cmd := range []string{"submit", "explain", "inspect", "cancel"} {
		code, out, stderr := runBin(t, "", append([]string{cmd, "--config", cfgPath}, ev...)...)
		if code != 0 {
			t.Errorf("%s --config: exit %d, %s %s", cmd, code, out, stderr)
		}
	}
	// The flag overrides the file: a wrong token is refused.
	code, _, stderr := runBin(t, "", append([]string{"submit", "--config", cfgPath, "--token", "wrong"}, ev...)...)
	if code != 1 || !strings.Contains(stderr, "401") {
		t.Errorf("submit with a wrong --token over the file's: exit %d, %s", code, stderr)
	}
	code, _, stderr = runBin(t, "", append([]string{"submit", "--config", filepath.Join(dir, "missing.yaml")}, ev...)...)
	if code == 0 || !strings.Contains(stderr, "missing.yaml") {
		t.Errorf("submit with a missing --config: exit %d, %s", code, stderr)
	}
}

// TestServeNamesTheFlagInErrors: a bad --redis is reported as --redis, not
// as the COALESCE_REDIS_URL variable the user never set (issue 15).
func TestServeNamesTheFlagInErrors(t *testing.T) {
	t.Parallel()
	code, _, stderr := runBin(t, "", "serve", "--redis", "redis://127.0.0.1:notaport/0", "--nats", "nats://127.0.0.1:1")
	if code == 0 || !strings.Contains(stderr, "--redis: redis.url: not a Redis URL") || strings.Contains(stderr, "COALESCE_REDIS_URL:") {
		t.Errorf("serve with a bad --redis: exit %d, %q", code, stderr)
	}
	code, _, stderr = runBin(t, "", "serve", "--redis", "redis://127.0.0.1:6399/0", "--nats", "tls://")
	if code == 0 || !strings.Contains(stderr, "--nats") || strings.Contains(stderr, "COALESCE_NATS_URL:") {
		t.Errorf("serve with a bad --nats: exit %d, %q", code, stderr)
	}
}

// TestServeRealRedisWithEmbeddedNATS: a user with only redis-server (whose
// Debian nats-server is too old) runs `coalesce serve --redis URL`; it runs
// the embedded NATS beside that Redis and says so, and `coalesce work`
// with no server flags finds both. It was refused ("redis is configured
// but nats is not").
func TestServeRealRedisWithEmbeddedNATS(t *testing.T) {
	t.Parallel()
	rs := testenv.NewRedis(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "coalesce.yaml")
	data := filepath.Join(dir, "data")
	if err := os.WriteFile(cfgPath, []byte(processConfig+"embedded:\n  data_dir: "+data+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	httpAddr := freeAddr(t)
	serve := start(t, "serve", "--config", cfgPath, "--redis", "redis://"+rs.Addr+"/0", "--http", httpAddr, "--nats-listen", freeAddr(t))
	base := "http://" + httpAddr
	waitHTTP(t, base+"/readyz", serve)
	if !strings.Contains(serve.out.String(), "Redis is configured but NATS is not") {
		t.Errorf("serve does not say it runs the embedded NATS beside the real Redis:\n%s", serve.out.String())
	}
	// No embedded Redis runs: nothing may be said about restoring one
	// (issue 29: it logged "embedded redis: no snapshot...").
	if out := serve.out.String(); strings.Contains(out, "embedded redis") {
		t.Errorf("serve --redis talks of an embedded Redis:\n%s", out)
	}
	jobs := filepath.Join(dir, "jobs.ndjson")
	work := start(t, "work", "--config", cfgPath, "--type", "recompute_financials", "--exec", "cat >> "+jobs+"; echo >> "+jobs)
	if code, out, stderr := runBin(t, "", "submit", "--server", base, "--type", "recompute_financials", "--args", `{"tenant_id":3}`); code != 0 || !strings.Contains(out, "scheduled") {
		t.Fatalf("submit: %d %s %s", code, out, stderr)
	}
	c := rs.Client(t)
	if n, _ := c.DBSize(t.Context()).Result(); n == 0 {
		t.Error("the round is not in the real Redis")
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if raw, _ := os.ReadFile(jobs); bytes.Contains(raw, []byte(`"release":"released"`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no job with its round within 15 s\nwork:\n%s\nserve:\n%s", work.out.String(), serve.out.String())
		}
	}
}

// readNDJSON decodes the lines a process appended to path so far (none when
// it has written nothing yet), failing t on a line that is not a T.
func readNDJSON[T any](t *testing.T, path string) []T {
	t.Helper()
	raw, _ := os.ReadFile(path)
	var out []T
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: line %s: %v", path, sc.Bytes(), err)
		}
		out = append(out, v)
	}
	return out
}
