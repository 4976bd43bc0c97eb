package testenv

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSCluster is a JetStream cluster of nats-server processes (the version of
// go.mod) on loopback, for tests that kill a stream's leader. Each node keeps
// its port, cluster port and store across Stop and Start.
type NATSCluster struct {
	Nodes []*NATSServer
	Name  string // cluster name
}

// NewNATSCluster starts n clustered nats-server processes with JetStream
// and waits until JetStream answers; they are killed when the test ends.
func NewNATSCluster(t testing.TB, n int) *NATSCluster {
	t.Helper()
	bin, err := moduleNATSServer()
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			skipOrFail(t, err.Error())
		}
		t.Fatalf("build nats-server: %v", err)
	}
	c := &NATSCluster{Name: "coalesce-test"}
	ports := make([]int, n)
	cports := make([]int, n)
	for i := range n {
		if ports[i], err = FreePort(); err != nil {
			t.Fatal(err)
		}
		if cports[i], err = FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	routes := make([]string, n)
	for i, p := range cports {
		routes[i] = "nats://127.0.0.1:" + strconv.Itoa(p)
	}
	dir := t.TempDir()
	for i := range n {
		s := &NATSServer{
			Dir: filepath.Join(dir, fmt.Sprintf("n%d", i), "jetstream"), bin: bin, port: ports[i],
			log: filepath.Join(dir, fmt.Sprintf("n%d.log", i)),
			args: []string{"-n", fmt.Sprintf("n%d", i), "--cluster_name", c.Name,
				"-cluster", routes[i], "-routes", strings.Join(routes, ",")},
		}
		c.Nodes = append(c.Nodes, s)
	}
	for _, s := range c.Nodes {
		if err := s.Start(); err != nil {
			t.Fatalf("cluster node: %v", err)
		}
		t.Cleanup(s.Stop)
	}
	if err := c.WaitJetStream(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	return c
}

// URLs returns the client URLs of every node, comma-separated.
func (c *NATSCluster) URLs() string {
	urls := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		urls[i] = "nats://127.0.0.1:" + strconv.Itoa(s.port)
	}
	return strings.Join(urls, ",")
}

// WaitJetStream waits until the cluster's JetStream answers an API request
// (a meta leader is elected).
func (c *NATSCluster) WaitJetStream(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		nc, err := nats.Connect(c.URLs(), nats.Timeout(time.Second))
		if err == nil {
			js, _ := jetstream.New(nc)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = js.AccountInfo(ctx)
			cancel()
			nc.Close()
			if err == nil {
				return nil
			}
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("nats cluster: JetStream not ready after %v: %v", limit, last)
}

// StreamLeader returns the index of the node leading stream (asking for at
// most two seconds: a stream without a leader does not answer).
func (c *NATSCluster) StreamLeader(ctx context.Context, stream string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	nc, err := nats.Connect(c.URLs(), nats.Timeout(time.Second))
	if err != nil {
		return -1, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return -1, err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return -1, err
	}
	info := s.CachedInfo()
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return -1, fmt.Errorf("stream %s has no leader now", stream)
	}
	for i := range c.Nodes {
		if info.Cluster.Leader == fmt.Sprintf("n%d", i) {
			return i, nil
		}
	}
	return -1, fmt.Errorf("stream %s led by unknown server %q", stream, info.Cluster.Leader)
}
