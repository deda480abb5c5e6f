package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// LimitListener returns a listener that bounds what its connections cost
// (l's zero fields take the defaults; see Limits): at most
// l.MaxConnections served in full, l.MaxConnectionsPerClient of them per
// client; at the cap a new connection takes the place of the one idle
// longest; while BusyPercent of the cap is open, connections idle
// l.BusyIdleTimeout are closed; past the caps, ReserveConnections answer
// /healthz and /readyz only. Accept never waits for a slot, so the health
// endpoints answer during a flood. Serve it with NewHTTPServer's server,
// which reports the connections' states.
func LimitListener(ln net.Listener, l Limits) net.Listener {
	l = l.WithDefaults()
	cl := &connLimiter{Listener: ln, max: l.MaxConnections, perClient: l.MaxConnectionsPerClient,
		busyAt: max(1, l.MaxConnections*BusyPercent/100), busyIdle: l.BusyIdleTimeout,
		clients: map[string]*clientConns{}, conns: map[*limitConn]struct{}{}, closed: make(chan struct{})}
	go cl.sweep()
	return cl
}

type connLimiter struct {
	net.Listener
	max, perClient, busyAt int
	busyIdle               time.Duration
	closed                 chan struct{}
	closeOnce              sync.Once

	mu      sync.Mutex
	full    int // connections served in full
	reserve int // reserve connections
	clients map[string]*clientConns
	conns   map[*limitConn]struct{} // served in full
}

type clientConns struct{ full, reserve int }

// Why a reserve connection is not served in full.
const (
	reasonPerClient = "too many connections from your address: at most %d are served at once (http.max_connections_per_client); only /healthz and /readyz are answered on this one"
	reasonFull      = "the server has its %d connections busy (http.max_connections); only /healthz and /readyz are answered on this one, try again shortly"
)

// limitConn is one accepted connection. Its slot is given back once, on
// its first Close (or when it is evicted).
type limitConn struct {
	net.Conn
	l      *connLimiter
	client string
	// reserve connections: status and message of the answer to anything
	// but the health endpoints.
	reserve bool
	status  int
	msg     string
	timer   *time.Timer

	// guarded by l.mu
	idle      bool // between requests, or no request read yet
	fresh     bool // no request read yet
	idleSince time.Time
	released  bool
}

// clientOf names the client of addr: its IP, an IPv6 address by its /64.
func clientOf(addr net.Addr) string {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return addr.String()
	}
	if ip4 := ta.IP.To4(); ip4 != nil {
		return ip4.String()
	}
	return ta.IP.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			select {
			case <-l.closed:
				return nil, net.ErrClosed
			default:
			}
			return nil, err
		}
		if lc := l.admit(c); lc != nil {
			return lc, nil
		}
		_ = c.Close() // past every cap and the reserve
	}
}

// admit gives c a slot: in full, in the place of the connection idle
// longest, or in the reserve; nil when there is none.
func (l *connLimiter) admit(c net.Conn) *limitConn {
	lc := &limitConn{Conn: c, l: l, client: clientOf(c.RemoteAddr())}
	var victim *limitConn
	now := time.Now()
	l.mu.Lock()
	cc := l.clients[lc.client]
	if cc == nil {
		cc = &clientConns{}
		l.clients[lc.client] = cc
	}
	full := false
	switch {
	case cc.full >= l.perClient:
		lc.status, lc.msg = http.StatusTooManyRequests, fmt.Sprintf(reasonPerClient, l.perClient)
	case l.full < l.max:
		full = true
	default:
		if victim = l.oldestIdleLocked(now); victim != nil {
			l.releaseLocked(victim)
			full = true
		} else {
			lc.status, lc.msg = http.StatusServiceUnavailable, fmt.Sprintf(reasonFull, l.max)
		}
	}
	switch {
	case full:
		l.full++
		cc.full++
		lc.idle, lc.fresh, lc.idleSince = true, true, now
		l.conns[lc] = struct{}{}
	case l.reserve < ReserveConnections && cc.reserve < ReservePerClient:
		l.reserve++
		cc.reserve++
		lc.reserve = true
		lc.timer = time.AfterFunc(ReserveLifetime, func() { _ = lc.Close() })
	default:
		if cc.full == 0 && cc.reserve == 0 {
			delete(l.clients, lc.client)
		}
		lc = nil
	}
	l.mu.Unlock()
	if victim != nil {
		_ = victim.Conn.Close()
	}
	return lc
}

// newConnGrace: a connection that has not sent its first request yet is
// not taken for another one for this long after it was accepted (its
// request is likely on its way).
const newConnGrace = time.Second

// oldestIdleLocked is the connection served in full that has been idle
// longest; nil when none is idle.
func (l *connLimiter) oldestIdleLocked(now time.Time) *limitConn {
	var o *limitConn
	for c := range l.conns {
		if c.fresh && now.Sub(c.idleSince) < newConnGrace {
			continue
		}
		if c.idle && (o == nil || c.idleSince.Before(o.idleSince)) {
			o = c
		}
	}
	return o
}

// releaseLocked gives c's slot back, once.
func (l *connLimiter) releaseLocked(c *limitConn) {
	if c.released {
		return
	}
	c.released = true
	cc := l.clients[c.client]
	if c.reserve {
		l.reserve--
		cc.reserve--
	} else {
		l.full--
		cc.full--
		delete(l.conns, c)
	}
	if cc.full == 0 && cc.reserve == 0 {
		delete(l.clients, c.client)
	}
}

// sweep closes, while the listener is busy, the connections idle longer
// than busyIdle.
func (l *connLimiter) sweep() {
	tick := time.NewTicker(max(l.busyIdle/4, 50*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-l.closed:
			return
		case <-tick.C:
		}
		var stale []*limitConn
		l.mu.Lock()
		if l.full >= l.busyAt {
			cut := time.Now().Add(-l.busyIdle)
			for c := range l.conns {
				if c.idle && c.idleSince.Before(cut) {
					l.releaseLocked(c)
					stale = append(stale, c)
				}
			}
		}
		l.mu.Unlock()
		for _, c := range stale {
			_ = c.Conn.Close()
		}
	}
}

func (l *connLimiter) Close() error {
	err := net.ErrClosed
	l.closeOnce.Do(func() {
		close(l.closed)
		err = l.Listener.Close()
	})
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.l.mu.Lock()
	c.l.releaseLocked(c)
	c.l.mu.Unlock()
	return err
}

// setState records whether c is between requests.
func (c *limitConn) setState(s http.ConnState) {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	switch s {
	case http.StateIdle:
		c.idle, c.fresh, c.idleSince = true, false, time.Now()
	case http.StateActive, http.StateHijacked:
		c.idle, c.fresh = false, false
	}
}

// trackConnState is NewHTTPServer's ConnState: it tells LimitListener's
// connections whether they are idle.
func trackConnState(c net.Conn, s http.ConnState) {
	if lc, ok := c.(*limitConn); ok {
		lc.setState(s)
	}
}

type connKey struct{}

// withConn is NewHTTPServer's ConnContext: requests carry their
// connection, so that reserveOnlyHealth knows a reserve one.
func withConn(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitConn); ok && lc.reserve {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}

// reserveOnlyHealth answers, on a reserve connection, /healthz and
// /readyz, and anything else with the connection's status and reason;
// either way the connection closes after the answer.
func reserveOnlyHealth(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lc, ok := r.Context().Value(connKey{}).(*limitConn)
		if !ok {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		if r.Method == http.MethodGet && (r.URL.Path == "/healthz" || r.URL.Path == "/readyz") {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Retry-After", "1")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		fail(w, lc.status, "", "%s", lc.msg)
	})
}
