// Package devservers runs the single-node development servers coalesce uses
// when no real ones are configured: an in-process NATS JetStream server
// (store in a data folder) and an in-process Redis (miniredis) kept in real
// time, both listening on loopback so workers and CLIs can connect.
package devservers

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats-server/v2/server"
)

// Options says where the servers listen and keep their data.
type Options struct {
	NATSListen  string // host:port; "127.0.0.1:0" picks a free port
	RedisListen string // host:port; "127.0.0.1:0" picks a free port
	DataDir     string // JetStream store (required)
	// Tick is how often miniredis's clock and TTLs catch up with real time;
	// default 50ms.
	Tick time.Duration
}

// Servers are the running development servers.
type Servers struct {
	NATSURL   string // nats://host:port
	RedisAddr string // host:port
	RedisURL  string // redis://host:port/0

	ns   *server.Server
	mr   *miniredis.Miniredis
	stop chan struct{}
	done sync.WaitGroup
}

// ErrAddrInUse: a listen address is taken (a real server may already run there).
var ErrAddrInUse = errors.New("devservers: address in use")

// Start starts both servers.
func Start(o Options) (*Servers, error) {
	if o.DataDir == "" {
		return nil, errors.New("devservers: DataDir is required")
	}
	if o.Tick <= 0 {
		o.Tick = 50 * time.Millisecond
	}
	host, portStr, err := net.SplitHostPort(o.NATSListen)
	if err != nil {
		return nil, fmt.Errorf("devservers: nats listen %q: %w", o.NATSListen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("devservers: nats listen %q: port: %w", o.NATSListen, err)
	}
	if err := checkFree(o.NATSListen); err != nil {
		return nil, err
	}
	if port == 0 {
		port = -1 // nats-server's "any free port"
	}
	ns, err := server.NewServer(&server.Options{
		Host: host, Port: port, JetStream: true, StoreDir: o.DataDir,
		NoLog: true, NoSigs: true, ServerName: "coalesce-dev",
	})
	if err != nil {
		return nil, fmt.Errorf("devservers: nats: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("devservers: nats on %s did not start within 10s", o.NATSListen)
	}
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr(o.RedisListen); err != nil {
		ns.Shutdown()
		if isAddrInUse(err) {
			return nil, fmt.Errorf("%w: redis listen %s: %v", ErrAddrInUse, o.RedisListen, err)
		}
		return nil, fmt.Errorf("devservers: redis on %s: %w", o.RedisListen, err)
	}
	s := &Servers{NATSURL: ns.ClientURL(), RedisAddr: mr.Addr(), RedisURL: "redis://" + mr.Addr() + "/0", ns: ns, mr: mr, stop: make(chan struct{})}
	// miniredis's TTLs stand still unless its clock moves them (ClockTTL).
	// Move its clock to real time on each tick, in one step under its lock,
	// so that an expiry set with PXAT reads back exactly with PEXPIRETIME
	// (round tokens depend on it) and TTLs run down in real time.
	// Round(0) drops the monotonic reading: miniredis subtracts these times
	// from wall-clock PXAT times, and mixing the two clocks drifts.
	mr.SetTime(time.Now().Round(0))
	mr.ClockTTL(true)
	s.done.Go(func() {
		t := time.NewTicker(o.Tick)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case now := <-t.C:
				mr.SetTime(now.Round(0))
			}
		}
	})
	return s, nil
}

// Close stops both servers.
func (s *Servers) Close() {
	close(s.stop)
	s.done.Wait()
	s.mr.Close()
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

func checkFree(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		if isAddrInUse(err) {
			return fmt.Errorf("%w: %s: %v", ErrAddrInUse, addr, err)
		}
		return fmt.Errorf("devservers: listen %s: %w", addr, err)
	}
	return l.Close()
}

func isAddrInUse(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "listen"
}
