// Package cli is the orchestrator command line: demo, serve, participants,
// dev-broker, migrate and config. Configuration comes from a YAML file
// (--config), SAGAFLOW_* environment variables and flags, in rising order
// of precedence. Load decodes them once into a Config before a command
// runs; the commands read its fields and fill the packages' Config structs
// from them, never viper.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/inbox/dlq"
	"github.com/sagaflow/sagaflow/internal/backoff"
	"github.com/sagaflow/sagaflow/internal/devbroker"
	"github.com/sagaflow/sagaflow/internal/metricset"
	"github.com/sagaflow/sagaflow/internal/retention"

	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants/reference"
	"github.com/sagaflow/sagaflow/relay"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
)

// Main runs the command line with args and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := Root(stdout, stderr)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		var ex exitError
		if errors.As(err, &ex) {
			return ex.code
		}
		fmt.Fprintln(stderr, "error:", safeLines(err.Error()))
		return 1
	}
	return 0
}

type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// Root builds the command tree.
func Root(stdout, stderr io.Writer) *cobra.Command {
	v := newViper()
	var cfgFile string
	cfg := &Config{}
	root := &cobra.Command{
		Use:           "orchestrator",
		Short:         "Saga orchestrator over Kafka with a Postgres outbox and inbox",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadFile(v, cfgFile); err != nil {
				return err
			}
			load := Load
			if cmd.Annotations[unchecked] != "" {
				load = decode
			}
			c, err := load(v)
			if err != nil {
				return err
			}
			c.Database.URLConfigured = databaseConfigured(cmd, v)
			*cfg = *c
			return nil
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&cfgFile, "config", "", "YAML configuration file")
	pf := root.PersistentFlags()
	pf.String("database-url", "", "Postgres URL (database.url)")
	pf.String("brokers", "", "Kafka brokers, comma-separated (kafka.brokers)")
	pf.String("log-level", "", "log level (log.level)")
	pf.String("log-format", "", "log format (log.format)")
	bind(v, pf.Lookup("database-url"), "database.url")
	bind(v, pf.Lookup("brokers"), "kafka.brokers")
	bind(v, pf.Lookup("log-level"), "log.level")
	bind(v, pf.Lookup("log-format"), "log.format")

	root.AddCommand(demoCmd(v, cfg), serveCmd(v, cfg), participantsCmd(v, cfg), devBrokerCmd(v, cfg), migrateCmd(cfg), configCmd(cfg),
		statusCmd(cfg), listCmd(cfg), benchCmd(cfg), chaosCmd(cfg), reconcileCmd(cfg), dlqCmd(cfg), conformanceCmd(cfg), historyCmd(cfg))
	root.AddCommand(actionCmds(cfg)...)
	root.AddCommand(proposalCmds(cfg)...)
	return root
}

func bind(v *viper.Viper, f *pflag.Flag, key string) {
	_ = v.BindPFlag(key, f)
}

// newPool returns a pool of at most maxConns connections to database.url.
func newPool(ctx context.Context, db DatabaseConfig, maxConns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		return nil, fmt.Errorf("database.url: %w", err)
	}
	cfg.MaxConns = int32(maxConns)
	return pgxpool.NewWithConfig(ctx, cfg)
}

// registry holds the reference definitions with the per-step overrides.
func (c *Config) registry() (*saga.Registry, error) {
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		return nil, err
	}
	if err := c.applyOverrides(reg); err != nil {
		return nil, err
	}
	if err := c.checkSagaTypes(reg); err != nil {
		return nil, err
	}
	reg.SetMaxSends(c.Orchestrator.MaxSendsPerSaga)
	return reg, nil
}

// preparer runs a process's prepare step (migrations, topics) inside its
// run function, after the HTTP listener is up, and makes readiness report
// the last prepare error until it succeeded.
type preparer struct {
	mu   sync.Mutex
	done bool
	last error
}

// ready wraps a readiness check: not ready (with the reason) until
// prepared.
func (p *preparer) ready(check func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		p.mu.Lock()
		done, last := p.done, p.last
		p.mu.Unlock()
		switch {
		case done:
			return check(ctx)
		case last != nil:
			return &orchestrator.NotReadyError{Reason: orchestrator.ReasonPrepareFailing, Err: fmt.Errorf("preparing schema and topics keeps failing: %w", kafkaHint(last))}
		}
		return &orchestrator.NotReadyError{Reason: orchestrator.ReasonStarting, Err: errors.New("preparing schema and topics")}
	}
}

// prepared reports whether the prepare step has succeeded.
func (p *preparer) prepared() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// then returns a run function that prepares (retrying) and then runs run.
// A stop (ctx cancelled) while preparing is a clean stop.
func (p *preparer) then(log *slog.Logger, what string, prepare, run func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		err := prepareWithRetry(ctx, log, what, func(ctx context.Context) error {
			err := prepare(ctx)
			p.mu.Lock()
			p.done, p.last = err == nil, err
			p.mu.Unlock()
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		return run(ctx)
	}
}

// kafkaHint adds what an EOF from a broker usually means.
func kafkaHint(err error) error {
	if errors.Is(err, io.EOF) || strings.HasSuffix(err.Error(), ": EOF") {
		return fmt.Errorf("%w (the broker closed the connection: does it require TLS or SASL? check kafka.tls.* and kafka.sasl.*)", err)
	}
	return err
}

// prepareWithRetry runs prepare (migrations, topics) until it succeeds or
// ctx ends, backing off from 200ms to 10s: a process started while Postgres
// or the broker is down waits for them instead of exiting (and
// crash-looping under a supervisor).
func prepareWithRetry(ctx context.Context, log *slog.Logger, what string, prepare func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := prepare(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: prepare: %w", what, err)
		}
		wait := backoff.Exponential(200*time.Millisecond, 10*time.Second, attempt)
		log.Warn("prepare failed; retrying", slog.String("component", what), slog.Int("attempt", attempt),
			slog.Duration("retry_in", wait), slog.String("error", err.Error()))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: prepare: %w", what, err)
		case <-t.C:
		}
	}
}

// process is what serve and participants both set up from the
// configuration before anything else.
type process struct {
	log     *slog.Logger
	brokers []string
	dialer  *kafka.Dialer
	limits  api.Limits
	metrics *metricset.Set
	pool    *pgxpool.Pool
}

// setupProcess reads the logger, the brokers (required: what names the
// command in the error), the Kafka dialer and the HTTP limits, registers the
// metrics and opens the pool (the caller closes it).
func setupProcess(ctx context.Context, cfg *Config, what string) (*process, error) {
	p := &process{log: cfg.Log.logger(), brokers: cfg.Kafka.Brokers, limits: cfg.HTTP.limits()}
	if len(p.brokers) == 0 {
		return nil, fmt.Errorf("kafka.brokers (or KAFKA_BROKERS, --brokers) is required for %s", what)
	}
	var err error
	if p.dialer, err = kafkaDialer(cfg.Kafka); err != nil {
		return nil, err
	}
	if p.metrics, err = metricset.New(); err != nil {
		return nil, err
	}
	if p.pool, err = newPool(ctx, cfg.Database, cfg.Database.MaxConns); err != nil {
		return nil, err
	}
	return p, nil
}

func serveCmd(v *viper.Viper, cfg *Config) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the orchestrator (reply consumer, relay, timers, HTTP API) against Postgres and Kafka",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := cfg.HTTP.validateServe(); err != nil {
				return err
			}
			acfg := cfg.HTTP.api()
			reg, err := cfg.registry()
			if err != nil {
				return err
			}
			p, err := setupProcess(ctx, cfg, "serve; `orchestrator dev-broker` runs one for development")
			if err != nil {
				return err
			}
			defer p.pool.Close()
			log, limits, bs, dialer, ms, pool := p.log, p.limits, p.brokers, p.dialer, p.metrics, p.pool
			ec := cfg.engine()
			ec.Metrics = ms.Saga
			ms.Saga.InitTypes(reg.Types()...)
			cfg.Security.warn(log, false)
			var stopTracing func()
			if ec.Tracer, stopTracing, err = newTracing(ctx, cfg.Tracing); err != nil {
				return err
			}
			defer stopTracing()
			svc, err := orchestrator.New(pool, reg, &orchestrator.Config{
				Brokers: bs, Dialer: dialer, GroupID: cfg.Orchestrator.GroupID, Engine: ec, Logger: log,
				StartTopic: cfg.Kafka.StartTopic, EventTopic: cfg.Kafka.EventTopic,
				Partitions: cfg.Kafka.Partitions, Replication: cfg.Kafka.Replication,
				Inbox: inbox.Config{Metrics: ms.Inbox, BatchSize: cfg.Orchestrator.InboxBatch},
				Relay: relay.Config{Metrics: ms.Relay, BatchSize: cfg.Orchestrator.RelayBatch, KeepSent: cfg.Relay.KeepSent, Advanced: cfg.Relay.advanced()},
			})
			if err != nil {
				return err
			}
			// Prepared inside run, with the HTTP listener up: /readyz says
			// why the process is not ready yet (a broker refusing its
			// credentials, Postgres away) instead of nothing answering.
			prep := &preparer{}
			// The HTTP API has its own small pool, and an engine over it, so
			// that reads and starts cannot take the connections of the
			// reply consumer and the timers.
			apiPool, err := newPool(ctx, cfg.Database, cfg.HTTP.DBMaxConns)
			if err != nil {
				return err
			}
			defer apiPool.Close()
			apiEC := ec
			apiEC.Logger = log
			if d := svc.Dispatcher(); d != nil {
				apiEC.Dispatcher = d // HTTP starts go out right after their commit too
			}
			apiEng, err := orchestrator.NewEngine(apiPool, reg, &apiEC)
			if err != nil {
				return err
			}
			// Sagas started over HTTP are kept where the reply consumer
			// looks, so their first reply needs no load either.
			apiEng.ShareSagaCache(svc.Engine())
			acfg.Gatherer, acfg.Logger = ms.Registry, log.With(slog.String("component", "api"))
			acfg.ReconcileMetrics = ms.Reconcile
			acfg.Ready = prep.ready(svc.Ready) // prepared; Postgres ping, broker metadata, no pending migration
			acfg.Prepared = prep.prepared      // until then: 503 "starting", not a 500
			if acfg.ClientToken == "" && !acfg.ProtectReads {
				log.Warn("POST /sagas is open to anyone who reaches http.addr: set http.client_token", slog.String("addr", cfg.HTTP.Addr))
			}
			if !acfg.ProtectReads && !loopback(cfg.HTTP.Addr) {
				log.Warn("the reads and the status page (saga data, journals, dead letters) are open to anyone who reaches http.addr: set http.protect_reads",
					slog.String("addr", cfg.HTTP.Addr))
			}
			if acfg.DeadLetters, err = dlq.New(apiPool, cfg.Orchestrator.Schema, consumedTopics(cfg, cfg.Orchestrator.Schema)...); err != nil {
				return err
			}
			srv, err := api.New(apiEng, &acfg)
			if err != nil {
				return err
			}
			schema := svc.Engine().Outbox().Schema()
			run, err := withRetention(cfg.Retention, pool, log, ms, []string{schema}, schema, svc.Run)
			if err != nil {
				return err
			}
			run = withReconciler(cfg.Reconcile, svc, ms, run)
			return serveHTTP(ctx, log, httpAddrs{api: cfg.HTTP.Addr, health: cfg.HTTP.HealthAddr}, srv, limits, prep.then(log, "orchestrator", svc.Prepare, run), cfg.Shutdown.Timeout)
		},
	}
	cmd.Flags().String("addr", "", "HTTP listen address (http.addr)")
	_ = v.BindPFlag("http.addr", cmd.Flags().Lookup("addr"))
	return cmd
}

// serveHTTP serves h on addr (none if addr is empty) while run runs. When
// ctx ends (SIGTERM, SIGINT) the HTTP server stops accepting requests and
// drains those in flight, run's context is cancelled so it stops taking
// work and finishes what it holds (inbox batches commit, offsets commit),
// and serveHTTP waits for both at most grace; past it, it returns an error
// (the process exits 1 with the work that did not finish left to be
// redone from the outbox and the consumer group's offsets).
// The server has the limits lim (timeouts, header size, connections).
// With addrs.health, /healthz and /readyz of h are served there too, on
// their own listener (api.HealthLimits), apart from the API's connections.
func serveHTTP(ctx context.Context, log *slog.Logger, addrs httpAddrs, h http.Handler, lim api.Limits, run func(context.Context) error, grace time.Duration) error {
	if grace <= 0 {
		return fmt.Errorf("shutdown.timeout %s must be positive", grace)
	}
	var servers []*http.Server
	srvDone := make(chan error, 2)
	for _, l := range []struct {
		key, addr string
		h         http.Handler
		lim       api.Limits
	}{{"http.addr", addrs.api, h, lim}, {"http.health_addr", addrs.health, api.HealthOnly(h), api.HealthLimits}} {
		if l.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			for _, hs := range servers {
				_ = hs.Close()
			}
			return fmt.Errorf("%s %s: %w", l.key, l.addr, err)
		}
		lim := l.lim.WithDefaults()
		hs := api.NewHTTPServer(l.h, lim, log)
		log.Info("HTTP listening", slog.String("key", l.key), slog.String("addr", ln.Addr().String()), slog.Int("max_connections", lim.MaxConnections),
			slog.Int("max_connections_per_client", lim.MaxConnectionsPerClient))
		servers = append(servers, hs)
		limited, what := api.LimitListener(ln, lim), fmt.Sprintf("http server on %s (%s)", ln.Addr(), l.key)
		go func() { srvDone <- fmt.Errorf("%s: %w", what, hs.Serve(limited)) }()
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- run(runCtx) }()
	var runErr error
	finished := false
	select {
	case <-ctx.Done():
		log.Info("shutting down: no new work, finishing in-flight work", slog.Duration("timeout", grace))
	case runErr = <-runDone:
		finished = true
	case runErr = <-srvDone:
	}
	cancel()
	started := time.Now()
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	shutDone := make(chan struct{})
	sctx, scancel := context.WithTimeout(context.Background(), grace)
	defer scancel()
	go func() {
		defer close(shutDone)
		for _, hs := range servers {
			_ = hs.Shutdown(sctx)
		}
	}()
	if !finished {
		select {
		case err := <-runDone:
			runErr = errors.Join(runErr, err)
		case <-deadline.C:
			return errors.Join(runErr, fmt.Errorf("shutdown.timeout %s passed before in-flight work finished; exiting anyway (unfinished work is redone after restart)", grace))
		}
	}
	select {
	case <-shutDone:
	case <-deadline.C:
	}
	if runErr == nil {
		log.Info("stopped", slog.Duration("shutdown", time.Since(started)))
	}
	return runErr
}

// httpAddrs are the listen addresses of serveHTTP: the API (none when
// empty) and its health endpoints alone (none when empty).
type httpAddrs struct{ api, health string }

// withRetention returns run, or run beside a retention purger of schemas
// (outbox and inbox) and orchSchema (saga history) when retention.enabled.
func withRetention(rc RetentionConfig, pool *pgxpool.Pool, log *slog.Logger, ms *metricset.Set, schemas []string, orchSchema string, run func(context.Context) error) (func(context.Context) error, error) {
	if !rc.Enabled {
		return run, nil
	}
	p, err := retention.New(pool, &retention.Config{
		Schemas: schemas, OrchestratorSchema: orchSchema,
		SentOutboxAfter: rc.SentOutboxAfter, InboxAfter: rc.InboxAfter, FinishedSagaAfter: rc.FinishedSagaAfter,
		FailedSagaAfter: rc.FailedSagaAfter, BarrierAfter: rc.BarrierAfter,
		DeadLetterAfter: rc.DeadLetterAfter, AuditAfter: rc.AuditAfter, StrayDeadLetterAfter: rc.StrayDeadLetterAfter,
		BatchSize: rc.BatchSize, Interval: rc.Interval, Logger: log.With(slog.String("component", "retention")), Metrics: ms.Retention,
	})
	if err != nil {
		return nil, fmt.Errorf("retention.*: %w", err)
	}
	return func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		retDone := make(chan error, 1)
		go func() { retDone <- p.Run(ctx) }()
		err := run(ctx)
		cancel()
		return errors.Join(err, <-retDone)
	}, nil
}

func devBrokerCmd(v *viper.Viper, cfg *Config) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dev-broker",
		Short: "Run the embedded in-memory Kafka-protocol broker alone (development without Docker)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			mech, _ := f.GetString("sasl-mechanism")
			user, _ := f.GetString("sasl-user")
			pass, _ := f.GetString("sasl-password")
			cert, _ := f.GetString("tls-cert")
			key, _ := f.GetString("tls-key")
			principalsFlag, _ := f.GetString("principals")
			principals, err := devBrokerPrincipals(cfg, principalsFlag)
			if err != nil {
				return err
			}
			b, err := devbroker.Start(devbroker.Config{
				Addr: cfg.DevBroker.Addr, Partitions: cfg.Kafka.Partitions,
				SASL:        devbroker.SASL{Mechanism: mech, User: user, Password: pass},
				TLSCertFile: cert, TLSKeyFile: key, Principals: principals,
			})
			if err != nil {
				return err
			}
			defer b.Close()
			var how []string
			if cert != "" {
				how = append(how, "TLS")
			}
			if mech != "" {
				how = append(how, "SASL "+strings.ToUpper(mech)+" as "+user)
			}
			if len(how) == 0 {
				how = append(how, "plaintext")
			}
			for _, p := range principals {
				fmt.Fprintf(cmd.OutOrStdout(), "principal %s may: %s\n", p.User, joinACLs(p.ACLs))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "dev broker listening on %s (%s; in memory; everything is lost when it stops)\n", strings.Join(b.Addrs(), ","), strings.Join(how, ", "))
			<-cmd.Context().Done()
			return nil
		},
	}
	cmd.Flags().String("addr", "", "listen address (dev_broker.addr)")
	_ = v.BindPFlag("dev_broker.addr", cmd.Flags().Lookup("addr"))
	cmd.Flags().String("sasl-mechanism", "", "require SASL: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (with --sasl-user and --sasl-password)")
	cmd.Flags().String("sasl-user", "", "the SASL user clients must authenticate as")
	cmd.Flags().String("sasl-password", "", "the SASL user's password")
	cmd.Flags().String("tls-cert", "", "speak TLS only, with this certificate (PEM; with --tls-key)")
	cmd.Flags().String("tls-key", "", "the private key (PEM) of --tls-cert")
	cmd.Flags().String("principals", "", "enforce the sagaflow ACLs (docs/operations.md, Kafka ACLs; needs --sasl-*): user:password,... of the principals, `orchestrator` and one per participant; the --sasl-user stays a superuser")
	return cmd
}

func migrateCmd(cfg *Config) *cobra.Command {
	var list, withParticipants bool
	var lockTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply (or --list) the orchestrator's migrations (and the reference participants' with --participants)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			pool, err := newPool(ctx, cfg.Database, cfg.Database.MaxConns)
			if err != nil {
				return err
			}
			defer pool.Close()
			sets, err := migrations.Orchestrator(cfg.Orchestrator.Schema)
			if err != nil {
				return err
			}
			if withParticipants {
				set, err := reference.New(pool, reference.Options{SchemaPrefix: cfg.Participants.SchemaPrefix, Trips: cfg.Participants.Trips})
				if err != nil {
					return err
				}
				ps, err := set.Migrations()
				if err != nil {
					return err
				}
				sets = append(sets, ps...)
			}
			out := cmd.OutOrStdout()
			if !list {
				applied, err := migrations.MigrateWithin(ctx, pool, lockTimeout, sets...)
				if err != nil {
					return err
				}
				for _, a := range applied {
					fmt.Fprintf(out, "applied %s/%s %03d_%s\n", a.Schema, a.Set, a.Version, a.Name)
				}
				if len(applied) == 0 {
					fmt.Fprintln(out, "schema is up to date")
				}
				return nil
			}
			hist, err := migrations.History(ctx, pool, sets...)
			if err != nil {
				return err
			}
			done := map[string]time.Time{}
			for _, a := range hist {
				done[fmt.Sprintf("%s/%s/%d", a.Schema, a.Set, a.Version)] = a.AppliedAt
			}
			for _, s := range sets {
				for _, m := range s.Migrations {
					at, ok := done[fmt.Sprintf("%s/%s/%d", s.Schema, s.Name, m.Version)]
					status := "pending"
					if ok {
						status = "applied " + at.Format(time.RFC3339)
					}
					fmt.Fprintf(out, "%-12s %-14s %03d_%-24s %s\n", s.Schema, s.Name, m.Version, m.Name, status)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&list, "list", false, "list migrations and whether they are applied")
	cmd.Flags().BoolVar(&withParticipants, "participants", false, "include the reference participants' schemas")
	cmd.Flags().DurationVar(&lockTimeout, "lock-timeout", migrations.LockTimeoutDefault, "wait at most this long for the migration advisory lock (then fail naming the session that holds it)")
	return cmd
}

// unchecked is the annotation of a command that runs with values Load
// would refuse (only decoded).
const unchecked = "sagaflow-config-unchecked"

func configCmd(cfg *Config) *cobra.Command {
	var eff bool
	cmd := &cobra.Command{
		Use:         "config",
		Annotations: map[string]string{unchecked: "true"},
		Short:       "Print every configuration key with its default (docs/configuration.md), or with --effective the values in force",
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if eff {
				fmt.Fprintln(out, "| key | value |")
				fmt.Fprintln(out, "| --- | --- |")
				for _, k := range Keys {
					fmt.Fprintf(out, "| `%s` | `%s` |\n", k.Name, cfg.effective(k.Name))
				}
				return nil
			}
			fmt.Fprintln(out, "| key | env | default | meaning |")
			fmt.Fprintln(out, "| --- | --- | --- | --- |")
			for _, k := range Keys {
				env := "SAGAFLOW_" + strings.ToUpper(strings.ReplaceAll(k.Name, ".", "_"))
				fmt.Fprintf(out, "| `%s` | `%s` | `%v` | %s |\n", k.Name, env, k.Default, k.Doc)
			}
			fmt.Fprintf(out, "\nPer step: %s\n", StepKeysDoc)
			fmt.Fprintf(out, "Per saga type: %s\n", SagaTypeKeysDoc)
			return nil
		},
	}
	cmd.Flags().BoolVar(&eff, "effective", false, "print the values in force (defaults, file, environment, flags), secrets and the database password redacted")
	return cmd
}
