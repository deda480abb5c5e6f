package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/migrations"
)

// NotReadyError is a readiness check's failure: Reason is what /readyz
// tells its caller (generic: which dependency, never its address, user,
// database or the driver's message), Err the details for the log.
type NotReadyError struct {
	Reason string
	Err    error
}

func (e *NotReadyError) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *NotReadyError) Unwrap() error { return e.Err }

// ReadyReason is the reason /readyz may show.
func (e *NotReadyError) ReadyReason() string { return e.Reason }

// The reasons of the readiness checks.
const (
	ReasonPostgres   = "postgres unavailable"
	ReasonKafka      = "kafka unavailable"
	ReasonSchema     = "schema check failed"
	ReasonMigrations = "migrations pending"
	ReasonStarting   = "starting"
	// ReasonPrepareFailing: a process's prepare step (migrations, topics)
	// has failed at least once and is retried.
	ReasonPrepareFailing = "starting: preparing schema and topics keeps failing"
)

// ReadyReason is what a /readyz answer may say of err: the reason of the
// first error in its chain that has one (a ReadyReason method), else "not
// ready". The details stay in the log.
func ReadyReason(err error) string {
	var r interface{ ReadyReason() string }
	if errors.As(err, &r) {
		return r.ReadyReason()
	}
	return "not ready"
}

// ReadyTimeoutDefault bounds each readiness probe (Postgres, broker,
// schema) when the caller's context has no earlier deadline.
const ReadyTimeoutDefault = 2 * time.Second

// Readiness returns a /readyz check for a process using pool and brokers
// (reached through d: TLS, SASL; nil for plain TCP) whose schema is sets:
// Postgres answers a ping, one of the brokers accepts the connection (and
// the credentials) and answers a metadata request, and no migration of sets
// is pending. Each probe is
// bounded by ReadyTimeoutDefault. The participants process uses it too.
// Its errors are *NotReadyError: a generic reason for the caller, the
// details for the log.
func Readiness(pool *pgxpool.Pool, brokers []string, d *kafka.Dialer, sets []migrations.Set) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, ReadyTimeoutDefault)
		defer cancel()
		if err := pool.Ping(ctx); err != nil {
			return &NotReadyError{Reason: ReasonPostgres, Err: fmt.Errorf("postgres: ping: %w", err)}
		}
		if err := PingBrokers(ctx, d, brokers); err != nil {
			return &NotReadyError{Reason: ReasonKafka, Err: err}
		}
		n, err := migrations.Pending(ctx, pool, sets...)
		if err != nil {
			return &NotReadyError{Reason: ReasonSchema, Err: fmt.Errorf("schema: %w", err)}
		}
		if n > 0 {
			return &NotReadyError{Reason: ReasonMigrations, Err: fmt.Errorf("schema: %d migrations pending (run `orchestrator migrate`)", n)}
		}
		return nil
	}
}

// PingBrokers succeeds when one of brokers accepts a connection made by d
// (nil: plain TCP; a TLS handshake or SASL authentication that fails is the
// reason in the error) and answers a metadata request before ctx ends.
func PingBrokers(ctx context.Context, d *kafka.Dialer, brokers []string) error {
	if len(brokers) == 0 {
		return errors.New("kafka: no brokers configured")
	}
	var errs []error
	for _, b := range brokers {
		dialer := d
		if dialer == nil {
			dialer = &kafka.Dialer{}
		}
		conn, err := dialer.DialContext(ctx, "tcp", b)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w (the broker closed the connection: does it require TLS or SASL? check kafka.tls.* and kafka.sasl.*)", err)
			}
			errs = append(errs, fmt.Errorf("kafka: dial %s: %w", b, err))
			continue
		}
		if dl, ok := ctx.Deadline(); ok {
			_ = conn.SetDeadline(dl)
		}
		_, err = conn.Brokers()
		_ = conn.Close()
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("kafka: metadata from %s: %w", b, err))
	}
	return errors.Join(errs...)
}

// Ready is the service's readiness check (see Readiness).
func (s *Service) Ready(ctx context.Context) error {
	sets, err := s.Migrations()
	if err != nil {
		return &NotReadyError{Reason: ReasonSchema, Err: err}
	}
	return Readiness(s.pool, s.cfg.Brokers, s.cfg.Dialer, sets)(ctx)
}
