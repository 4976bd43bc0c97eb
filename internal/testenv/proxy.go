package testenv

import (
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TCP proxy on a loopback port in front of one server, for fault
// injection: it can delay every chunk of bytes (latency plus random jitter,
// order kept), stall (accept and hold connections but forward nothing until
// unstalled), drop every open connection, and refuse new ones.
type Proxy struct {
	ln     net.Listener
	target string

	latency atomic.Int64 // added one-way delay, ns, client to server
	back    atomic.Int64 // added one-way delay, ns, server to client
	jitter  atomic.Int64 // extra random delay in [0, jitter), ns, both ways
	stalled atomic.Bool
	refuse  atomic.Bool
	// stallFrom: stall only the connections from this client IP ("" none).
	stallFrom atomic.Pointer[string]

	mu     sync.Mutex
	links  map[*link]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards each connection to
// target (dialled afresh per connection, so a restarted server is reached
// again).
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays what the client sends by toServer and what the server
// sends by toClient, plus a random [0, jitter) each way.
func (p *Proxy) SetLatency(toServer, toClient, jitter time.Duration) {
	p.latency.Store(int64(toServer))
	p.back.Store(int64(toClient))
	p.jitter.Store(int64(jitter))
}

// Stall stops (true) or resumes (false) forwarding on every connection, old
// and new. New connections are still accepted while stalled.
func (p *Proxy) Stall(on bool) { p.stalled.Store(on) }

// StallFrom stops (true) or resumes (false) forwarding, both ways, on the
// connections whose client connects from ip (old and new): a replica whose
// outgoing connections leave from their own loopback address (redis-server
// bind-source-addr) has its replication link held back while every other
// client goes on.
func (p *Proxy) StallFrom(ip string, on bool) {
	if on {
		p.stallFrom.Store(&ip)
	} else {
		p.stallFrom.Store(nil)
	}
}

// DropFrom closes the connections from client IP ip without forwarding what
// they hold.
func (p *Proxy) DropFrom(ip string) int {
	p.mu.Lock()
	var ls []*link
	for l := range p.links {
		if l.from == ip {
			ls = append(ls, l)
		}
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.close()
	}
	return len(ls)
}

// Refuse makes the proxy close new connections at once (true) or accept them
// again (false).
func (p *Proxy) Refuse(on bool) { p.refuse.Store(on) }

// DropAll closes every open connection (both sides).
func (p *Proxy) DropAll() int {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.close()
	}
	return len(ls)
}

// Heal removes every fault: no latency, no stall, no refusal.
func (p *Proxy) Heal() {
	p.SetLatency(0, 0, 0)
	p.Stall(false)
	p.Refuse(false)
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.DropAll()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refuse.Load() {
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	l := &link{a: client, b: server, done: make(chan struct{})}
	if host, _, err := net.SplitHostPort(client.RemoteAddr().String()); err == nil {
		l.from = host
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); p.pump(l, server, client, &p.latency) }()
	go func() { defer pumps.Done(); p.pump(l, client, server, &p.back) }()
	pumps.Wait()
	l.close()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// link is one proxied connection: client a, server b.
type link struct {
	a, b net.Conn
	from string // the client's IP
	once sync.Once
	done chan struct{}
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		_ = l.a.Close()
		_ = l.b.Close()
	})
}

func (p *Proxy) stalledFrom(l *link) bool {
	ip := p.stallFrom.Load()
	return ip != nil && *ip == l.from
}

type chunk struct {
	data []byte
	due  time.Time
}

// pump copies src to dst through a queue, each chunk held until its due
// time (and while the proxy is stalled). Order is kept: a chunk is never due
// before the one read before it.
func (p *Proxy) pump(l *link, dst, src net.Conn, delay *atomic.Int64) {
	q := make(chan chunk, 512)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for c := range q {
			for p.stalled.Load() || p.stalledFrom(l) {
				select {
				case <-l.done:
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
			if d := time.Until(c.due); d > 0 {
				select {
				case <-l.done:
					return
				case <-time.After(d):
				}
			}
			if _, err := dst.Write(c.data); err != nil {
				l.close()
				return
			}
		}
	}()
	var last time.Time
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			d := time.Duration(delay.Load())
			if j := p.jitter.Load(); j > 0 {
				d += time.Duration(rand.Int64N(j))
			}
			due := time.Now().Add(d)
			if due.Before(last) {
				due = last
			}
			last = due
			select {
			case q <- chunk{data: append([]byte(nil), buf[:n]...), due: due}:
			case <-l.done:
				close(q)
				<-writerDone
				return
			}
		}
		if err != nil {
			close(q)
			if !errors.Is(err, net.ErrClosed) {
				<-writerDone // forward what was read before EOF
			}
			l.close()
			<-writerDone
			return
		}
	}
}
