// Package demo runs the whole product in one process: an embedded
// Kafka-protocol broker (unless brokers are given), the orchestrator
// service and the five reference participants as separate component groups
// that share nothing but Postgres and Kafka, a seeded place-order workload
// with a failure mix, and the invariant check.
package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/devbroker"
	"github.com/sagaflow/sagaflow/internal/metricset"
	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants/external"
	"github.com/sagaflow/sagaflow/participants/external/fakeprovider"
	"github.com/sagaflow/sagaflow/participants/payment"
	"github.com/sagaflow/sagaflow/participants/reference"
	"github.com/sagaflow/sagaflow/relay"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
)

// Config configures a demo run.
type Config struct {
	// DatabaseURL is the Postgres server to use. With FreshDatabase set, the
	// demo creates (after dropping) the database FreshDatabase on that
	// server and runs there; otherwise it uses DatabaseURL's database and
	// the schemas under SchemaPrefix as they are.
	DatabaseURL   string
	FreshDatabase string
	// Brokers: empty starts an embedded broker for the run.
	Brokers []string
	Mix     workload.Mix
	// ShippingFailRate, PointsFailRate: transient failure chance per attempt.
	ShippingFailRate, PointsFailRate float64
	// Concurrency of saga starts.
	Concurrency int
	// Timeout bounds the wait for every saga to become terminal.
	Timeout time.Duration
	// Engine overrides (timer interval, topic names).
	Engine   orchestrator.EngineConfig
	Registry *saga.Registry
	Logger   *slog.Logger
	// Registerer receives every component's metrics (nil: a private registry).
	Registerer prometheus.Registerer
	// OnReady is called, if set, once everything runs and before the orders
	// are started, with the orchestrator service (to serve HTTP, say).
	OnReady func(*orchestrator.Service)
	// KeepSent: the relays keep published rows as sent history
	// (relay.Config.KeepSent) instead of deleting them.
	KeepSent bool
	// CommandKeys are the orchestrator's keys the participants verify
	// commands with, ReplyKeys each participant's own key (see
	// reference.Options). Where neither these nor Engine.Signing give
	// keys, keys are generated for the run: the demo signs its records.
	CommandKeys []message.Key
	ReplyKeys   map[string]message.Key
	// PaymentProvider charges through a fake payment provider started on
	// loopback for the run (participants/external/fakeprovider, declining
	// over Mix.LimitCents), the way a real participant calls one
	// (payment.RegisterProvider): charge-payment is answered accepted and
	// settled by the provider's answer. The check adds: the provider made
	// exactly the charges the ledger holds.
	PaymentProvider bool
}

// Summary is the demo's result.
type Summary struct {
	Orders         int      `json:"orders"`
	Completed      int      `json:"completed"`
	Compensated    int      `json:"compensated"`
	Failed         int      `json:"failed"`
	NonTerminal    int      `json:"non_terminal"`
	InvariantsOK   bool     `json:"invariants_ok"`
	Violations     []string `json:"violations"`
	ElapsedSeconds float64  `json:"elapsed_seconds"`
	SagasPerSecond float64  `json:"sagas_per_second"`
	Brokers        string   `json:"brokers"`
	Database       string   `json:"database"`
	// ProviderCharges is the fake provider's own count of charges (with
	// Config.PaymentProvider).
	ProviderCharges int `json:"provider_charges,omitempty"`
}

// FreshDatabaseURL drops and creates database name on the server of base
// and returns its URL.
func FreshDatabaseURL(ctx context.Context, base, name string) (string, error) {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", fmt.Errorf("connect to Postgres at %s: %w (is it running? pg_ctlcluster --skip-systemctl-redirect 15 main start; or run the demo on a throwaway server: demo --embedded-postgres)", redact(base), err)
	}
	defer conn.Close(ctx)
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("drop database %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return WithDatabase(base, name)
}

// WithDatabase is the URL base with its database replaced by name.
func WithDatabase(base, name string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme == "" {
		return "", fmt.Errorf("database url %q must be a postgres:// URL to derive the demo database", redact(base))
	}
	u.Path = "/" + name
	return u.String(), nil
}

func redact(dsn string) string { return Redact(dsn) }

// Redact hides the password of a Postgres connection string for printing:
// the URL form's (postgres://user:secret@host/db, and a password query
// parameter) and the keyword form's (host=h password=secret, quoted or
// not) become xxxxx.
func Redact(dsn string) string {
	if p, err := url.Parse(dsn); err == nil && (p.Scheme == "postgres" || p.Scheme == "postgresql") {
		if p.User != nil {
			if _, has := p.User.Password(); has {
				p.User = url.UserPassword(p.User.Username(), "xxxxx")
			}
		}
		if q := p.Query(); q.Has("password") {
			q.Set("password", "xxxxx")
			p.RawQuery = q.Encode()
		}
		return p.String()
	}
	return redactKeywords(dsn)
}

// redactKeywords replaces the value of every password keyword of a
// keyword/value connection string (libpq's syntax: key = value, values
// single-quoted with backslash escapes or bare up to a space).
func redactKeywords(dsn string) string {
	var b strings.Builder
	i := 0
	for i < len(dsn) {
		// copy the spaces and the key, up to and with the '='
		start := i
		for i < len(dsn) && isSpace(dsn[i]) {
			i++
		}
		keyStart := i
		for i < len(dsn) && dsn[i] != '=' && !isSpace(dsn[i]) {
			i++
		}
		key := dsn[keyStart:i]
		for i < len(dsn) && isSpace(dsn[i]) {
			i++
		}
		if i >= len(dsn) || dsn[i] != '=' {
			b.WriteString(dsn[start:i])
			continue
		}
		i++
		for i < len(dsn) && isSpace(dsn[i]) {
			i++
		}
		b.WriteString(dsn[start:i])
		valStart := i
		if i < len(dsn) && dsn[i] == '\'' {
			for i++; i < len(dsn) && dsn[i] != '\''; i++ {
				if dsn[i] == '\\' {
					i++
				}
			}
			i = min(i+1, len(dsn))
		} else {
			for i < len(dsn) && !isSpace(dsn[i]) {
				if dsn[i] == '\\' {
					i++
				}
				i++
			}
			i = min(i, len(dsn))
		}
		if strings.EqualFold(key, "password") {
			b.WriteString("xxxxx")
		} else {
			b.WriteString(dsn[valStart:i])
		}
	}
	return b.String()
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// Run runs the demo and returns its summary. An error means the demo could
// not run; violated invariants are reported in the summary.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	started := time.Now()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Minute
	}
	reg := cfg.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	dbURL := cfg.DatabaseURL
	if cfg.FreshDatabase != "" {
		var err error
		if dbURL, err = FreshDatabaseURL(ctx, cfg.DatabaseURL, cfg.FreshDatabase); err != nil {
			return Summary{}, err
		}
	}
	brokers := cfg.Brokers
	if len(brokers) == 0 {
		b, err := devbroker.Start(devbroker.Config{Partitions: 8})
		if err != nil {
			return Summary{}, err
		}
		defer b.Close()
		brokers = b.Addrs()
		log.Info("embedded Kafka-protocol broker started", slog.String("addr", strings.Join(brokers, ",")))
	}

	// Two pools: the orchestrator and the participants share nothing but
	// the Postgres server and the broker.
	orchPool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return Summary{}, fmt.Errorf("orchestrator pool: %w", err)
	}
	defer orchPool.Close()
	partPool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return Summary{}, fmt.Errorf("participants pool: %w", err)
	}
	defer partPool.Close()

	registry := cfg.Registry
	if registry == nil {
		registry = saga.NewRegistry()
		if err := steps.Register(registry); err != nil {
			return Summary{}, err
		}
	}
	ms, err := metricset.Register(reg)
	if err != nil {
		return Summary{}, err
	}
	sm, im, rm := ms.Saga, ms.Inbox, ms.Relay
	ec := cfg.Engine
	ec.Metrics = sm
	sg, cmdKeys, replyKeys, err := signing(&cfg)
	if err != nil {
		return Summary{}, fmt.Errorf("demo: signing keys: %w", err)
	}
	ec.Signing = sg
	svc, err := orchestrator.New(orchPool, registry, &orchestrator.Config{
		Brokers: brokers, Engine: ec, Logger: log.With(slog.String("component", "orchestrator")),
		Inbox: inbox.Config{Metrics: im}, Relay: relay.Config{Metrics: rm, KeepSent: cfg.KeepSent},
	})
	if err != nil {
		return Summary{}, err
	}
	popts := reference.Options{
		Brokers: brokers, ShippingFailRate: cfg.ShippingFailRate, PointsFailRate: cfg.PointsFailRate,
		Seed: cfg.Mix.Seed, PaymentLimitCents: cfg.Mix.LimitCents, Logger: log.With(slog.String("component", "participants")),
		InboxMetrics: im, RelayMetrics: rm, KeepSent: cfg.KeepSent,
		CommandKeys: cmdKeys, ReplyKeys: replyKeys,
	}
	var provider *fakeprovider.Server
	if cfg.PaymentProvider {
		limit := cfg.Mix.LimitCents
		if limit == 0 {
			limit = payment.LimitCentsDefault
		}
		provider = fakeprovider.Start(limit)
		defer provider.Close()
		popts.PaymentProvider = payment.ProviderOptions{URL: provider.URL(), External: external.Config{Logger: popts.Logger}}
	}
	parts, err := reference.New(partPool, popts)
	if err != nil {
		return Summary{}, err
	}
	if err := svc.Prepare(ctx); err != nil {
		return Summary{}, fmt.Errorf("prepare orchestrator: %w", err)
	}
	if err := parts.Prepare(ctx); err != nil {
		return Summary{}, fmt.Errorf("prepare participants: %w", err)
	}
	schemas := workload.SchemasOf(svc.Engine().Outbox().Schema(), parts)
	plan := workload.NewPlan(cfg.Mix)
	if err := workload.Seed(ctx, partPool, schemas, plan); err != nil {
		return Summary{}, err
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 2)
	go func() { errc <- wrap("orchestrator", svc.Run(runCtx)) }()
	go func() { errc <- wrap("participants", parts.Run(runCtx)) }()
	if cfg.OnReady != nil {
		cfg.OnReady(svc)
	}

	if _, err := workload.StartAll(ctx, svc.Engine(), plan, cfg.Concurrency); err != nil {
		stop()
		return Summary{}, errors.Join(err, <-errc, <-errc)
	}
	waitCtx, cancelWait := context.WithTimeout(ctx, cfg.Timeout)
	left, werr := workload.WaitTerminal(waitCtx, orchPool, schemas.Orchestrator, 25*time.Millisecond)
	cancelWait()
	elapsed := time.Since(started)
	if werr != nil && !errors.Is(werr, context.DeadlineExceeded) {
		stop()
		return Summary{}, errors.Join(werr, <-errc, <-errc)
	}
	if left > 0 {
		log.Warn("timed out waiting for sagas", slog.Int64("non_terminal", left))
	}
	rep, err := workload.Check(ctx, orchPool, schemas, plan.Stock, false)
	stop()
	runErr := errors.Join(<-errc, <-errc)
	if err != nil {
		return Summary{}, errors.Join(err, runErr)
	}
	if runErr != nil {
		return Summary{}, runErr
	}
	sum := Summary{
		Orders: len(plan.Orders), Completed: rep.Completed, Compensated: rep.Compensated, Failed: rep.Failed,
		NonTerminal: rep.NonTerminal + (len(plan.Orders) - rep.Sagas), InvariantsOK: rep.OK() && rep.Sagas == len(plan.Orders),
		Violations: rep.Violations, ElapsedSeconds: elapsed.Seconds(), Brokers: strings.Join(brokers, ","), Database: redact(dbURL),
	}
	if sum.Violations == nil {
		sum.Violations = []string{}
	}
	if rep.Sagas != len(plan.Orders) {
		sum.Violations = append(sum.Violations, fmt.Sprintf("%d orders but %d sagas", len(plan.Orders), rep.Sagas))
	}
	if provider != nil {
		if v, err := providerMatchesLedger(ctx, partPool, schemas.Payment, provider); err != nil {
			return Summary{}, err
		} else if v != "" {
			sum.Violations = append(sum.Violations, v)
			sum.InvariantsOK = false
		}
		sum.ProviderCharges = provider.Charges()
	}
	if elapsed > 0 {
		sum.SagasPerSecond = float64(len(plan.Orders)) / elapsed.Seconds()
	}
	return sum, nil
}

// providerMatchesLedger compares the provider's own count of charges with
// the ledger's: "" when every charge the provider made is in the ledger
// once and the ledger holds no other.
func providerMatchesLedger(ctx context.Context, pool *pgxpool.Pool, schema string, provider *fakeprovider.Server) (string, error) {
	charges, err := payment.Charges(ctx, pool, schema)
	if err != nil {
		return "", fmt.Errorf("demo: read the ledger: %w", err)
	}
	n := 0
	for _, c := range charges {
		n += c
	}
	if got := provider.Charges(); got != n {
		return fmt.Sprintf("the payment provider made %d charges, the ledger holds %d", got, n), nil
	}
	return "", nil
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}
