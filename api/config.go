package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagaflow/sagaflow/orchestrator"
)

// Config configures the HTTP API. Zero fields take their defaults; nil is
// a Config of zeros.
type Config struct {
	// AdminToken protects operator actions (Authorization: Bearer <token>)
	// and opens everything else too. Empty: operator actions are disabled
	// (403).
	AdminToken string
	// ClientToken, when set, is required (or the admin token) to start
	// sagas, and opens the reads when they are protected. It must differ
	// from AdminToken. Both tokens must pass WeakToken (New refuses a weak
	// one).
	ClientToken string
	// Operators are named operator tokens (name -> token), one a person:
	// each grants what the admin token does, and the actor of its operator
	// actions and four-eyes decisions is its name. Once any is set,
	// operator actions and proposal decisions need one of them (see
	// operators.go). Names: lower-case letters, digits, '-', '_'; tokens
	// pass WeakToken and differ from every other token.
	Operators map[string]string
	// ProtectReads requires the client or the admin token for read-only
	// endpoints and the status page, and for starts.
	ProtectReads bool
	// ProtectMetrics requires the client or the admin token for /metrics
	// and /readyz (/healthz stays open).
	ProtectMetrics bool
	// TrustProxy says a reverse proxy is in front of the server: the budget
	// of wrong tokens is kept per the last X-Forwarded-For address (the
	// one the proxy saw) rather than per the connection's, and the session
	// cookie is Secure when X-Forwarded-Proto is https.
	TrustProxy bool
	// SecureCookie makes the session cookie always Secure (sent over
	// HTTPS only), for a TLS proxy that does not set X-Forwarded-Proto. It
	// is Secure anyway when the request came over TLS.
	SecureCookie bool
	// MaxDataBytes bounds a saga's data in POST /sagas (at least 2: the
	// data is a JSON object); default DefaultMaxDataBytes.
	MaxDataBytes int
	// HandlerTimeout bounds the handling of one request (its context's
	// deadline); default HandlerTimeoutDefault.
	HandlerTimeout time.Duration
	// MaxConcurrentReads bounds the reads (GET and HEAD but the health,
	// metrics and document endpoints) handled at once, so that reads
	// cannot take every connection of the pool starts use; default
	// MaxConcurrentReadsDefault. See reads.go.
	MaxConcurrentReads int
	// Gatherer serves /metrics; nil: no metrics endpoint.
	Gatherer prometheus.Gatherer
	// ReconcileMetrics are updated by runs started with POST /reconcile/run
	// (nil: none).
	ReconcileMetrics *orchestrator.ReconcileMetrics
	// DeadLetters serves /dlq, /outbox/dead and /ui/dlq; nil: they answer
	// 501.
	DeadLetters DeadLetters
	// Ready reports readiness for /readyz; nil: always ready. Its error is
	// logged; the answer shows only the ReadyReason() of the first error in
	// its chain that has one (orchestrator.NotReadyError), else "not
	// ready".
	Ready func(ctx context.Context) error
	// Prepared reports whether the process has prepared its schema and
	// topics; until it has, every route that reads or writes the
	// database answers 503 "starting" with Retry-After, not a 500. Nil:
	// prepared from the start.
	Prepared func() bool
	// Logger receives the API's logs; nil discards them.
	Logger *slog.Logger
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.MaxDataBytes = cmp.Or(c.MaxDataBytes, DefaultMaxDataBytes)
	c.HandlerTimeout = cmp.Or(c.HandlerTimeout, HandlerTimeoutDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks c as given (zero fields stand for their defaults); the
// error names the field.
func (c Config) validate() error {
	switch {
	case c.MaxDataBytes < 0 || c.MaxDataBytes == 1:
		return fmt.Errorf("api: Config.MaxDataBytes is %d, want at least 2 (the data is a JSON object)", c.MaxDataBytes)
	case c.HandlerTimeout < 0:
		return fmt.Errorf("api: Config.HandlerTimeout is %s, want > 0", c.HandlerTimeout)
	case c.AdminToken != "" && WeakToken(c.AdminToken) != "":
		return fmt.Errorf("api: Config.AdminToken is refused: %s", WeakToken(c.AdminToken))
	case c.ClientToken != "" && WeakToken(c.ClientToken) != "":
		return fmt.Errorf("api: Config.ClientToken is refused: %s", WeakToken(c.ClientToken))
	case c.MaxConcurrentReads < 0:
		return fmt.Errorf("api: Config.MaxConcurrentReads is %d, want > 0", c.MaxConcurrentReads)
	case c.ClientToken != "" && c.ClientToken == c.AdminToken:
		return errors.New("api: Config.ClientToken equals Config.AdminToken: a client could act as an operator")
	case (c.ProtectReads || c.ProtectMetrics) && c.AdminToken == "" && c.ClientToken == "" && len(c.Operators) == 0:
		return errors.New("api: Config.ProtectReads or Config.ProtectMetrics is set without Config.ClientToken or Config.AdminToken: nobody could pass")
	}
	return c.validateOperators()
}
