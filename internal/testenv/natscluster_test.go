package testenv_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/coalesce-io/coalesce/internal/testenv"
)

// TestNATSClusterSurvivesLeaderKill: a replicated stream keeps its messages
// when its leader is killed, and the cluster elects another.
func TestNATSClusterSurvivesLeaderKill(t *testing.T) {
	t.Parallel()
	c := testenv.NewNATSCluster(t, 3)
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := js.Publish(ctx, "r3.x", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	leader, err := c.StreamLeader(ctx, "R3")
	if err != nil {
		t.Fatal(err)
	}
	c.Nodes[leader].Stop()
	var next int
	for deadline := time.Now().Add(20 * time.Second); ; {
		if next, err = c.StreamLeader(ctx, "R3"); err == nil && next != leader {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new leader after the kill: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s, err := js.Stream(ctx, "R3")
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 10 {
		t.Errorf("%d messages after the leader's kill, want 10", n)
	}
	if err := c.Nodes[leader].Start(); err != nil {
		t.Fatal(err)
	}
}
