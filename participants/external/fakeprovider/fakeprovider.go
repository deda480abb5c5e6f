// Package fakeprovider is a fake payment provider on loopback, for tests
// and demos of participants that call an outside system
// (participants/external): POST /charges with an Idempotency-Key header
// and a JSON body charges once per key and answers the charge (the same
// one to every repeat of the key); it can be slow, down (500), fail the
// first calls, and decline amounts over a limit. GET /charges/{key}
// answers what it did for a key (404: nothing), without charging. It counts the charges it
// made, by key, so a test can assert "charged exactly once" from the
// provider's own books.
package fakeprovider

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Charge is what the provider answers for a charge.
type Charge struct {
	ID     string `json:"charge_id"`
	Key    string `json:"idempotency_key"`
	Amount int64  `json:"amount_cents"`
	// Declined is set (and ID empty) when the amount was over the limit.
	Declined bool `json:"declined,omitempty"`
}

// Request is the body of POST /charges.
type Request struct {
	AmountCents int64 `json:"amount_cents"`
}

// Server is a running fake provider.
type Server struct {
	srv *httptest.Server

	mu      sync.Mutex
	charges map[string]Charge // by idempotency key
	// behaviour
	delay     time.Duration
	slowFirst int
	slowBy    time.Duration
	failFirst int
	down      bool
	limit     int64

	calls, inFlight, maxInFlight atomic.Int64
	arrived                      chan struct{}
}

// Start starts a provider on 127.0.0.1 declining amounts over limit
// (0: none); Close stops it.
func Start(limit int64) *Server {
	s := &Server{charges: map[string]Charge{}, limit: limit, arrived: make(chan struct{}, 1)}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// URL is the provider's base URL.
func (s *Server) URL() string { return s.srv.URL }

// Close stops the provider.
func (s *Server) Close() { s.srv.Close() }

// SetDelay makes every answer, charge or lookup, wait d first (the charge
// is made before the wait: a caller that times out has been charged all
// the same).
func (s *Server) SetDelay(d time.Duration) { s.mu.Lock(); s.delay = d; s.mu.Unlock() }

// SlowFirst makes the next n charge calls answer d late (after charging):
// a caller with a shorter timeout loses the answer and calls again.
func (s *Server) SlowFirst(n int, d time.Duration) {
	s.mu.Lock()
	s.slowFirst, s.slowBy = n, d
	s.mu.Unlock()
}

// FailFirst makes the next n calls answer 500 without charging.
func (s *Server) FailFirst(n int) { s.mu.Lock(); s.failFirst = n; s.mu.Unlock() }

// SetDown makes every call answer 500 without charging while down.
func (s *Server) SetDown(down bool) { s.mu.Lock(); s.down = down; s.mu.Unlock() }

// Charged is how many charges the provider made for key (0 or 1).
func (s *Server) Charged(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.charges[key]; ok && !c.Declined {
		return 1
	}
	return 0
}

// Charges is how many charges it made in all.
func (s *Server) Charges() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.charges {
		if !c.Declined {
			n++
		}
	}
	return n
}

// Arrived signals a call's arrival (one pending signal at most: drain it
// before the call to wait for).
func (s *Server) Arrived() <-chan struct{} { return s.arrived }

// Calls is how many calls it received; MaxInFlight the most at once.
func (s *Server) Calls() int64       { return s.calls.Load() }
func (s *Server) MaxInFlight() int64 { return s.maxInFlight.Load() }

// lookup answers the charge made for key, or 404 (500 while down).
func (s *Server) lookup(w http.ResponseWriter, key string) {
	s.mu.Lock()
	c, ok := s.charges[key]
	down := s.down
	s.mu.Unlock()
	switch {
	case down:
		http.Error(w, "provider unavailable", http.StatusInternalServerError)
	case !ok:
		http.Error(w, "no charge for this key", http.StatusNotFound)
	default:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(c)
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.calls.Add(1)
	select {
	case s.arrived <- struct{}{}:
	default: // one pending signal is enough
	}
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for m := s.maxInFlight.Load(); n > m && !s.maxInFlight.CompareAndSwap(m, n); m = s.maxInFlight.Load() {
	}
	if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/charges/") {
		// A slow provider is slow to look up too.
		s.mu.Lock()
		delay := s.delay
		s.mu.Unlock()
		if !wait(r, delay) {
			return
		}
		s.lookup(w, strings.TrimPrefix(r.URL.Path, "/charges/"))
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/charges" {
		http.Error(w, "POST /charges or GET /charges/{key} only", http.StatusNotFound)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	var req Request
	if key == "" || json.NewDecoder(r.Body).Decode(&req) != nil || req.AmountCents <= 0 {
		http.Error(w, "want an Idempotency-Key header and {\"amount_cents\": n > 0}", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	if s.down || s.failFirst > 0 {
		if s.failFirst > 0 {
			s.failFirst--
		}
		s.mu.Unlock()
		http.Error(w, "provider unavailable", http.StatusInternalServerError)
		return
	}
	c, ok := s.charges[key]
	if !ok {
		c = Charge{Key: key, Amount: req.AmountCents}
		if s.limit > 0 && req.AmountCents > s.limit {
			c.Declined = true
		} else {
			c.ID = fmt.Sprintf("ch_%d", len(s.charges)+1)
		}
		s.charges[key] = c
	}
	delay := s.delay
	if s.slowFirst > 0 {
		s.slowFirst--
		delay += s.slowBy
	}
	s.mu.Unlock()
	if !wait(r, delay) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(c)
}

// wait holds the answer to r for delay; false if the caller went away.
func wait(r *http.Request, delay time.Duration) bool {
	if delay <= 0 {
		return true
	}
	select {
	case <-time.After(delay):
		return true
	case <-r.Context().Done():
		return false
	}
}
