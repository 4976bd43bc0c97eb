// Package testenv starts the real servers the test suites run against: a
// throwaway redis-server on a free loopback port (or the one REDIS_URL names),
// a three-node local Redis Cluster, and miniredis.
//
// Servers are shared by the tests of one package and stopped by Main; each
// test works under its own key prefix (Prefix), never FLUSHALL.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
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

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// RequireEnv, when set to 1 (as .ci/run does), turns a missing redis-server
// into a test failure instead of a skip: CI must never pass by skipping.
const RequireEnv = "COALESCE_REQUIRE_SERVERS"

var (
	mu      sync.Mutex
	stops   []func()
	redisMu sync.Mutex
	shared  *RedisServer
)

// Main runs the tests and then stops every server this package started. Use
// it from TestMain: func TestMain(m *testing.M) { testenv.Main(m) }.
func Main(m *testing.M) { MainWith(m, nil) }

// MainWith is Main with after run once the tests have: it may change the
// exit code (a suite-wide check, say), before the servers stop.
func MainWith(m *testing.M, after func(code int) int) {
	code := m.Run()
	if after != nil {
		code = after(code)
	}
	mu.Lock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	mu.Unlock()
	os.Exit(code)
}

func atExit(f func()) {
	mu.Lock()
	stops = append(stops, f)
	mu.Unlock()
}

// RedisServer is a redis-server process started for tests (or an external
// one from REDIS_URL, which is never stopped).
type RedisServer struct {
	Addr  string // host:port on loopback
	URL   string // redis://host:port/0
	cmd   *exec.Cmd
	dir   string
	extra []string // server options of every start (NewRedisWith)
}

// Stop kills the server (it is restartable with Start on the same port).
func (s *RedisServer) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_, _ = s.cmd.Process.Wait()
	s.cmd = nil
}

// Start (re)starts a stopped server on the same port: with no data, unless
// it was started with persistence (NewRedisWith), which it then reloads.
func (s *RedisServer) Start() error {
	if s.cmd != nil {
		return nil
	}
	_, port, _ := net.SplitHostPort(s.Addr)
	cmd, err := startRedisProcess(s.dir, port, s.extra...)
	if err != nil {
		return err
	}
	s.cmd = cmd
	return nil
}

func skipOrFail(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s (%s=1: servers are required)", msg, RequireEnv)
	}
	t.Skip(msg)
}

// SharedRedis returns the package's real Redis: REDIS_URL when set, else a
// redis-server started on a free loopback port on first use. Tests share it
// and must keep to their own Prefix.
func SharedRedis(t testing.TB) *RedisServer {
	t.Helper()
	redisMu.Lock()
	defer redisMu.Unlock()
	if shared != nil {
		return shared
	}
	if u := os.Getenv("REDIS_URL"); u != "" {
		opt, err := redis.ParseURL(u)
		if err != nil {
			t.Fatalf("REDIS_URL: %v", err)
		}
		shared = &RedisServer{Addr: opt.Addr, URL: u}
		return shared
	}
	s, err := StartRedis()
	if err != nil {
		skipOrFail(t, err.Error())
	}
	atExit(s.cleanup)
	shared = s
	return s
}

// NewRedis starts a private redis-server for a test that stops, restarts or
// reconfigures it; it is stopped when the test ends.
func NewRedis(t testing.TB) *RedisServer {
	t.Helper()
	s, err := StartRedis()
	if err != nil {
		skipOrFail(t, err.Error())
	}
	t.Cleanup(s.cleanup)
	return s
}

// NewRedisWith starts a private redis-server with extra options (say
// "--appendonly", "yes", "--appendfsync", "always"), kept on every restart in
// the same folder; it is stopped when the test ends.
func NewRedisWith(t testing.TB, extra ...string) *RedisServer {
	t.Helper()
	s, err := startRedis(extra)
	if err != nil {
		skipOrFail(t, err.Error())
	}
	t.Cleanup(s.cleanup)
	return s
}

// StartRedis starts a redis-server on a free loopback port with persistence
// off. The caller stops it.
func StartRedis() (*RedisServer, error) { return startRedis(nil) }

func startRedis(extra []string) (*RedisServer, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New("redis-server is not on PATH: install it (apt-get install -y redis-server) or set REDIS_URL")
	}
	dir, err := os.MkdirTemp("", "coalesce-redis-")
	if err != nil {
		return nil, err
	}
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		cmd, err := startRedisProcess(dir, strconv.Itoa(port), extra...)
		if err != nil {
			continue // the port was taken in between; try another
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		return &RedisServer{Addr: addr, URL: "redis://" + addr + "/0", cmd: cmd, dir: dir, extra: extra}, nil
	}
	_ = os.RemoveAll(dir)
	return nil, errors.New("could not start redis-server on a free port after 5 attempts")
}

func (s *RedisServer) cleanup() {
	s.Stop()
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

func startRedisProcess(dir, port string, extra ...string) (*exec.Cmd, error) {
	args := append([]string{
		"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--logfile", filepath.Join(dir, "redis-"+port+".log"),
	}, extra...)
	cmd := exec.Command("redis-server", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test binary
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	addr := net.JoinHostPort("127.0.0.1", port)
	if err := waitRedis(addr, cmd, 5*time.Second); err != nil {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		log, _ := os.ReadFile(filepath.Join(dir, "redis-"+port+".log"))
		return nil, fmt.Errorf("redis-server on %s: %w; log: %s", addr, err, lastLines(string(log), 5))
	}
	return cmd, nil
}

func waitRedis(addr string, cmd *exec.Cmd, limit time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if cmd.ProcessState != nil {
			return errors.New("process exited")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("not answering PING")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	// A port the kernel hands out for listen(0) comes from the ephemeral
	// range, where the client side of every outgoing connection of every
	// test process takes its port too: one may take it before the server
	// that was given it binds ("address already in use", seen in CI). So
	// ports come from below that range (Linux's default starts at 32768),
	// at random, checked bindable; the kernel's pick only as a fallback.
	for range 50 {
		port := freeLow + mrand.IntN(freeHigh-freeLow)
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			l.Close()
			return port, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// The range FreePort picks from, below the kernel's ephemeral ports.
const freeLow, freeHigh = 20000, 32000

// Client returns a go-redis client for the server, closed when the test ends.
func (s *RedisServer) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Miniredis starts an in-process miniredis for the test and returns it with a
// client. Its TTLs only move with FastForward.
func Miniredis(t testing.TB) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return m, c
}

// Prefix returns a key prefix unique to this test, so tests sharing a Redis
// never see each other's keys.
func Prefix(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "_", " ", "_", "{", "", "}", "").Replace(t.Name())
	if len(name) > 24 {
		name = name[:24]
	}
	return "t:" + name + ":" + hex.EncodeToString(b[:]) + ":"
}
