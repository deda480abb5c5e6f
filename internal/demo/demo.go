// Package demo runs the whole product in one process: an embedded
// Kafka-protocol broker (unless brokers are given), the orchestrator
// service and the reference participants (place-order's five, and with
// trips book-trip's flights, hotels and cars) as separate component groups
// that share nothing but Postgres and Kafka, a seeded mixed workload of
// place-order and book-trip sagas with a failure mix (the trips' approvals
// given or refused through the events API, POST /sagas/{id}/events, served
// on a loopback port for the run), and the invariant check.
package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/sagaflow/sagaflow/internal/dburl"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/devbroker"
	"github.com/sagaflow/sagaflow/internal/metricset"
	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants/conformance"
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

// Summary is the demo's result. Completed, Compensated, Failed and
// NonTerminal count every saga; Sagas counts them by type.
type Summary struct {
	Orders      int                         `json:"orders"`
	Trips       int                         `json:"trips"`
	Sagas       map[string]*workload.Counts `json:"sagas"`
	Completed   int                         `json:"completed"`
	Compensated int                         `json:"compensated"`
	Failed      int                         `json:"failed"`
	NonTerminal int                         `json:"non_terminal"`
	// Outcomes counts the finished records read from the outcome topic
	// (one per saga that ended, checked against the database).
	Outcomes       int      `json:"outcomes"`
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
		if dbURL, err = dburl.Fresh(ctx, cfg.DatabaseURL, cfg.FreshDatabase); err != nil {
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
		Trips:   cfg.Mix.Trips > 0,
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

	// The outcome topic read from its start, as an initiating service
	// would: after the run every saga's end is on it exactly once.
	outcomes, err := conformance.ReadOutcomes(ctx, brokers, svc.Engine().OutcomeTopic())
	if err != nil {
		stop()
		return Summary{}, errors.Join(err, <-errc, <-errc)
	}
	defer outcomes.Close()
	approver, closeAPI, err := eventsAPI(svc.Engine(), log)
	if err != nil {
		stop()
		return Summary{}, errors.Join(err, <-errc, <-errc)
	}
	defer closeAPI()
	if _, err := workload.StartMixed(ctx, svc.Engine(), approver, plan, cfg.Concurrency); err != nil {
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
	rep, err := workload.CheckPlan(ctx, orchPool, schemas, plan, false)
	var ends int
	if err == nil {
		ends, err = checkOutcomes(ctx, orchPool, schemas.Orchestrator, outcomes, rep.Completed+rep.Compensated+rep.Failed, &rep)
	}
	stop()
	runErr := errors.Join(<-errc, <-errc)
	if err != nil {
		return Summary{}, errors.Join(err, runErr)
	}
	if runErr != nil {
		return Summary{}, runErr
	}
	want := len(plan.Orders) + len(plan.Trips)
	sum := Summary{
		Orders: len(plan.Orders), Trips: len(plan.Trips), Sagas: rep.ByType,
		Completed: rep.Completed, Compensated: rep.Compensated, Failed: rep.Failed,
		NonTerminal: rep.NonTerminal + (want - rep.Sagas), InvariantsOK: rep.OK() && rep.Sagas == want,
		Outcomes: ends, Violations: rep.Violations, ElapsedSeconds: elapsed.Seconds(), Brokers: strings.Join(brokers, ","), Database: dburl.Redact(dbURL),
	}
	if sum.Violations == nil {
		sum.Violations = []string{}
	}
	if rep.Sagas != want {
		sum.Violations = append(sum.Violations, fmt.Sprintf("%d orders and %d trips but %d sagas", len(plan.Orders), len(plan.Trips), rep.Sagas))
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
		sum.SagasPerSecond = float64(want) / elapsed.Seconds()
	}
	return sum, nil
}

// outcomeWait bounds the wait for the outcome records of the sagas that
// ended: they are published right after their transitions commit.
const outcomeWait = 30 * time.Second

// checkOutcomes waits until the outcome topic holds ended finished records
// (or outcomeWait passed), then checks them against the sagas and adds
// what is wrong to rep's violations. It returns the finished records read.
func checkOutcomes(ctx context.Context, pool *pgxpool.Pool, schema string, r *conformance.OutcomeReader, ended int, rep *workload.Report) (int, error) {
	got, werr := r.Wait(ctx, outcomeWait, func(o map[uuid.UUID][]message.SagaOutcome) bool {
		return workload.FinishedOutcomes(o) >= ended
	})
	if werr != nil && ctx.Err() != nil {
		return 0, werr
	}
	bad, err := workload.CheckOutcomes(ctx, pool, schema, got)
	if err != nil {
		return 0, err
	}
	if werr != nil {
		bad = append(bad, "outcome topic: "+werr.Error())
	}
	rep.Violations = append(rep.Violations, bad...)
	return workload.FinishedOutcomes(got), nil
}

// eventsAPI serves the HTTP API over eng on a free loopback port for the
// run, and returns an approver that sends the trips' approvals through it
// (POST /sagas/{id}/events) and the function that stops it.
func eventsAPI(eng *orchestrator.Engine, log *slog.Logger) (workload.Approver, func(), error) {
	srv, err := api.New(eng, &api.Config{Logger: log.With(slog.String("component", "api"))})
	if err != nil {
		return nil, nil, fmt.Errorf("demo: events API: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("demo: events API listener: %w", err)
	}
	lim := api.Limits{}.WithDefaults()
	hs := api.NewHTTPServer(srv, lim, log)
	go func() { _ = hs.Serve(api.LimitListener(ln, lim)) }()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}
	return workload.HTTPApprover{Base: "http://" + ln.Addr().String(), Client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}}}, stop, nil
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
