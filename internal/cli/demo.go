package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/sagaflow/sagaflow/internal/dburl"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/internal/demo"
	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

// probeTimeout bounds the look for a Postgres at the default address.
const probeTimeout = 2 * time.Second

func demoCmd(v *viper.Viper, c *Config) *cobra.Command {
	var asJSON, embedded, ui bool
	var uiAddr string
	var provider bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the demo (place-order and book-trip sagas) end to end (embedded broker unless --brokers; a throwaway Postgres unless one answers) and check invariants",
		Long: "Run a mixed workload of place-order and book-trip sagas end to end (trips' approvals given or refused through the events API) and check their invariants. Without --brokers an embedded broker is started. " +
			"With --embedded-postgres, or when database.url is not configured (SAGAFLOW_DATABASE_URL, --database-url, a config file) " +
			"and no Postgres answers at its default address, a throwaway Postgres is started from the machine's server binaries " +
			"(initdb and postgres; fsync off) and removed when the demo ends.",
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			ctx := cmd.Context()
			log := quietLogger(cmd, c.Log, asJSON)
			reg, err := c.registry()
			if err != nil {
				return err
			}
			ec := c.engine()
			d := c.Demo
			cfg := demo.Config{
				DatabaseURL: c.Database.URL, FreshDatabase: d.Database,
				Brokers: c.Kafka.Brokers, Registry: reg, Engine: ec, Logger: log,
				Mix: workload.Mix{
					Orders: d.Orders, Seed: d.Seed, OutOfStockRate: d.OutOfStockRate, CouponTakenRate: d.CouponTakenRate,
					DeclineRate: d.DeclineRate, LimitCents: c.Participants.PaymentLimitCents,
					Trips: int(float64(d.Orders)*d.TripRatio + 0.5),
				},
				ShippingFailRate: d.ShippingFailRate, PointsFailRate: d.PointsFailRate,
				Concurrency: d.Concurrency, Timeout: d.Timeout,
				CommandKeys: c.Security.orch, ReplyKeys: c.Security.replyKeys(),
				PaymentProvider: provider,
			}
			use, reason := demo.UseEmbedded(embedded, c.Database.URLConfigured, func() error {
				return demo.Probe(ctx, cfg.DatabaseURL, probeTimeout)
			})
			if use {
				log.Info("starting a throwaway Postgres", slog.String("reason", reason))
				pg, err := demo.StartEmbeddedPostgres(ctx, demo.EmbeddedOptions{Logger: log})
				if err != nil {
					return err
				}
				defer func() { err = errors.Join(err, pg.Stop()) }()
				cfg.DatabaseURL = pg.URL()
			}
			sum, err := demo.Run(ctx, cfg)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				if err := enc.Encode(sum); err != nil {
					return err
				}
			} else {
				printSummary(cmd.OutOrStdout(), sum)
			}
			if ui {
				dbURL := cfg.DatabaseURL
				if cfg.FreshDatabase != "" {
					if dbURL, err = dburl.WithDatabase(dbURL, cfg.FreshDatabase); err != nil {
						return err
					}
				}
				// With --json, stdout stays one JSON object: the URL goes
				// to stderr.
				out := cmd.OutOrStdout()
				if asJSON {
					out = cmd.ErrOrStderr()
				}
				if err := serveDemoUI(ctx, out, log, uiAddr, dbURL, reg, ec); err != nil {
					return err
				}
			}
			if !sum.InvariantsOK || sum.NonTerminal > 0 {
				return exitError{code: 2}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print one JSON object instead of the readable summary")
	f.BoolVar(&embedded, "embedded-postgres", false, "run on a throwaway Postgres (started from the machine's initdb and postgres, removed on exit) even if database.url is set")
	f.BoolVar(&ui, "ui", false, "after the summary, keep the status page on the demo's sagas open (its URL is printed) until Ctrl-C")
	f.StringVar(&uiAddr, "ui-addr", "127.0.0.1:0", "listen address of the status page with --ui (port 0: a free one)")
	f.BoolVar(&provider, "payment-provider", true, "charge through a fake payment provider the demo starts on loopback (false: in the payment participant's own transaction; true: answer later: the payment step is accepted and settled by the provider's answer); the check adds: the provider's charges equal the ledger's")
	f.Int("orders", 0, "orders to place (demo.orders)")
	f.Int64("seed", 0, "seed of the orders (demo.seed)")
	f.Float64("trip-ratio", 0, "book-trip sagas per order, besides the orders (demo.trip_ratio)")
	f.Float64("out-of-stock-rate", 0, "share of orders for a scarce item (demo.out_of_stock_rate)")
	f.Float64("coupon-taken-rate", 0, "share of orders using a contested coupon (demo.coupon_taken_rate)")
	f.Float64("decline-rate", 0, "share of orders over the payment limit (demo.decline_rate)")
	f.Float64("shipping-fail-rate", 0, "transient failure chance per shipping attempt (demo.shipping_fail_rate)")
	f.Float64("points-fail-rate", 0, "transient failure chance per points attempt (demo.points_fail_rate)")
	f.Int("concurrency", 0, "concurrent saga starts (demo.concurrency)")
	f.Duration("timeout", 0, "bound on the wait for terminal sagas (demo.timeout)")
	f.String("database", "", "database the demo creates afresh (demo.database)")
	for flag, key := range map[string]string{
		"orders": "demo.orders", "seed": "demo.seed", "trip-ratio": "demo.trip_ratio", "out-of-stock-rate": "demo.out_of_stock_rate",
		"coupon-taken-rate": "demo.coupon_taken_rate", "decline-rate": "demo.decline_rate",
		"shipping-fail-rate": "demo.shipping_fail_rate", "points-fail-rate": "demo.points_fail_rate",
		"concurrency": "demo.concurrency", "timeout": "demo.timeout", "database": "demo.database",
	} {
		_ = v.BindPFlag(key, f.Lookup(flag))
	}
	return cmd
}

// quietLogger is the logger of log.*, except that a command whose output
// is a report (quiet: bench, chaos, demo --json) logs only warnings unless
// log.level was given by flag or environment.
func quietLogger(cmd *cobra.Command, l LogConfig, quiet bool) *slog.Logger {
	if quiet && !cmd.Flags().Changed("log-level") && os.Getenv("SAGAFLOW_LOG_LEVEL") == "" {
		return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return l.logger()
}

// databaseConfigured reports whether database.url was set by the user
// (--database-url, SAGAFLOW_DATABASE_URL or the config file) rather than
// left at its default.
func databaseConfigured(cmd *cobra.Command, v *viper.Viper) bool {
	if f := cmd.Flag("database-url"); f != nil && f.Changed {
		return true
	}
	return os.Getenv("SAGAFLOW_DATABASE_URL") != "" || v.InConfig("database.url")
}

// serveDemoUI serves the HTTP API with its status page (/ui/) over the
// demo's database on addr until ctx ends (Ctrl-C), after printing its URL
// to out. Operator actions are disabled (no admin token); it listens on
// the loopback address by default.
func serveDemoUI(ctx context.Context, out io.Writer, log *slog.Logger, addr, dbURL string, reg *saga.Registry, ec orchestrator.EngineConfig) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("status page pool: %w", err)
	}
	defer pool.Close()
	ec.Logger = log
	eng, err := orchestrator.NewEngine(pool, reg, &ec)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--ui-addr %s: %w", addr, err)
	}
	lim := api.Limits{}.WithDefaults()
	srv, err := api.New(eng, &api.Config{Logger: log.With(slog.String("component", "api"))})
	if err != nil {
		return err
	}
	hs := api.NewHTTPServer(srv, lim, log)
	done := make(chan error, 1)
	go func() { done <- hs.Serve(api.LimitListener(ln, lim)) }()
	fmt.Fprintf(out, "status page: http://%s/ui/ (Ctrl-C to stop)\n", ln.Addr())
	select {
	case <-ctx.Done():
	case err := <-done:
		return fmt.Errorf("status page: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	return nil
}

func printSummary(w io.Writer, s demo.Summary) {
	fmt.Fprintf(w, "demo: %d orders and %d trips in %.2fs (%.0f sagas/s)\n", s.Orders, s.Trips, s.ElapsedSeconds, s.SagasPerSecond)
	fmt.Fprintf(w, "  %-12s %11s %11s\n", "", "place-order", "book-trip")
	count := func(typ string, f func(*workload.Counts) int) int {
		if c := s.Sagas[typ]; c != nil {
			return f(c)
		}
		return 0
	}
	for _, row := range []struct {
		name string
		f    func(*workload.Counts) int
	}{
		{"completed", func(c *workload.Counts) int { return c.Completed }},
		{"compensated", func(c *workload.Counts) int { return c.Compensated }},
		{"failed", func(c *workload.Counts) int { return c.Failed }},
		{"non-terminal", func(c *workload.Counts) int { return c.NonTerminal }},
	} {
		fmt.Fprintf(w, "  %-12s %11d %11d\n", row.name, count(orderapi.SagaType, row.f), count(tripapi.SagaType, row.f))
	}
	if s.ProviderCharges > 0 {
		fmt.Fprintf(w, "  payment provider charges %d\n", s.ProviderCharges)
	}
	if s.InvariantsOK {
		fmt.Fprintln(w, "invariants: OK (stock conserved, no coupon held by a compensated saga, one charge/shipment/points entry per completed order, none for compensated ones; nothing reserved for a trip without its charge, every confirmed reservation charged once, refused trips with nothing reserved or charged, flight/hotel/car capacity conserved; every saga terminal; every end once on the outcome topic)")
		return
	}
	fmt.Fprintf(w, "invariants: VIOLATED (%d)\n", len(s.Violations))
	for _, v := range s.Violations {
		fmt.Fprintln(w, "  -", safe(v))
	}
}
