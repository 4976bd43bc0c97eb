// Package devservers runs the single-node development servers coalesce uses
// when no real ones are configured: an in-process NATS JetStream server
// (store in a data folder) and an in-process Redis (miniredis driven by a
// store of its own: real-time expiry without walking the keys, and with a
// data folder every write journaled before it is answered), both listening
// on loopback so workers and CLIs can connect.
package devservers

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
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
	// RedisDir, when set, is the folder the in-process Redis keeps its data
	// in: every write is journaled there before it is answered, so a kill
	// of the process loses nothing; the journal is fsynced every FsyncEvery
	// (a crash of the machine loses at most that) and compacted into a
	// snapshot as it grows. Start loads it. Without it the in-process Redis
	// keeps everything in memory only.
	RedisDir string
	// LegacySnapshot is the snapshot file of an older build (one file,
	// written every second): read when RedisDir holds nothing yet, then
	// rewritten into RedisDir and removed.
	LegacySnapshot string
	// FsyncEvery: how often the journal, and the NATS store, are fsynced
	// (DefaultFsyncEvery).
	FsyncEvery time.Duration
	// ExpireEvery: how often keys whose expiry came are deleted while no
	// command comes (DefaultExpireEvery); a command deletes them first.
	ExpireEvery time.Duration
	// CompactAfter: a snapshot is written once the journal since the last
	// one is this large and larger than the snapshot (DefaultCompactAfter):
	// a start replays at most about that much.
	CompactAfter int64
	Logger       *slog.Logger // restores, compactions, failures; nil discards
	// Fatal is called when the journal cannot be written: the change is
	// applied but would be lost, and its reply must not leave. Default:
	// log and exit the process with status 1 (as Redis stops when it
	// cannot write its AOF).
	Fatal func(error)
	// NoNATS and NoRedis leave out one server (a real one is used instead).
	NoNATS, NoRedis bool
}

// Defaults of Options.
const (
	DefaultFsyncEvery   = time.Second
	DefaultExpireEvery  = 100 * time.Millisecond
	DefaultCompactAfter = 16 << 20
)

// Servers are the running development servers.
type Servers struct {
	NATSURL   string // nats://host:port
	RedisAddr string // host:port
	RedisURL  string // redis://host:port/0

	// Restored is what Start loaded from RedisDir.
	Restored Restore

	ns   *server.Server
	mr   *miniredis.Miniredis
	rs   *store
	ln   net.Listener
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
	o.FsyncEvery = cmp.Or(o.FsyncEvery, DefaultFsyncEvery)
	o.ExpireEvery = cmp.Or(o.ExpireEvery, DefaultExpireEvery)
	o.CompactAfter = cmp.Or(o.CompactAfter, DefaultCompactAfter)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Fatal == nil {
		log := o.Logger
		o.Fatal = func(err error) {
			log.Error("embedded redis: the journal cannot be written; stopping so that no answered write is lost (a restart replays the journal)", "err", err)
			os.Exit(1)
		}
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
		if err := s.startRedis(); err != nil {
			if s.ns != nil {
				s.ns.Shutdown()
			}
			return nil, err
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
		// As the Redis journal: a crash of the machine loses at most
		// about this much (the default, 2 minutes, would lose schedules of
		// rounds the journal kept).
		SyncInterval: o.FsyncEvery,
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

// startRedis loads the in-process Redis from its folder and serves it.
func (s *Servers) startRedis() error {
	o := s.opts
	if err := checkFree(o.RedisListen); err != nil {
		return err
	}
	mr := miniredis.NewMiniRedis()
	// The clock stands at the epoch: TTLs are expiry times (store.go).
	mr.SetTime(epoch)
	// Start it without a listener, install the hook, then listen: no
	// command may pass unjournaled.
	conn, err := mr.Dial()
	if err != nil {
		return fmt.Errorf("devservers: redis: %w", err)
	}
	conn.Close()
	rs, err := newStore(mr, mr.Server(), o.Logger, time.Now, o.Fatal)
	if err != nil {
		mr.Close()
		return err
	}
	rs.minSize = o.CompactAfter
	if o.RedisDir != "" {
		if s.Restored, err = rs.open(o.RedisDir, o.LegacySnapshot); err != nil {
			mr.Close()
			return fmt.Errorf("devservers: %w", err)
		}
	}
	mr.Server().SetPreHook(rs.hook)
	ln, err := net.Listen("tcp", o.RedisListen)
	if err != nil {
		rs.close()
		mr.Close()
		if isAddrInUse(err) {
			return fmt.Errorf("%w: redis listen %s: %v", ErrAddrInUse, o.RedisListen, err)
		}
		return fmt.Errorf("devservers: redis on %s: %w", o.RedisListen, err)
	}
	s.mr, s.rs, s.ln = mr, rs, ln
	s.RedisAddr = ln.Addr().String()
	s.RedisURL = "redis://" + s.RedisAddr + "/0"
	srv := mr.Server()
	s.done.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			srv.ServeConn(c)
		}
	})
	s.done.Go(func() { s.every(o.ExpireEvery, rs.expireTick) })
	if rs.jr != nil {
		s.done.Go(func() {
			s.every(o.FsyncEvery, func() {
				if err := rs.jr.sync(); err != nil {
					// What was written may not reach the disk: as a
					// failed write, stop rather than go on answering.
					o.Fatal(err)
				}
			})
		})
	}
	return nil
}

// every calls f every d until Close.
func (s *Servers) every(d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			f()
		}
	}
}

// SyncRedis makes every write the in-process Redis has answered durable
// (an fsync of its journal): the outbox relay calls it before it deletes
// rows it decided. ErrNotPersisted without a RedisDir.
func (s *Servers) SyncRedis() error {
	if s.rs == nil {
		return ErrNotPersisted
	}
	return s.rs.sync()
}

// RedisPersisted reports whether the in-process Redis journals its writes.
func (s *Servers) RedisPersisted() bool { return s.rs != nil && s.rs.jr != nil }

// RedisStats are the in-process Redis's counts.
func (s *Servers) RedisStats() Stats {
	if s.rs == nil {
		return Stats{}
	}
	s.rs.mu.Lock()
	defer s.rs.mu.Unlock()
	st := s.rs.stats
	if s.rs.jr != nil {
		s.rs.jr.mu.Lock()
		st.JournalSize = s.rs.jr.size
		s.rs.jr.mu.Unlock()
	}
	return st
}

// Close stops both servers. The in-process Redis's journal is complete at
// every moment: Close only makes it durable.
func (s *Servers) Close() {
	close(s.stop)
	if s.ln != nil {
		s.ln.Close()
	}
	if s.mr != nil {
		s.mr.Close()
	}
	s.done.Wait()
	if s.rs != nil {
		if err := s.rs.close(); err != nil {
			s.opts.Logger.Error("embedded redis: closing the journal failed", "err", err)
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
