package api

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// OpsGate guards a process's own ops endpoints outside the API server (the
// participants command's /metrics, /readyz and /holds) with the API's rule
// for /metrics: with Protect, a request needs the client or the admin token
// as a bearer token; a token that is offered must be right wherever it is
// offered (401), and a client's wrong tokens are counted against the same
// budget as the API's (429 with Retry-After past it).
type OpsGate struct {
	admin, client secret
	protect       bool
	trustProxy    bool
	failures      *failureLimiter
	log           *slog.Logger
}

// OpsGateConfig configures an OpsGate: the API's http.admin_token,
// http.client_token, http.protect_metrics and http.trust_proxy.
type OpsGateConfig struct {
	AdminToken, ClientToken string
	Protect, TrustProxy     bool
	Logger                  *slog.Logger // nil: slog.Default()
}

// NewOpsGate checks c (Protect needs a token, or nobody could pass) and
// returns its gate.
func NewOpsGate(c OpsGateConfig) (*OpsGate, error) {
	if c.Protect && c.AdminToken == "" && c.ClientToken == "" {
		return nil, errors.New("api: OpsGateConfig.Protect is set without ClientToken or AdminToken: nobody could pass")
	}
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	return &OpsGate{admin: newSecret(c.AdminToken), client: newSecret(c.ClientToken), protect: c.Protect, trustProxy: c.TrustProxy,
		failures: newFailureLimiter(AuthFailureBurst, AuthFailureRefill, AuthFailureClients), log: log}, nil
}

// Protected reports whether the gate asks for a token.
func (g *OpsGate) Protected() bool { return g.protect }

// Wrap returns h behind the gate.
func (g *OpsGate) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, offered := bearer(r)
		client := clientKeyOf(r, g.trustProxy)
		if offered {
			if wait := g.failures.wait(client, time.Now()); wait > 0 {
				secs := int((wait + time.Second - 1) / time.Second)
				w.Header().Set("Retry-After", strconv.Itoa(secs))
				fail(w, http.StatusTooManyRequests, "", "too many wrong tokens from this client; try again in %d s", secs)
				return
			}
			// Both secrets are always compared: the time taken does not
			// tell which one matched.
			admin, clientTok := g.admin.matches(tok), g.client.matches(tok)
			if !admin && !clientTok {
				g.failures.fail(client, time.Now())
				g.log.WarnContext(r.Context(), "wrong token", slog.String("client", client), slog.String("method", r.Method), slog.String("path", cut(r.URL.Path, 200)))
				g.unauthorized(w)
				return
			}
		} else if g.protect {
			g.unauthorized(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (g *OpsGate) unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="sagaflow"`)
	fail(w, http.StatusUnauthorized, "", "a valid bearer token is required (Authorization: Bearer <token>)")
}
