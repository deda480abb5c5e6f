package api

import (
	"net/http"
	"strconv"
)

// MaxConcurrentReadsDefault is Config.MaxConcurrentReads' default
// (http.max_concurrent_reads): half of the API pool's default four
// connections, the other half kept for starts and operator actions.
const MaxConcurrentReadsDefault = 2

// unboundedReads are the GET endpoints that do not count as reads: they
// read no saga table through the API's pool.
var unboundedReads = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true, "/openapi.yaml": true}

// boundReads serves r with the mux; a read (GET or HEAD but
// unboundedReads) first takes one of the Config.MaxConcurrentReads slots,
// waiting for one until the request's deadline (503 then), so that a flood
// of reads holds at most that many of the pool's connections and starts
// keep the rest.
func (s *Server) boundReads(w http.ResponseWriter, r *http.Request) {
	if (r.Method != http.MethodGet && r.Method != http.MethodHead) || unboundedReads[r.URL.Path] {
		s.mux.ServeHTTP(w, r)
		return
	}
	select {
	case s.reads <- struct{}{}: // a free slot is taken whatever the deadline
	default:
		select {
		case s.reads <- struct{}{}:
		case <-r.Context().Done():
			w.Header().Set("Retry-After", "1")
			fail(w, http.StatusServiceUnavailable, "", "every read slot stayed busy for %s (http.handler_timeout): at most %s reads are served at once (http.max_concurrent_reads); try again shortly",
				s.cfg.HandlerTimeout, strconv.Itoa(cap(s.reads)))
			return
		}
	}
	defer func() { <-s.reads }()
	s.mux.ServeHTTP(w, r)
}
