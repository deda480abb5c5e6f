package api

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// The budget of wrong tokens per client (a wrong bearer token, a wrong
// token in a page's form or at POST /ui/login): a client starts with
// AuthFailureBurst, each wrong token spends one and one comes back every
// AuthFailureRefill. With none left, every request of the client that
// offers a token is answered 429 with Retry-After, before its token is
// checked. The table of clients holds at most AuthFailureClients entries;
// when full, clients whose budget is whole again are dropped first, then
// the longest idle.
const (
	AuthFailureBurst   = 10
	AuthFailureRefill  = 6 * time.Second
	AuthFailureClients = 10000
)

// failureLimiter is a token bucket of wrong tokens per client.
type failureLimiter struct {
	mu      sync.Mutex
	burst   float64
	refill  time.Duration
	max     int
	clients map[string]*budget
}

type budget struct {
	left float64
	at   time.Time
}

func newFailureLimiter(burst int, refill time.Duration, max int) *failureLimiter {
	return &failureLimiter{burst: float64(burst), refill: refill, max: max, clients: map[string]*budget{}}
}

// level is b's budget at now.
func (l *failureLimiter) level(b *budget, now time.Time) float64 {
	return min(l.burst, b.left+float64(now.Sub(b.at))/float64(l.refill))
}

// wait is how long client must wait before its next token is checked: 0
// when it has budget left.
func (l *failureLimiter) wait(client string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.clients[client]
	if !ok {
		return 0
	}
	lvl := l.level(b, now)
	if lvl >= 1 {
		return 0
	}
	return time.Duration((1 - lvl) * float64(l.refill))
}

// fail spends one of client's budget.
func (l *failureLimiter) fail(client string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.clients[client]
	if !ok {
		if len(l.clients) >= l.max {
			l.evict(now)
		}
		b = &budget{left: l.burst, at: now}
		l.clients[client] = b
	}
	b.left, b.at = max(l.level(b, now)-1, 0), now
}

// evict makes room in a full table: it drops the clients whose budget is
// whole again, or else the one idle the longest.
func (l *failureLimiter) evict(now time.Time) {
	var oldest string
	var oldestAt time.Time
	for k, b := range l.clients {
		if l.level(b, now) >= l.burst {
			delete(l.clients, k)
			continue
		}
		if oldest == "" || b.at.Before(oldestAt) {
			oldest, oldestAt = k, b.at
		}
	}
	if len(l.clients) >= l.max && oldest != "" {
		delete(l.clients, oldest)
	}
}

// size is the number of clients in the table.
func (l *failureLimiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.clients)
}

// clientKey names the client of r for the budget of wrong tokens: its
// address (an IPv6 address by its /64, the least a host is given). With
// Config.TrustProxy it is the last address of X-Forwarded-For, the one
// the proxy in front of the server saw (what the client itself put in the
// header comes before it and is not believed).
func (s *Server) clientKey(r *http.Request) string { return clientKeyOf(r, s.cfg.TrustProxy) }

// clientKeyOf is clientKey with trustProxy for Config.TrustProxy.
func clientKeyOf(r *http.Request, trustProxy bool) string {
	if trustProxy {
		if ip, ok := lastForwarded(r.Header.Values("X-Forwarded-For")); ok {
			return addrKey(ip)
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return addrKey(ip)
	}
	return cut(host, 100)
}

func lastForwarded(values []string) (netip.Addr, bool) {
	if len(values) == 0 {
		return netip.Addr{}, false
	}
	hops := strings.Split(values[len(values)-1], ",")
	ip, err := netip.ParseAddr(strings.TrimSpace(hops[len(hops)-1]))
	return ip, err == nil
}

func addrKey(ip netip.Addr) string {
	ip = ip.Unmap().WithZone("")
	if ip.Is4() {
		return ip.String()
	}
	p, _ := ip.Prefix(64)
	return p.String()
}

// forwardedHTTPS reports whether r came to the proxy in front of the
// server over HTTPS (X-Forwarded-Proto, believed with Config.TrustProxy).
func (s *Server) forwardedHTTPS(r *http.Request) bool {
	if !s.cfg.TrustProxy {
		return false
	}
	v := r.Header.Values("X-Forwarded-Proto")
	if len(v) == 0 {
		return false
	}
	protos := strings.Split(v[len(v)-1], ",")
	return strings.EqualFold(strings.TrimSpace(protos[len(protos)-1]), "https")
}
