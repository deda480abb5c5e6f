// Package reference runs the five reference participants of the
// place-order saga (inventory, coupon, payment, shipping, points) together,
// each in its own Postgres schema with its own outbox, inbox, barrier and
// relay; with Options.Trips also the book-trip saga's flights, hotels and
// cars (TripNames). The demo (with trips when it runs any), the end-to-end
// tests and `orchestrator participants` (trips on unless
// participants.trips is off) use it.
package reference

import (
	"context"
	"fmt"
	"github.com/segmentio/kafka-go"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/runall"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/cars"
	"github.com/sagaflow/sagaflow/participants/coupon"
	"github.com/sagaflow/sagaflow/participants/external"
	"github.com/sagaflow/sagaflow/participants/flights"
	"github.com/sagaflow/sagaflow/participants/hotels"
	"github.com/sagaflow/sagaflow/participants/inventory"
	"github.com/sagaflow/sagaflow/participants/payment"
	"github.com/sagaflow/sagaflow/participants/points"
	"github.com/sagaflow/sagaflow/participants/shipping"
	"github.com/sagaflow/sagaflow/relay"
	"github.com/sagaflow/sagaflow/steps/orderapi"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

// Options configure the reference participants.
type Options struct {
	// Trips adds the book-trip saga's participants (TripNames) to the
	// set. Off: place-order's five only, as before.
	Trips   bool
	Brokers []string
	// Dialer, if set, makes every Kafka connection (TLS, SASL); nil: plain
	// TCP.
	Dialer *kafka.Dialer
	// ReplyTopics are the topics commands may name as reply_to
	// (participants.Config.ReplyTopics; default saga.replies).
	ReplyTopics []string
	// TopicPrefix is put before "<participant>.commands".
	TopicPrefix string
	// SchemaPrefix is put before each participant's schema name.
	SchemaPrefix string
	// ShippingFailRate and PointsFailRate are the chances that one attempt
	// answers a transient failure (retry), to exercise forward retries.
	ShippingFailRate, PointsFailRate float64
	// Seed makes the transient failures reproducible.
	Seed int64
	// PaymentLimitCents: charges above it are declined.
	PaymentLimitCents int64
	// PaymentProvider, if its URL is set, makes the payment participant
	// charge through that outside provider (payment.RegisterProvider):
	// charge-payment answers accepted and Run runs the calls' worker.
	PaymentProvider payment.ProviderOptions
	InboxBatchSize  int
	Partitions      int
	// KeepSent keeps published replies as sent history (relay.Config.KeepSent).
	KeepSent bool
	// NoDispatch leaves every reply to the relay (participants.Config.NoDispatch).
	NoDispatch   bool
	Logger       *slog.Logger
	InboxMetrics *inbox.Metrics
	RelayMetrics *relay.Metrics
	// CommandKeys are the orchestrator's keys every participant verifies
	// commands with, AllowUnsignedCommands takes unsigned ones
	// (participants.Config); empty: commands are not verified.
	CommandKeys           []message.Key
	AllowUnsignedCommands bool
	// ReplyKeys are the participants' own keys, by name
	// (participants.Config.ReplyKey); a participant without one answers
	// unsigned.
	ReplyKeys map[string]message.Key
}

// Set is the reference participants: place-order's five, and with
// Options.Trips book-trip's three.
type Set struct {
	pool  *pgxpool.Pool
	opts  Options
	parts []*participants.Participant
	extra map[string][]migrations.Set
	// workers run next to the participants (the payment provider's calls).
	workers []func(context.Context) error
}

// Names of the reference participants, in saga order.
var Names = []string{orderapi.Inventory, orderapi.Coupon, orderapi.Payment, orderapi.Shipping, orderapi.Points}

// TripNames are the book-trip saga's own participants (its payment is
// place-order's), in saga order; Options.Trips adds them.
var TripNames = []string{tripapi.Flights, tripapi.Hotels, tripapi.Cars}

// AllNames are every reference participant: Names, then TripNames (the
// signing keys, dead-letter topics and fault injection of a run that may
// include trips).
var AllNames = append(append([]string(nil), Names...), TripNames...)

// names are the participants of a set under o.
func (o Options) names() []string {
	if o.Trips {
		return append(append([]string(nil), Names...), TripNames...)
	}
	return Names
}

// Schema is the schema participant name uses under opts.
func (o Options) Schema(name string) string { return o.SchemaPrefix + name }

// New builds the participants; nothing touches Postgres or Kafka yet.
func New(pool *pgxpool.Pool, opts Options) (*Set, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Set{pool: pool, opts: opts, extra: map[string][]migrations.Set{}}
	for _, name := range opts.names() {
		p, err := participants.New(pool, &participants.Config{
			Name: name, Schema: opts.Schema(name), Brokers: opts.Brokers, Dialer: opts.Dialer, ReplyTopics: opts.ReplyTopics,
			CommandTopic:   message.CommandTopic(opts.TopicPrefix, name),
			GroupID:        opts.TopicPrefix + name,
			InboxBatchSize: opts.InboxBatchSize, Logger: opts.Logger,
			InboxMetrics: opts.InboxMetrics, RelayMetrics: opts.RelayMetrics, KeepSent: opts.KeepSent, NoDispatch: opts.NoDispatch,
			CommandKeys: opts.CommandKeys, AllowUnsignedCommands: opts.AllowUnsignedCommands, ReplyKey: opts.ReplyKeys[name],
		})
		if err != nil {
			return nil, err
		}
		var sets []migrations.Set
		switch name {
		case orderapi.Inventory:
			err = inventory.Register(p, inventory.Options{})
			if err == nil {
				sets, err = inventory.Migrations(p.Schema())
			}
		case orderapi.Coupon:
			err = coupon.Register(p, coupon.Options{})
			if err == nil {
				sets, err = coupon.Migrations(p.Schema())
			}
		case orderapi.Payment:
			if opts.PaymentProvider.URL != "" {
				var caller *external.Caller
				if caller, err = payment.RegisterProvider(p, pool, opts.PaymentProvider); err == nil {
					s.workers = append(s.workers, caller.Run)
					sets, err = payment.ProviderMigrations(p.Schema())
				}
				break
			}
			err = payment.Register(p, payment.Options{LimitCents: opts.PaymentLimitCents})
			if err == nil {
				sets, err = payment.Migrations(p.Schema())
			}
		case orderapi.Shipping:
			err = shipping.Register(p, shipping.Options{FailRate: opts.ShippingFailRate, Seed: opts.Seed})
			if err == nil {
				sets, err = shipping.Migrations(p.Schema())
			}
		case orderapi.Points:
			err = points.Register(p, points.Options{FailRate: opts.PointsFailRate, Seed: opts.Seed})
			if err == nil {
				sets, err = points.Migrations(p.Schema())
			}
		case tripapi.Flights:
			err = flights.Register(p, flights.Options{})
			if err == nil {
				sets, err = flights.Migrations(p.Schema())
			}
		case tripapi.Hotels:
			err = hotels.Register(p, hotels.Options{})
			if err == nil {
				sets, err = hotels.Migrations(p.Schema())
			}
		case tripapi.Cars:
			err = cars.Register(p, cars.Options{})
			if err == nil {
				sets, err = cars.Migrations(p.Schema())
			}
		}
		if err != nil {
			return nil, fmt.Errorf("reference participant %q: %w", name, err)
		}
		s.parts = append(s.parts, p)
		s.extra[name] = sets
	}
	return s, nil
}

// Participants returns the participants in saga order.
func (s *Set) Participants() []*participants.Participant { return s.parts }

// Migrations are the SDK and business sets of every participant.
func (s *Set) Migrations() ([]migrations.Set, error) {
	var all []migrations.Set
	for _, p := range s.parts {
		sdk, err := p.Migrations()
		if err != nil {
			return nil, err
		}
		all = append(all, sdk...)
		all = append(all, s.extra[p.Name()]...)
	}
	return all, nil
}

// Topics are the command topics the participants consume and their DLQs,
// and the reply topics they answer on.
func (s *Set) Topics() []string {
	t := append([]string(nil), s.opts.ReplyTopics...)
	if len(t) == 0 {
		t = append(t, message.ReplyTopicDefault)
	}
	for _, name := range s.opts.names() {
		c := message.CommandTopic(s.opts.TopicPrefix, name)
		t = append(t, c, c+inbox.DLQSuffixDefault)
	}
	return t
}

// Prepare migrates every participant's schema and creates the topics.
func (s *Set) Prepare(ctx context.Context) error {
	sets, err := s.Migrations()
	if err != nil {
		return err
	}
	if _, err := migrations.Migrate(ctx, s.pool, sets...); err != nil {
		return err
	}
	parts := s.opts.Partitions
	if parts <= 0 {
		parts = 8
	}
	return kafkaclient.EnsureTopicsWith(ctx, s.opts.Dialer, s.opts.Brokers, parts, 1, s.Topics()...)
}

// Run runs every participant (and the payment provider's call worker, with
// Options.PaymentProvider) until ctx is cancelled; the first error stops
// the others and is returned.
func (s *Set) Run(ctx context.Context) error {
	fns := make([]func(context.Context) error, len(s.parts))
	for i, p := range s.parts {
		fns[i] = func(ctx context.Context) error {
			if err := p.Run(ctx); err != nil {
				return fmt.Errorf("participant %q: %w", p.Name(), err)
			}
			return nil
		}
	}
	return runall.Run(ctx, append(fns, s.workers...)...)
}
