package api

import (
	"net/http"
	"time"
)

// HealthLimits are the limits of the health listener (http.health_addr):
// probes are few and short.
var HealthLimits = Limits{MaxConnections: 32, MaxConnectionsPerClient: 32, ReadTimeout: 5 * time.Second,
	IdleTimeout: 10 * time.Second, BusyIdleTimeout: time.Second}

// HealthOnly serves GET /healthz and /readyz of h and answers 404 to
// anything else: the handler of the health listener (http.health_addr),
// apart from the API's connections, so that no flood of the API can keep
// the probes from an answer.
func HealthOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && (r.URL.Path == "/healthz" || r.URL.Path == "/readyz") {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		fail(w, http.StatusNotFound, "", "the health listener (http.health_addr) serves only GET /healthz and /readyz")
	})
}
