package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReplicaSourceIP is the loopback address a RedisNode's outgoing
// connections (its replication link to its primary) leave from, so that the
// primary's front proxy can hold them back alone (Proxy.StallFrom).
const ReplicaSourceIP = "127.0.0.2"

// RedisNode is a redis-server that everyone reaches through its own front
// proxy: clients, Sentinels and its replicas. It announces the proxy's port
// as its own, so a Sentinel hands out the proxy's address after a failover
// too, and its outgoing connections leave from ReplicaSourceIP: the front
// proxy of its primary can hold its replication link back (a slow link or
// a partition) while clients go on.
type RedisNode struct {
	*RedisServer
	Front *Proxy
	// Addr is the front proxy's host:port: the node's address for
	// everyone.
	Addr string
}

// NewRedisNode starts a redis-server with extra options behind its front
// proxy; both stop when the test ends. Restart it with Stop and Start: it
// keeps its options (and its data with persistence options).
func NewRedisNode(t testing.TB, extra ...string) *RedisNode {
	t.Helper()
	s := NewRedisWith(t, extra...)
	front, err := NewProxy(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(front.Close)
	_, port, _ := net.SplitHostPort(front.Addr())
	announce := []string{"--replica-announce-ip", "127.0.0.1", "--replica-announce-port", port, "--bind-source-addr", ReplicaSourceIP}
	s.extra = append(s.extra, announce...)
	c := s.Client(t)
	ctx := context.Background()
	for i := 0; i+1 < len(announce); i += 2 {
		if err := c.ConfigSet(ctx, strings.TrimPrefix(announce[i], "--"), announce[i+1]).Err(); err != nil {
			t.Fatalf("CONFIG SET %s: %v", announce[i], err)
		}
	}
	return &RedisNode{RedisServer: s, Front: front, Addr: front.Addr()}
}

// ReplicaOf makes n a replica of primary (through primary's front proxy)
// and waits until its link is up.
func (n *RedisNode) ReplicaOf(t testing.TB, primary *RedisNode) {
	t.Helper()
	host, port, _ := net.SplitHostPort(primary.Addr)
	c := n.Client(t)
	ctx := context.Background()
	if err := c.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatalf("REPLICAOF: %v", err)
	}
	if err := WaitLinkUp(ctx, c, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// The replica says its link is up once it loaded the primary's data;
	// the primary counts it online only at its first acknowledgement.
	pc := primary.Client(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		raw, err := pc.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(raw, "state=online") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the primary does not count its replica online within 10s: %v %s", err, raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitLinkUp waits until a replica's link to its primary is up.
func WaitLinkUp(ctx context.Context, c *redis.Client, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		raw, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(raw, "master_link_status:up") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica link not up within %v: %v %s", limit, err, raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitOnlineReplica waits until n, a primary, counts a replica online (one
// that finished its sync).
func (n *RedisNode) WaitOnlineReplica(ctx context.Context, limit time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: n.RedisServer.Addr, DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(limit)
	for {
		raw, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(raw, "state=online") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s counts no replica online after %v: %v %s", n.Addr, limit, err, raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// HoldReplicas holds back (true) or lets go (false) the replication links
// into n: its replicas stop receiving its writes and stop acknowledging
// them, as over a slow or partitioned link.
func (n *RedisNode) HoldReplicas(on bool) { n.Front.StallFrom(ReplicaSourceIP, on) }

// Sentinels are redis-sentinel processes watching one primary.
type Sentinels struct {
	Addrs  []string
	Master string
	procs  []*exec.Cmd
	dirs   []string
}

// NewSentinels starts n Sentinels (quorum n/2+1) watching primary under the
// name master, with a 1 s down-after and a 5 s failover timeout; they stop
// when the test ends.
func NewSentinels(t testing.TB, n int, master string, primary *RedisNode) *Sentinels {
	t.Helper()
	bin, err := exec.LookPath("redis-sentinel")
	if err != nil {
		bin, err = exec.LookPath("redis-server")
		if err != nil {
			skipOrFail(t, "redis-sentinel is not on PATH: install redis-sentinel")
		}
	}
	host, port, _ := net.SplitHostPort(primary.Addr)
	s := &Sentinels{Master: master}
	t.Cleanup(s.Stop)
	for i := range n {
		dir := t.TempDir()
		sport, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\n"+
			"sentinel monitor %s %s %s %d\n"+
			"sentinel down-after-milliseconds %s 1000\n"+
			"sentinel failover-timeout %s 5000\n"+
			"sentinel parallel-syncs %s 1\n",
			sport, dir, filepath.Join(dir, "sentinel.log"), master, host, port, n/2+1, master, master, master)
		file := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		args := []string{file}
		if filepath.Base(bin) == "redis-server" {
			args = append(args, "--sentinel")
		}
		cmd := exec.Command(bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start sentinel %d: %v", i, err)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sport))
		if err := waitRedis(addr, cmd, 5*time.Second); err != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "sentinel.log"))
			t.Fatalf("sentinel %d on %s: %v: %s", i, addr, err, lastLines(string(log), 5))
		}
		s.Addrs = append(s.Addrs, addr)
		s.procs = append(s.procs, cmd)
		s.dirs = append(s.dirs, dir)
	}
	return s
}

// Stop kills every Sentinel.
func (s *Sentinels) Stop() {
	for _, p := range s.procs {
		_ = p.Process.Kill()
		_, _ = p.Process.Wait()
	}
	s.procs = nil
}

// Primary asks the first Sentinel that answers for the primary's address.
func (s *Sentinels) Primary(ctx context.Context) (string, error) {
	var last error
	for _, a := range s.Addrs {
		c := redis.NewSentinelClient(&redis.Options{Addr: a, DisableIdentity: true, MaxRetries: -1})
		addr, err := c.GetMasterAddrByName(ctx, s.Master).Result()
		_ = c.Close()
		if err == nil && len(addr) == 2 {
			return net.JoinHostPort(addr[0], addr[1]), nil
		}
		last = err
	}
	return "", fmt.Errorf("no sentinel named a primary: %v", last)
}

// WaitPrimary waits until the Sentinels name a primary other than not.
func (s *Sentinels) WaitPrimary(ctx context.Context, not string, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	for {
		addr, err := s.Primary(ctx)
		if err == nil && addr != not {
			return addr, nil
		}
		if time.Now().After(deadline) {
			return "", errors.Join(fmt.Errorf("the sentinels still name %s after %v", not, limit), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
