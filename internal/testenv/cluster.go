package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a local three-master Redis Cluster on loopback ports
// (with a replica per master when started by NewClusterWithReplicas).
type RedisCluster struct {
	Addrs []string
	procs []*exec.Cmd
	dir   string
	extra []string // options of every node (NewClusterWithReplicas)
}

var (
	clusterOnce sync.Once
	cluster     *RedisCluster
	clusterErr  error
)

// SharedCluster returns the package's three-node Redis Cluster, started on
// first use (about 3 s) and stopped by Main. Tests keep to their own Prefix.
func SharedCluster(t testing.TB) *RedisCluster {
	t.Helper()
	clusterOnce.Do(func() {
		cluster, clusterErr = StartCluster()
		if clusterErr == nil {
			atExit(cluster.Stop)
		}
	})
	if clusterErr != nil {
		skipOrFail(t, clusterErr.Error())
	}
	return cluster
}

// StartCluster starts three redis-server --cluster-enabled nodes and joins
// them with redis-cli --cluster create.
func StartCluster() (*RedisCluster, error) { return startCluster(3, 0) }

// NewClusterWithReplicas starts a private cluster of three primaries with a
// replica each (cluster-node-timeout 2 s, so a killed primary's replica is
// promoted in a few seconds), stopped when the test ends. Kill and Restart
// act on one node.
func NewClusterWithReplicas(t testing.TB, extra ...string) *RedisCluster {
	t.Helper()
	c, err := startCluster(3, 1, extra...)
	if err != nil {
		skipOrFail(t, err.Error())
	}
	t.Cleanup(c.Stop)
	return c
}

// Kill SIGKILLs the node at addr.
func (c *RedisCluster) Kill(addr string) {
	for i, a := range c.Addrs {
		if a == addr && c.procs[i] != nil && c.procs[i].Process != nil {
			_ = c.procs[i].Process.Kill()
			_, _ = c.procs[i].Process.Wait()
			c.procs[i] = nil
		}
	}
}

// Restart starts the killed node at addr again on its files (it rejoins as
// a replica of the shard's new primary).
func (c *RedisCluster) Restart(addr string) error {
	for i, a := range c.Addrs {
		if a != addr || c.procs[i] != nil {
			continue
		}
		_, port, _ := net.SplitHostPort(a)
		cmd, err := startRedisProcess(c.dir, port, c.nodeArgs(port)...)
		if err != nil {
			return err
		}
		c.procs[i] = cmd
	}
	return nil
}

// Primaries lists the nodes that are primaries now, as the given node sees
// the cluster.
func (c *RedisCluster) Primaries(ctx context.Context) ([]string, error) {
	var last error
	for _, a := range c.Addrs {
		node := redis.NewClient(&redis.Options{Addr: a, DisableIdentity: true, MaxRetries: -1})
		raw, err := node.ClusterNodes(ctx).Result()
		node.Close()
		if err != nil {
			last = err
			continue
		}
		var out []string
		for line := range strings.SplitSeq(strings.TrimSpace(raw), "\n") {
			f := strings.Fields(line)
			if len(f) < 3 || !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") {
				continue
			}
			addr, _, _ := strings.Cut(f[1], "@")
			out = append(out, addr)
		}
		return out, nil
	}
	return nil, last
}

// WaitOnlineReplicas waits until every primary counts a replica online.
func (c *RedisCluster) WaitOnlineReplicas(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		primaries, err := c.Primaries(ctx)
		ok := err == nil && len(primaries) > 0
		for _, a := range primaries {
			node := redis.NewClient(&redis.Options{Addr: a, DisableIdentity: true, MaxRetries: -1})
			raw, ierr := node.Info(ctx, "replication").Result()
			node.Close()
			if ierr != nil || !strings.Contains(raw, "state=online") {
				ok = false
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not every primary has an online replica after %v (%v)", limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *RedisCluster) nodeArgs(port string) []string {
	return append([]string{"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes-" + port + ".conf", "--cluster-node-timeout", "2000"}, c.extra...)
}

func startCluster(masters, replicas int, extra ...string) (*RedisCluster, error) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, errors.New("redis-cli is not on PATH: install redis-tools")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New("redis-server is not on PATH: install redis-server")
	}
	dir, err := os.MkdirTemp("", "coalesce-cluster-")
	if err != nil {
		return nil, err
	}
	c := &RedisCluster{dir: dir, extra: extra}
	for range masters * (1 + replicas) {
		var cmd *exec.Cmd
		var port int
		for attempt := 0; attempt < 5; attempt++ {
			if port, err = FreePort(); err != nil {
				continue
			}
			// The cluster bus listens on port+10000; check it is free too.
			if l, lerr := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000))); lerr == nil {
				l.Close()
			} else {
				continue
			}
			p := strconv.Itoa(port)
			cmd, err = startRedisProcess(dir, p, c.nodeArgs(p)...)
			if err == nil {
				break
			}
		}
		if cmd == nil {
			c.Stop()
			return nil, fmt.Errorf("start cluster node: %v", err)
		}
		c.procs = append(c.procs, cmd)
		c.Addrs = append(c.Addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		c.Stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, lastLines(string(out), 5))
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, DisableIdentity: true, MaxRetries: -1})
	defer client.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok := true
		for _, a := range c.Addrs {
			node := redis.NewClient(&redis.Options{Addr: a, DisableIdentity: true, MaxRetries: -1})
			info, err := node.ClusterInfo(context.Background()).Result()
			if err == nil && replicas > 0 && !strings.Contains(info, "cluster_state:ok") {
				ok = false
			}
			if err == nil && replicas > 0 {
				// A replica is ready once its link to its primary is up.
				if raw, ierr := node.Info(context.Background(), "replication").Result(); ierr != nil ||
					strings.Contains(raw, "role:slave") && !strings.Contains(raw, "master_link_status:up") {
					ok = false
				}
			}
			node.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				ok = false
			}
		}
		if ok && client.Ping(context.Background()).Err() == nil {
			if replicas > 0 {
				// And a primary once it counts its replica online, what
				// replication acks read: on a loaded machine that can come
				// seconds after the replica's link is up.
				if err := c.WaitOnlineReplicas(context.Background(), time.Until(deadline)+5*time.Second); err != nil {
					c.Stop()
					return nil, err
				}
			}
			return c, nil
		}
		if time.Now().After(deadline) {
			c.Stop()
			return nil, errors.New("redis cluster did not reach cluster_state:ok (and its replicas their links) within 15s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Client returns a cluster client, closed when the test ends.
func (c *RedisCluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// Stop kills the nodes and removes their files.
func (c *RedisCluster) Stop() {
	for _, p := range c.procs {
		if p != nil && p.Process != nil {
			_ = p.Process.Kill()
			_, _ = p.Process.Wait()
		}
	}
	c.procs = nil
	_ = os.RemoveAll(c.dir)
}
