package api

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
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
	// MaxConnections bounds the connections open at once; further ones
	// wait in the listen backlog until one closes. Default
	// MaxConnectionsDefault.
	MaxConnections int
}

// Limits' defaults.
const (
	ReadHeaderTimeoutDefault = 10 * time.Second
	ReadTimeoutDefault       = 10 * time.Second
	WriteTimeoutDefault      = 30 * time.Second
	IdleTimeoutDefault       = 60 * time.Second
	MaxHeaderBytesDefault    = 64 << 10
	MaxConnectionsDefault    = 256
)

// WithDefaults returns l with its zero fields set to the defaults.
func (l Limits) WithDefaults() Limits {
	l.ReadTimeout = cmp.Or(l.ReadTimeout, ReadTimeoutDefault)
	l.ReadHeaderTimeout = cmp.Or(l.ReadHeaderTimeout, min(ReadHeaderTimeoutDefault, l.ReadTimeout))
	l.WriteTimeout = cmp.Or(l.WriteTimeout, WriteTimeoutDefault)
	l.IdleTimeout = cmp.Or(l.IdleTimeout, IdleTimeoutDefault)
	l.MaxHeaderBytes = cmp.Or(l.MaxHeaderBytes, MaxHeaderBytesDefault)
	l.MaxConnections = cmp.Or(l.MaxConnections, MaxConnectionsDefault)
	return l
}

// Validate checks l as given (zero fields stand for their defaults) with
// handlerTimeout (Config.HandlerTimeout; 0: its default); the error names
// the field.
func (l Limits) Validate(handlerTimeout time.Duration) error {
	for name, d := range map[string]time.Duration{"ReadHeaderTimeout": l.ReadHeaderTimeout, "ReadTimeout": l.ReadTimeout,
		"WriteTimeout": l.WriteTimeout, "IdleTimeout": l.IdleTimeout} {
		if d < 0 {
			return fmt.Errorf("api: Limits.%s is %s, want > 0", name, d)
		}
	}
	switch {
	case l.MaxHeaderBytes < 0:
		return fmt.Errorf("api: Limits.MaxHeaderBytes is %d, want > 0", l.MaxHeaderBytes)
	case l.MaxConnections < 0:
		return fmt.Errorf("api: Limits.MaxConnections is %d, want > 0", l.MaxConnections)
	}
	l, handlerTimeout = l.WithDefaults(), cmp.Or(handlerTimeout, HandlerTimeoutDefault)
	if l.WriteTimeout <= handlerTimeout {
		return fmt.Errorf("api: Limits.WriteTimeout %s must be longer than Config.HandlerTimeout %s (or a slow answer is cut off without its error)", l.WriteTimeout, handlerTimeout)
	}
	return nil
}

// NewHTTPServer returns an http.Server for h with the limits l (its zero
// fields the defaults); log receives the server's own errors (nil: none).
// Serve it on LimitListener(ln, l.MaxConnections).
func NewHTTPServer(h http.Handler, l Limits, log *slog.Logger) *http.Server {
	l = l.WithDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Handler:           headerLimit(h, l.MaxHeaderBytes),
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

// LimitListener returns a listener that has at most n of its connections
// open at once: Accept waits while n are open. n <= 0 means
// MaxConnectionsDefault.
func LimitListener(ln net.Listener, n int) net.Listener {
	if n <= 0 {
		n = MaxConnectionsDefault
	}
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), closed: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	slots     chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
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

// limitConn gives its slot back once, on its first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
