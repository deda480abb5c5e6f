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

// ReadyTimeoutDefault bounds each readiness probe (Postgres, broker,
// schema) when the caller's context has no earlier deadline.
const ReadyTimeoutDefault = 2 * time.Second

// Readiness returns a /readyz check for a process using pool and brokers
// (reached through d: TLS, SASL; nil for plain TCP) whose schema is sets:
// Postgres answers a ping, one of the brokers accepts the connection (and
// the credentials) and answers a metadata request, and no migration of sets
// is pending. Each probe is
// bounded by ReadyTimeoutDefault. The participants process uses it too.
func Readiness(pool *pgxpool.Pool, brokers []string, d *kafka.Dialer, sets []migrations.Set) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, ReadyTimeoutDefault)
		defer cancel()
		if err := pool.Ping(ctx); err != nil {
			return fmt.Errorf("postgres: ping: %w", err)
		}
		if err := PingBrokers(ctx, d, brokers); err != nil {
			return err
		}
		n, err := migrations.Pending(ctx, pool, sets...)
		if err != nil {
			return fmt.Errorf("schema: %w", err)
		}
		if n > 0 {
			return fmt.Errorf("schema: %d migrations pending (run `orchestrator migrate`)", n)
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
		return err
	}
	return Readiness(s.pool, s.cfg.Brokers, s.cfg.Dialer, sets)(ctx)
}
