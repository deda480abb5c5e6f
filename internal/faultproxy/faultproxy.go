package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ErrNotLoopback is returned by New when an address is not on a loopback
// interface.
var ErrNotLoopback = errors.New("faultproxy: address is not loopback")

// Stats are the proxy's counters since New.
type Stats struct {
	// Connections is the number of client connections accepted and
	// forwarded to the target.
	Connections int64
	// Active is the number of connections open now.
	Active int64
	// Cuts is the number of Cut calls that took the proxy from up to down.
	Cuts int64
	// Refused counts client connections closed at once because the proxy
	// was cut (or the target could not be dialed).
	Refused int64
	// Killed counts open connections closed by Cut or Close.
	Killed int64
	// BytesUp and BytesDown count bytes forwarded client->target and
	// target->client.
	BytesUp, BytesDown int64
}

// Proxy forwards TCP connections from a loopback listen address to a target.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cut     bool
	closed  bool
	latency time.Duration
	conns   map[*link]struct{}

	wg sync.WaitGroup

	connections, cuts, refused, killed, up, down atomic.Int64
}

// link is one proxied client connection and its upstream connection.
type link struct {
	client, upstream net.Conn
	once             sync.Once
}

func (l *link) close() {
	l.once.Do(func() {
		_ = l.client.Close()
		_ = l.upstream.Close()
	})
}

// New listens on listenAddr (host:port on loopback; port 0 picks a free
// port) and forwards every accepted connection to targetAddr (also loopback).
func New(listenAddr, targetAddr string) (*Proxy, error) {
	if err := checkLoopback(listenAddr); err != nil {
		return nil, fmt.Errorf("faultproxy: listen address %q: %w", listenAddr, err)
	}
	if err := checkLoopback(targetAddr); err != nil {
		return nil, fmt.Errorf("faultproxy: target address %q: %w", targetAddr, err)
	}
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen on %q: %w", listenAddr, err)
	}
	p := &Proxy{ln: ln, target: targetAddr, conns: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return ErrNotLoopback
	}
	return nil
}

// Addr is the address clients should connect to (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every open connection and refuses new ones (they are accepted
// and closed at once, as a peer that went away) until Restore. Calling Cut
// on a cut proxy closes nothing more and is not counted again.
func (p *Proxy) Cut() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	if !p.cut {
		p.cut = true
		p.cuts.Add(1)
	}
	links := p.takeLinks()
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// Restore lets new connections through again after Cut.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// IsCut reports whether the proxy is cut.
func (p *Proxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// SetLatency delays every chunk of data by d before it is forwarded, in both
// directions; 0 removes the delay. It applies to chunks read after the call.
func (p *Proxy) SetLatency(d time.Duration) {
	if d < 0 {
		d = 0
	}
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

func (p *Proxy) currentLatency() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency
}

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	active := int64(len(p.conns))
	p.mu.Unlock()
	return Stats{
		Connections: p.connections.Load(),
		Active:      active,
		Cuts:        p.cuts.Load(),
		Refused:     p.refused.Load(),
		Killed:      p.killed.Load(),
		BytesUp:     p.up.Load(),
		BytesDown:   p.down.Load(),
	}
}

// Close stops listening, closes every connection and waits for the proxy's
// goroutines to end. Safe to call twice.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	links := p.takeLinks()
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range links {
		l.close()
	}
	p.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("faultproxy: close listener %s: %w", p.Addr(), err)
	}
	return nil
}

// takeLinks empties the connection set; p.mu must be held.
func (p *Proxy) takeLinks() []*link {
	links := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		links = append(links, l)
		delete(p.conns, l)
	}
	p.killed.Add(int64(len(links)))
	return links
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	var backoff time.Duration
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary accept errors (e.g. out of file descriptors).
			backoff = min(max(backoff*2, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		p.mu.Lock()
		refuse := p.cut || p.closed
		p.mu.Unlock()
		if refuse {
			p.refused.Add(1)
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		p.refused.Add(1)
		_ = client.Close()
		return
	}
	l := &link{client: client, upstream: up}
	p.mu.Lock()
	if p.cut || p.closed {
		p.mu.Unlock()
		p.refused.Add(1)
		l.close()
		return
	}
	p.conns[l] = struct{}{}
	p.mu.Unlock()
	p.connections.Add(1)

	done := make(chan struct{}, 2)
	go func() { p.pipe(up, client, &p.up); done <- struct{}{} }()
	go func() { p.pipe(client, up, &p.down); done <- struct{}{} }()
	<-done
	// One side ended: end the other as a real peer would see it.
	l.close()
	<-done
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

// pipe copies src to dst chunk by chunk, waiting the current latency before
// each write.
func (p *Proxy) pipe(dst, src net.Conn, count *atomic.Int64) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := p.currentLatency(); d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			count.Add(int64(n))
		}
		if err != nil {
			if err == io.EOF {
				// Half close so the peer sees EOF, if it supports it.
				if cw, ok := dst.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
				}
			}
			return
		}
	}
}

// advertisedListener is a net.Listener whose Addr reports another address.
type advertisedListener struct {
	net.Listener
	addr net.Addr
}

func (a advertisedListener) Addr() net.Addr { return a.addr }

// AdvertisedListener wraps ln so that its Addr reports advertised (host:port)
// instead of the real address. A Kafka broker (kfake takes a listener through
// kfake.ListenFn) then tells clients to connect to the proxy at advertised,
// so that every client connection goes through the proxy.
func AdvertisedListener(ln net.Listener, advertised string) (net.Listener, error) {
	a, err := net.ResolveTCPAddr("tcp", advertised)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: advertised address %q: %w", advertised, err)
	}
	return advertisedListener{Listener: ln, addr: a}, nil
}
