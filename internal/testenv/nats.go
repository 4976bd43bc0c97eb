package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSServer is a JetStream-enabled nats-server for one test: embedded in the
// test binary (NATS) or a separate process (NATSProcess, OldNATSProcess). It
// listens on a free loopback port and keeps its store in a directory of the
// test; both survive Stop and Start, so a restart keeps the streams.
type NATSServer struct {
	URL     string // nats://127.0.0.1:port
	Version string // what the server reports, e.g. "2.15.2"
	Dir     string // JetStream store directory

	mu   sync.Mutex
	port int
	opts *server.Options // embedded server
	srv  *server.Server
	bin  string // process server
	log  string
	args []string // more process options (a cluster node's)
	proc *natsProc
}

type natsProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// NATS starts an embedded nats-server (the version in go.mod) with JetStream
// and file storage in t.TempDir(); it is shut down when the test ends.
func NATS(t testing.TB) *NATSServer {
	t.Helper()
	s := &NATSServer{
		Dir: t.TempDir(),
		opts: &server.Options{
			Host:      "127.0.0.1",
			Port:      -1,
			JetStream: true,
			NoLog:     true,
			NoSigs:    true,
		},
	}
	return s.launch(t, "embedded nats-server")
}

// launch starts a new embedded s with its store in s.Dir and stops it when
// the test ends.
func (s *NATSServer) launch(t testing.TB, what string) *NATSServer {
	t.Helper()
	s.opts.StoreDir = s.Dir
	if err := s.Start(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	t.Cleanup(s.Stop)
	return s
}

// NATSProcess starts the nats-server of go.mod as a separate process (built
// once per machine into the user cache directory, which takes a minute or so
// cold), with JetStream in t.TempDir(); it is killed when the test ends.
func NATSProcess(t testing.TB) *NATSServer {
	t.Helper()
	bin, err := moduleNATSServer()
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			skipOrFail(t, err.Error())
		}
		t.Fatalf("build nats-server: %v", err)
	}
	return startNATSProcessT(t, bin)
}

// OldNATSProcess starts Debian's nats-server package (2.9.10 on bookworm), a
// server that predates message schedules, for tests that must refuse it. It
// is looked up by absolute path, never on PATH, so it cannot be confused with
// a module-built server; without it the test skips (or fails under
// COALESCE_REQUIRE_SERVERS=1).
func OldNATSProcess(t testing.TB) *NATSServer {
	t.Helper()
	bin, version, err := debianNATSServer()
	if err != nil {
		skipOrFail(t, err.Error()+": install Debian's package (apt-get install -y nats-server)")
	}
	s := startNATSProcessT(t, bin)
	if s.Version != version {
		t.Fatalf("%s reports %s at runtime but %s on --version", bin, s.Version, version)
	}
	return s
}

func startNATSProcessT(t testing.TB, bin string) *NATSServer {
	t.Helper()
	dir := t.TempDir()
	s := &NATSServer{Dir: filepath.Join(dir, "jetstream"), bin: bin, log: filepath.Join(dir, "nats-server.log")}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if s.port, err = FreePort(); err != nil {
			t.Fatal(err)
		}
		if err = s.Start(); err == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("%s: could not start on a free port after 5 attempts: %v", bin, err)
	return nil
}

// Start starts a stopped server again, on the same port with the same store.
func (s *NATSServer) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts != nil {
		return s.startEmbedded()
	}
	return s.startProcess()
}

func (s *NATSServer) startEmbedded() error {
	if s.srv != nil {
		return nil
	}
	opts := *s.opts
	if s.port != 0 {
		opts.Port = s.port
	}
	srv, err := server.NewServer(&opts)
	if err != nil {
		return err
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return errors.New("not ready for connections after 10s")
	}
	s.srv = srv
	s.port = srv.Addr().(*net.TCPAddr).Port
	s.URL = srv.ClientURL()
	s.Version = server.VERSION
	return nil
}

func (s *NATSServer) startProcess() error {
	if s.proc != nil {
		return nil
	}
	port := strconv.Itoa(s.port)
	cmd := exec.Command(s.bin, append([]string{"-js", "-sd", s.Dir, "-a", "127.0.0.1", "-p", port, "-l", s.log}, s.args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test binary
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	p := &natsProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	url := "nats://" + net.JoinHostPort("127.0.0.1", port)
	version, err := waitNATS(url, p.done, 10*time.Second)
	if err != nil {
		_ = cmd.Process.Kill()
		<-p.done
		log, _ := os.ReadFile(s.log)
		return fmt.Errorf("%s on port %s: %w; log: %s", s.bin, port, err, lastLines(string(log), 5))
	}
	s.proc, s.URL, s.Version = p, url, version
	return nil
}

// waitNATS connects until the server answers and returns its version.
func waitNATS(url string, exited <-chan struct{}, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	for {
		nc, err := nats.Connect(url, nats.Timeout(200*time.Millisecond), nats.NoReconnect())
		if err == nil {
			v := nc.ConnectedServerVersion()
			nc.Close()
			return v, nil
		}
		select {
		case <-exited:
			return "", errors.New("process exited")
		default:
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("not accepting connections after %v: %w", limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop stops the server: an embedded one shuts down, a process is killed
// (SIGKILL, a crash). The store stays for Start.
func (s *NATSServer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
		s.srv = nil
	}
	if s.proc != nil {
		_ = s.proc.cmd.Process.Kill()
		<-s.proc.done
		s.proc = nil
	}
}

// Restart stops the server and starts it again on the same port and store.
func (s *NATSServer) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	if err := s.Start(); err != nil {
		t.Fatalf("restart nats-server: %v", err)
	}
}

// Connect returns a connection to the server (reconnecting quickly and for
// ever, for restart tests) and a JetStream on it, closed when the test ends.
func (s *NATSServer) Connect(t testing.TB, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)
	nc, err := nats.Connect(s.URL, opts...)
	if err != nil {
		t.Fatalf("connect to nats-server %s: %v", s.URL, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

var (
	natsBuildOnce sync.Once
	natsBuildBin  string
	natsBuildErr  error
)

// moduleNATSServer returns the path of a nats-server built from the module
// version in go.mod, building it on first use. The binary is kept in the
// user cache directory (one per version), so it is built once per machine;
// a file lock keeps concurrent test binaries from building it twice.
func moduleNATSServer() (string, error) {
	natsBuildOnce.Do(func() { natsBuildBin, natsBuildErr = buildModuleNATSServer() })
	return natsBuildBin, natsBuildErr
}

func buildModuleNATSServer() (string, error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command is needed to build nats-server: %w", err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "coalesce")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "nats-server-v"+server.VERSION)
	if binaryVersion(bin) == server.VERSION {
		return bin, nil
	}
	lock, err := os.OpenFile(bin+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	if binaryVersion(bin) == server.VERSION { // another test binary built it meanwhile
		return bin, nil
	}
	tmp := fmt.Sprintf("%s.tmp-%d", bin, os.Getpid())
	defer os.Remove(tmp)
	// Built from inside this module, so go.mod picks the version (the same
	// one embedded by NATS).
	cmd := exec.Command(gobin, "build", "-o", tmp, "github.com/nats-io/nats-server/v2")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build github.com/nats-io/nats-server/v2: %w: %s", err, lastLines(string(out), 10))
	}
	if v := binaryVersion(tmp); v != server.VERSION {
		return "", fmt.Errorf("built nats-server reports version %q, want %q", v, server.VERSION)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// binaryVersion runs bin --version ("nats-server: v2.15.2") and returns the
// version without the v, or "" when bin is missing or says something else.
func binaryVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(out))
	v, ok := strings.CutPrefix(s, "nats-server: v")
	if !ok || strings.ContainsAny(v, " \n") {
		return ""
	}
	return v
}

// debianNATSServer finds Debian's nats-server package and returns its binary
// and version. It must be older than 2.12: a module-built server found there
// would make the old-server tests meaningless.
func debianNATSServer() (bin, version string, err error) {
	candidates := []string{"/usr/sbin/nats-server", "/usr/bin/nats-server"}
	if out, err := exec.Command("dpkg", "-L", "nats-server").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasSuffix(line, "/nats-server") && filepath.IsAbs(line) {
				candidates = append(candidates, line)
			}
		}
	}
	for _, c := range candidates {
		fi, err := os.Stat(c)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			continue
		}
		v := binaryVersion(c)
		if v == "" {
			continue
		}
		if !strings.HasPrefix(v, "2.9.") {
			return "", "", fmt.Errorf("%s is nats-server %s, not Debian's 2.9 package", c, v)
		}
		return c, v, nil
	}
	return "", "", errors.New("Debian's nats-server (2.9) is not installed")
}
