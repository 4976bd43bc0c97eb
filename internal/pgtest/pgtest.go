// Package pgtest starts a throwaway Postgres cluster for tests: initdb into a
// temporary folder and a postgres on a free loopback port, run as the
// postgres user when the tests run as root (initdb refuses root). Each test
// gets its own database in the package's shared cluster (DB), so tests run
// in parallel without seeing each other's rows.
//
// The cluster is stopped by Main (use it from TestMain); postgres is also
// killed if the test binary dies (parent-death signal).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/coalesce-io/coalesce/internal/testenv"
)

// FsyncEnv, set to "on", starts the cluster with fsync (and full page
// writes) on, as production runs, for benchmarks; tests run without.
const FsyncEnv = "COALESCE_PGTEST_FSYNC"

// URLEnv names an external Postgres to use instead of a throwaway cluster
// (a superuser URL: each test creates its own database there).
const URLEnv = "COALESCE_POSTGRES_URL"

var (
	mu     sync.Mutex
	shared *Server
	err0   error
)

// Server is a running Postgres cluster (or the external one URLEnv names).
type Server struct {
	URL  string // superuser URL of the postgres database
	Port int
	Dir  string // data directory ("" when external)
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	cred *syscall.Credential
	bin  string
}

// Main runs the tests, then stops the package's cluster and exits. Use it
// from TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }. Tests of
// such a package start their Redis with testenv.NewRedis (stopped with the
// test), not testenv.SharedRedis, which only testenv.Main stops.
func Main(m *testing.M) {
	code := m.Run()
	mu.Lock()
	if shared != nil {
		shared.Stop()
	}
	mu.Unlock()
	os.Exit(code)
}

// Shared returns the package's cluster, started on first use. When
// Postgres is not installed the test is skipped, or fails with
// COALESCE_REQUIRE_SERVERS=1.
func Shared(t testing.TB) *Server {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if shared == nil && err0 == nil {
		if u := os.Getenv(URLEnv); u != "" {
			shared = &Server{URL: u}
		} else {
			shared, err0 = Start()
		}
	}
	if err0 != nil {
		if os.Getenv(testenv.RequireEnv) == "1" {
			t.Fatalf("postgres: %v (%s=1: servers are required)", err0, testenv.RequireEnv)
		}
		t.Skipf("postgres: %v", err0)
	}
	return shared
}

// DB creates a fresh database for the test in the shared cluster and
// returns its URL; it is dropped when the test ends.
func DB(t testing.TB) string {
	t.Helper()
	s := Shared(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "t_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		t.Fatalf("postgres: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("postgres: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, s.URL)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return s.dbURL(name)
}

// Pool opens a pool on a fresh database (DB), closed when the test ends.
func Pool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	url := DB(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("postgres: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool, url
}

func (s *Server) dbURL(name string) string {
	u := s.URL
	// Replace the path (database) of the superuser URL, keeping the query.
	rest := ""
	if i := strings.IndexByte(u, '?'); i >= 0 {
		u, rest = u[:i], u[i:]
	}
	if i := strings.LastIndexByte(u, '/'); i > len("postgres://") {
		u = u[:i]
	}
	return u + "/" + name + rest
}

// Bin returns the folder of Debian's Postgres binaries (the newest
// /usr/lib/postgresql/N/bin with initdb), or of initdb on PATH.
func Bin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if st, err := os.Stat(d); err == nil && st.Mode()&0o111 != 0 {
			return filepath.Dir(d), nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("initdb not found in /usr/lib/postgresql/*/bin or on PATH: install Postgres (apt-get install -y postgresql) or set " + URLEnv)
}

func version(initdb string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return n
}

// Start initialises a cluster in a new temporary folder and starts it on a
// free loopback port. The caller stops it.
func Start() (*Server, error) {
	bin, err := Bin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "coalesce-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root, initdb needs the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := s.command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w: %s", err, strings.TrimSpace(string(out)))
	}
	for attempt := 0; attempt < 5; attempt++ {
		port, err := testenv.FreePort()
		if err != nil {
			return nil, err
		}
		s.Port = port
		s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
		if err = s.start(); err == nil {
			return s, nil
		}
		if attempt == 4 {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	return nil, errors.New("unreachable")
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL}
	cmd.Dir = s.Dir
	return cmd
}

func (s *Server) start() error {
	logf, err := os.OpenFile(filepath.Join(s.Dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	if s.cred != nil {
		_ = os.Chown(logf.Name(), int(s.cred.Uid), int(s.cred.Gid))
	}
	durability := []string{"-c", "fsync=off", "-c", "full_page_writes=off"}
	if os.Getenv(FsyncEnv) == "on" {
		durability = nil
	}
	args := append([]string{"-D", filepath.Join(s.Dir, "data"), "-p", strconv.Itoa(s.Port), "-k", s.Dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300", "-c", "shared_buffers=64MB"}, durability...)
	cmd := s.command(filepath.Join(s.bin, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(s.Dir, "postgres.log"))
			return fmt.Errorf("postgres exited at start: %s", lastLines(string(log), 5))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := pgx.Connect(ctx, s.URL)
		if err == nil {
			_ = c.Close(ctx)
			cancel()
			s.cmd, s.done = cmd, exited
			return nil
		}
		cancel()
		time.Sleep(50 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-exited
	return errors.New("postgres did not accept connections within 20s")
}

// Stop stops the cluster (fast shutdown, then a kill) and removes its folder.
func (s *Server) Stop() {
	s.halt()
	if s.Dir != "" {
		_ = os.RemoveAll(s.Dir)
	}
}

// Restart stops the cluster (fast shutdown), waits down, and starts it again
// on the same port and data: a database outage for the clients.
func (s *Server) Restart(down time.Duration) error {
	if s.Dir == "" {
		return errors.New("pgtest: an external server cannot be restarted")
	}
	s.halt()
	time.Sleep(down)
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}

func (s *Server) halt() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
