package external

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/participants"
)

//go:embed sql/*.up.sql
var sqlFiles embed.FS

// Migrations returns the migration set of the calls table in schema (the
// participant's): apply it with the participant's own sets.
func Migrations(schema string) ([]migrations.Set, error) {
	return migrations.FromEmbedded("external", schema, sqlFiles, "sql")
}

// Defaults of Config.
const (
	MaxInFlightDefault     = 8
	CallTimeoutDefault     = 10 * time.Second
	BackoffInitialDefault  = 200 * time.Millisecond
	BackoffMaxDefault      = 30 * time.Second
	CircuitAfterDefault    = 5
	CircuitCooldownDefault = 10 * time.Second
	PollIntervalDefault    = 200 * time.Millisecond
)

// Call is one call to make.
type Call struct {
	// Ref is the accepted step the call settles.
	Ref participants.Ref
	// IdempotencyKey is the same for every attempt of the call (derived
	// from Ref: see IdempotencyKey): send it to the provider.
	IdempotencyKey string
	// Request is what Intend recorded (JSON).
	Request json.RawMessage
	// Attempt counts the attempts, this one included (from 1).
	Attempt int
	// Lookup: the orchestrator queried the step; this attempt is a
	// lookup (Config.Lookup), not the call.
	Lookup bool
}

// Outcome is the provider's definite answer: Done settles the step as
// succeeded with Output, otherwise it fails with Reason.
type Outcome struct {
	Done   bool
	Output any
	Reason string
}

// Done is a definite success; output (a JSON object or nil) is the step's.
func Done(output any) Outcome { return Outcome{Done: true, Output: output} }

// Declined is a definite business "no" (the card declined): the step fails.
func Declined(reason string) Outcome { return Outcome{Reason: reason} }

// CallFunc makes call c (outside any transaction; ctx carries the call's
// timeout). A returned error is transient (a timeout, a 5xx, a refused
// connection): the call is made again after the backoff, with the same
// idempotency key, and counts toward the circuit. An Outcome is definite.
type CallFunc func(ctx context.Context, c Call) (Outcome, error)

// LookupFunc asks the provider what became of call c (by its idempotency
// key), without making it: found with the provider's definite Outcome, or
// not found (the provider never did it). A returned error is transient.
type LookupFunc func(ctx context.Context, c Call) (out Outcome, found bool, err error)

// ReasonNotCalled is the reason a step is failed with when a lookup finds
// the provider never did the call: the saga then compensates, and the
// call is never made.
const ReasonNotCalled = "not_called: the provider has no record of the call"

// Config configures a Caller. Zero fields take their defaults.
type Config struct {
	// Step is the step whose calls this Caller makes (required).
	Step string
	// Call makes a call (required).
	Call CallFunc
	// Lookup, if set, is the step's query hook: when the orchestrator
	// queries the accepted step (its answer was lost or late), the next
	// attempt asks the provider by Lookup instead of calling, and settles
	// the step by what the provider says: done or declined as it answers,
	// failed (ReasonNotCalled) if it never did the call. Nil: a query
	// changes nothing (the call goes on being retried).
	Lookup LookupFunc
	// Settled, if set, records the provider's definite answer in the
	// participant's own tables (a ledger row), in the transaction that
	// settles the step, before Complete or Fail: both commit, or neither.
	// Not called for a step no longer accepted (the call is abandoned).
	Settled func(ctx context.Context, tx pgx.Tx, c Call, out Outcome) error
	// MaxInFlight bounds the calls in flight at once.
	MaxInFlight int
	// CallTimeout bounds one call; Lease (default 3 x CallTimeout) is how
	// long a claimed call is a worker's before another may take it (a
	// worker that crashed mid-call).
	CallTimeout, Lease time.Duration
	// BackoffInitial, BackoffMax: the wait before the n-th attempt after a
	// transient error, doubling from the first, capped.
	BackoffInitial, BackoffMax time.Duration
	// CircuitAfter transient errors in a row open the circuit: no call is
	// made for CircuitCooldown, then one is tried (half open); its success
	// closes the circuit, its failure opens it again.
	CircuitAfter    int
	CircuitCooldown time.Duration
	// PollInterval is how often Run looks for due calls.
	PollInterval time.Duration
	// Now is the clock (default time.Now); Logger receives the logs (nil:
	// discarded).
	Now    func() time.Time
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = MaxInFlightDefault
	}
	def(&c.CallTimeout, CallTimeoutDefault)
	def(&c.Lease, 3*c.CallTimeout)
	def(&c.BackoffInitial, BackoffInitialDefault)
	def(&c.BackoffMax, BackoffMaxDefault)
	def(&c.CircuitCooldown, CircuitCooldownDefault)
	def(&c.PollInterval, PollIntervalDefault)
	if c.CircuitAfter <= 0 {
		c.CircuitAfter = CircuitAfterDefault
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Caller records and makes the calls of one step of a participant.
type Caller struct {
	p       *participants.Participant
	pool    *pgxpool.Pool
	cfg     Config
	sql     statements
	circuit circuit
}

// New returns the Caller of cfg.Step for participant p, whose schema
// holds the calls table (Migrations).
func New(p *participants.Participant, pool *pgxpool.Pool, cfg Config) (*Caller, error) {
	switch {
	case p == nil || pool == nil:
		return nil, errors.New("external: New: participant and pool are required")
	case cfg.Step == "":
		return nil, errors.New("external: New: Config.Step is required")
	case cfg.Call == nil:
		return nil, fmt.Errorf("external: New: step %q: Config.Call is required", cfg.Step)
	case cfg.Lease > 0 && cfg.CallTimeout > 0 && cfg.Lease <= cfg.CallTimeout:
		return nil, fmt.Errorf("external: New: step %q: Config.Lease %s must be longer than CallTimeout %s (or a call still running is taken again)", cfg.Step, cfg.Lease, cfg.CallTimeout)
	}
	c := cfg.withDefaults()
	caller := &Caller{p: p, pool: pool, cfg: c, sql: newStatements(p.Schema()), circuit: circuit{after: c.CircuitAfter, cooldown: c.CircuitCooldown}}
	if c.Lookup != nil {
		if err := p.OnAcceptedQuery(c.Step, caller.lookupAsked); err != nil {
			return nil, fmt.Errorf("external: New: %w", err)
		}
	}
	return caller, nil
}

// lookupAsked is the step's accepted-query hook: the pending call is to
// be looked up, now.
func (c *Caller) lookupAsked(ctx context.Context, tx pgx.Tx, ref participants.Ref) error {
	_, err := tx.Exec(ctx, c.sql.lookup, ref.SagaID, ref.Step, c.cfg.Now())
	return err
}

// keySpace namespaces the idempotency keys.
var keySpace = uuid.MustParse("6f0f8a8e-3c1d-4b1e-9a55-5a6e0d1c2b7f")

// IdempotencyKey is the key of ref's call: a name-based UUID of the
// barrier key (saga id and step), the same for every attempt, every
// process and every restart.
func IdempotencyKey(ref participants.Ref) string {
	return uuid.NewSHA1(keySpace, []byte(ref.String())).String()
}

// Intend records the call cmd's step owes, with request (any value that
// encodes to JSON), in tx, the handler's transaction, and returns the
// handler's answer: accepted. A copy of the command never reaches the
// handler (the barrier answers it); the insert is idempotent all the same.
func (c *Caller) Intend(ctx context.Context, tx pgx.Tx, cmd message.Command, request any) (participants.Result, error) {
	if cmd.Step != c.cfg.Step {
		return participants.Result{}, fmt.Errorf("external: Intend: command of step %q, the caller's is %q", cmd.Step, c.cfg.Step)
	}
	b, err := json.Marshal(request)
	if err != nil {
		return participants.Result{}, fmt.Errorf("external: Intend: step %q saga %s: encode request: %w", cmd.Step, cmd.SagaID, err)
	}
	ref := participants.RefOf(cmd)
	if _, err := tx.Exec(ctx, c.sql.intend, ref.SagaID, ref.Step, IdempotencyKey(ref), string(b), c.cfg.Now()); err != nil {
		return participants.Result{}, fmt.Errorf("external: Intend: step %q saga %s: record: %w", cmd.Step, cmd.SagaID, err)
	}
	return participants.Accepted(), nil
}
