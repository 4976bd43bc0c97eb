// Package devservers runs the single-node development servers coalesce uses
// when no real ones are configured: an in-process NATS JetStream server
// (store in a data folder) and an in-process Redis (miniredis) kept in real
// time, both listening on loopback so workers and CLIs can connect. With a
// snapshot file the in-process Redis outlives a restart (snapshot.go).
package devservers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/redis/go-redis/v9"
)

// Options says where the servers listen and keep their data.
type Options struct {
	NATSListen  string // host:port; "127.0.0.1:0" picks a free port
	RedisListen string // host:port; "127.0.0.1:0" picks a free port
	DataDir     string // JetStream store (required)
	// Tick is how often miniredis's clock and TTLs catch up with real time;
	// default 50ms.
	Tick time.Duration
	// Snapshot, when set, is the file the in-process Redis is kept in:
	// loaded at Start (keys whose expiry passed meanwhile are dropped),
	// written every SnapshotEvery (DefaultSnapshotEvery) while commands
	// run, and at Close once the server has stopped. Without it the
	// in-process Redis keeps everything in memory only.
	Snapshot      string
	SnapshotEvery time.Duration
	Logger        *slog.Logger // snapshot failures; nil discards
	// NoNATS and NoRedis leave out one server (a real one is used instead).
	NoNATS, NoRedis bool
}

// Servers are the running development servers.
type Servers struct {
	NATSURL   string // nats://host:port
	RedisAddr string // host:port
	RedisURL  string // redis://host:port/0

	// Restored is what Start loaded from the snapshot.
	Restored Restore

	ns   *server.Server
	mr   *miniredis.Miniredis
	opts Options
	stop chan struct{}
	done sync.WaitGroup
}

// ErrAddrInUse: a listen address is taken (a real server may already run there).
var ErrAddrInUse = errors.New("devservers: address in use")

// Start starts both servers, or the one of them Options does not leave out.
func Start(o Options) (*Servers, error) {
	if o.DataDir == "" {
		return nil, errors.New("devservers: DataDir is required")
	}
	if o.NoNATS && o.NoRedis {
		return nil, errors.New("devservers: nothing to start")
	}
	if o.Tick <= 0 {
		o.Tick = 50 * time.Millisecond
	}
	if o.SnapshotEvery <= 0 {
		o.SnapshotEvery = DefaultSnapshotEvery
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Servers{opts: o, stop: make(chan struct{})}
	if !o.NoNATS {
		ns, err := startNATS(o)
		if err != nil {
			return nil, err
		}
		s.ns, s.NATSURL = ns, ns.ClientURL()
	}
	if !o.NoRedis {
		mr, restored, err := startRedis(o)
		if err != nil {
			if s.ns != nil {
				s.ns.Shutdown()
			}
			return nil, err
		}
		s.mr, s.Restored = mr, restored
		s.RedisAddr, s.RedisURL = mr.Addr(), "redis://"+mr.Addr()+"/0"
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
		if o.Snapshot != "" {
			s.done.Go(s.snapshots)
		}
	}
	return s, nil
}

func startNATS(o Options) (*server.Server, error) {
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
	return ns, nil
}

func startRedis(o Options) (*miniredis.Miniredis, Restore, error) {
	mr := miniredis.NewMiniRedis()
	// miniredis's TTLs stand still unless its clock moves them (ClockTTL).
	// Its clock is moved to real time on each tick, in one step under its
	// lock, so that an expiry set with PXAT reads back exactly with
	// PEXPIRETIME (round tokens depend on it) and TTLs run down in real
	// time. Round(0) drops the monotonic reading: miniredis subtracts these
	// times from wall-clock PXAT times, and mixing the two clocks drifts.
	now := time.Now().Round(0)
	mr.SetTime(now)
	mr.ClockTTL(true)
	var restored Restore
	if o.Snapshot != "" {
		var err error
		if restored, err = restore(mr, o.Snapshot, now); err != nil {
			return nil, restored, err
		}
	}
	if err := mr.StartAddr(o.RedisListen); err != nil {
		if isAddrInUse(err) {
			return nil, restored, fmt.Errorf("%w: redis listen %s: %v", ErrAddrInUse, o.RedisListen, err)
		}
		return nil, restored, fmt.Errorf("devservers: redis on %s: %w", o.RedisListen, err)
	}
	return mr, restored, nil
}

// snapshots writes the snapshot every SnapshotEvery while commands run. A
// snapshot that takes long spaces out the next ones (ten times its time).
func (s *Servers) snapshots() {
	rdb := redis.NewClient(&redis.Options{Addr: s.mr.Addr(), DisableIdentity: true, MaxRetries: -1})
	defer rdb.Close()
	last := s.mr.CommandCount()
	wait := s.opts.SnapshotEvery
	for {
		t := time.NewTimer(wait)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
		if n := s.mr.CommandCount(); n == last {
			continue // nothing ran since the last one
		}
		start := time.Now()
		keys, err := snapshotLive(context.Background(), s.mr, rdb)
		if err == nil {
			err = writeSnapshot(s.opts.Snapshot, keys, start)
		}
		if err != nil {
			s.opts.Logger.Warn("embedded redis: snapshot failed; the previous one stays", "err", err)
		}
		last = s.mr.CommandCount() // after our own commands
		wait = max(s.opts.SnapshotEvery, 10*time.Since(start))
	}
}

// Close stops both servers. With a snapshot file, the in-process Redis is
// written to it once it has stopped serving, so a graceful stop keeps
// everything.
func (s *Servers) Close() {
	close(s.stop)
	s.done.Wait()
	if s.mr != nil {
		s.mr.Close()
		if s.opts.Snapshot != "" {
			now := time.Now().Round(0)
			s.mr.SetTime(now)
			if err := writeSnapshot(s.opts.Snapshot, snapshotStopped(s.mr, now), now); err != nil {
				s.opts.Logger.Error("embedded redis: final snapshot failed; the one before it stays", "err", err)
			}
		}
	}
	if s.ns != nil {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	}
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
