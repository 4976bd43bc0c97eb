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

// RedisCluster is a local three-master Redis Cluster on loopback ports.
type RedisCluster struct {
	Addrs []string
	procs []*exec.Cmd
	dir   string
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
func StartCluster() (*RedisCluster, error) {
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
	c := &RedisCluster{dir: dir}
	for range 3 {
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
			cmd, err = startRedisProcess(dir, p, "--cluster-enabled", "yes",
				"--cluster-config-file", "nodes-"+p+".conf", "--cluster-node-timeout", "2000")
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
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
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
			node.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				ok = false
			}
		}
		if ok && client.Ping(context.Background()).Err() == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			c.Stop()
			return nil, errors.New("redis cluster did not reach cluster_state:ok within 15s")
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
		if p.Process != nil {
			_ = p.Process.Kill()
			_, _ = p.Process.Wait()
		}
	}
	c.procs = nil
	_ = os.RemoveAll(c.dir)
}
