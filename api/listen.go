package api

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// Limits bound what one HTTP server gives its clients. Zero fields take
// the defaults below.
type Limits struct {
	// ReadHeaderTimeout bounds reading a request's headers, ReadTimeout
	// its headers and body: a client that sends slowly is cut off.
	// Defaults: the shorter of ReadHeaderTimeoutDefault and ReadTimeout,
	// ReadTimeoutDefault.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end
	// of its answer; keep it above Config.HandlerTimeout. Default
	// WriteTimeoutDefault.
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long; default
	// IdleTimeoutDefault.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's line and headers; more answers
	// 431. (http.Server's own bound, set to the same value, refuses far
	// larger headers before reading them all; it allows some slack, so the
	// handler NewHTTPServer returns checks the exact size.) Default
	// MaxHeaderBytesDefault.
	MaxHeaderBytes int
	// MaxConnections bounds the connections served in full at once. At
	// the bound a new connection takes the place of the one idle longest
	// (keep-alive between requests, or opened without a request yet);
	// when none is idle it is served only /healthz and /readyz and
	// answered 503 otherwise (see ReserveConnections). Default
	// MaxConnectionsDefault.
	MaxConnections int
	// MaxConnectionsPerClient bounds the connections of one client (a
	// remote IPv4 address, or IPv6 /64) among MaxConnections (more counts
	// as MaxConnections); past it a connection is served only /healthz
	// and /readyz and answered 429 otherwise. Default
	// MaxConnectionsPerClientDefault; behind a proxy every client is the
	// proxy: raise it to MaxConnections.
	MaxConnectionsPerClient int
	// BusyIdleTimeout replaces IdleTimeout while BusyPercent of
	// MaxConnections or more are open: idle connections are closed
	// sooner when the slots run short. Default BusyIdleTimeoutDefault;
	// longer than IdleTimeout counts as IdleTimeout.
	BusyIdleTimeout time.Duration
}

// Limits' defaults.
const (
	ReadHeaderTimeoutDefault = 10 * time.Second
	ReadTimeoutDefault       = 10 * time.Second
	WriteTimeoutDefault      = 30 * time.Second
	IdleTimeoutDefault       = 60 * time.Second
	MaxHeaderBytesDefault    = 64 << 10
	MaxConnectionsDefault    = 256
	// MaxConnectionsPerClientDefault: a quarter of the default cap.
	MaxConnectionsPerClientDefault = 64
	BusyIdleTimeoutDefault         = 5 * time.Second
	// BusyPercent of MaxConnections open makes the listener busy: idle
	// connections are closed after BusyIdleTimeout.
	BusyPercent = 80
	// ReserveConnections are served beyond the caps, each for one
	// request of /healthz or /readyz (any other answers 503 or 429 and
	// the connection closes) and at most ReserveLifetime:
	// ReservePerClient of them per client, so that one client cannot
	// take them all. A connection beyond the reserve too is closed at
	// once.
	ReserveConnections = 16
	ReservePerClient   = 2
	ReserveLifetime    = 5 * time.Second
)

// WithDefaults returns l with its zero fields set to the defaults.
func (l Limits) WithDefaults() Limits {
	l.ReadTimeout = cmp.Or(l.ReadTimeout, ReadTimeoutDefault)
	l.ReadHeaderTimeout = cmp.Or(l.ReadHeaderTimeout, min(ReadHeaderTimeoutDefault, l.ReadTimeout))
	l.WriteTimeout = cmp.Or(l.WriteTimeout, WriteTimeoutDefault)
	l.IdleTimeout = cmp.Or(l.IdleTimeout, IdleTimeoutDefault)
	l.MaxHeaderBytes = cmp.Or(l.MaxHeaderBytes, MaxHeaderBytesDefault)
	l.MaxConnections = cmp.Or(l.MaxConnections, MaxConnectionsDefault)
	l.MaxConnectionsPerClient = min(cmp.Or(l.MaxConnectionsPerClient, MaxConnectionsPerClientDefault), l.MaxConnections)
	l.BusyIdleTimeout = min(cmp.Or(l.BusyIdleTimeout, BusyIdleTimeoutDefault), l.IdleTimeout)
	return l
}

// Validate checks l as given (zero fields stand for their defaults) with
// handlerTimeout (Config.HandlerTimeout; 0: its default); the error names
// the field.
func (l Limits) Validate(handlerTimeout time.Duration) error {
	for name, d := range map[string]time.Duration{"ReadHeaderTimeout": l.ReadHeaderTimeout, "ReadTimeout": l.ReadTimeout,
		"WriteTimeout": l.WriteTimeout, "IdleTimeout": l.IdleTimeout, "BusyIdleTimeout": l.BusyIdleTimeout} {
		if d < 0 {
			return fmt.Errorf("api: Limits.%s is %s, want > 0", name, d)
		}
	}
	switch {
	case l.MaxHeaderBytes < 0:
		return fmt.Errorf("api: Limits.MaxHeaderBytes is %d, want > 0", l.MaxHeaderBytes)
	case l.MaxConnections < 0:
		return fmt.Errorf("api: Limits.MaxConnections is %d, want > 0", l.MaxConnections)
	case l.MaxConnectionsPerClient < 0:
		return fmt.Errorf("api: Limits.MaxConnectionsPerClient is %d, want > 0", l.MaxConnectionsPerClient)
	}
	l, handlerTimeout = l.WithDefaults(), cmp.Or(handlerTimeout, HandlerTimeoutDefault)
	if l.WriteTimeout <= handlerTimeout {
		return fmt.Errorf("api: Limits.WriteTimeout %s must be longer than Config.HandlerTimeout %s (or a slow answer is cut off without its error)", l.WriteTimeout, handlerTimeout)
	}
	return nil
}

// NewHTTPServer returns an http.Server for h with the limits l (its zero
// fields the defaults); log receives the server's own errors (nil: none).
// Serve it on LimitListener(ln, l): the server tells the listener which
// connections are idle, and answers on the listener's reserve connections
// only /healthz and /readyz.
func NewHTTPServer(h http.Handler, l Limits, log *slog.Logger) *http.Server {
	l = l.WithDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Handler:           reserveOnlyHealth(headerLimit(h, l.MaxHeaderBytes)),
		ConnState:         trackConnState,
		ConnContext:       withConn,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.With(slog.String("component", "http")).Handler(), slog.LevelWarn),
	}
}

// headerLimit answers 431 to requests whose line and headers, as sent,
// are more than max bytes.
func headerLimit(h http.Handler, max int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4 + len("Host: \r\n") + len(r.Host) + 2
		for k, vs := range r.Header {
			for _, v := range vs {
				n += len(k) + len(v) + 4
			}
		}
		if n > max {
			w.Header().Set("Connection", "close")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			fail(w, http.StatusRequestHeaderFieldsTooLarge, "", "the request's headers are %d bytes; at most %d are accepted (http.max_header_bytes)", n, max)
			return
		}
		h.ServeHTTP(w, r)
	})
}
