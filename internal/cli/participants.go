package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants/external"
	"github.com/sagaflow/sagaflow/participants/payment"
	"github.com/sagaflow/sagaflow/participants/reference"
)

// participantsCmd is `orchestrator participants`: the reference
// participants as one process.
func participantsCmd(v *viper.Viper, cfg *Config) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "participants",
		Short: "Run the five reference participants against Postgres and Kafka",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			p, err := setupProcess(ctx, cfg, "participants")
			if err != nil {
				return err
			}
			defer p.pool.Close()
			log, limits, bs, dialer, ms, pool := p.log, p.limits, p.brokers, p.dialer, p.metrics, p.pool
			pc := cfg.Participants
			cfg.Security.warn(log, true)
			set, err := reference.New(pool, reference.Options{
				Brokers: bs, Dialer: dialer, TopicPrefix: cfg.Kafka.TopicPrefix, SchemaPrefix: pc.SchemaPrefix,
				ReplyTopics:      []string{cfg.Kafka.ReplyTopic},
				ShippingFailRate: pc.ShippingFailRate, PointsFailRate: pc.PointsFailRate,
				Seed: pc.Seed, PaymentLimitCents: pc.PaymentLimitCents,
				Partitions: cfg.Kafka.Partitions, Logger: log, InboxMetrics: ms.Inbox, RelayMetrics: ms.Relay,
				KeepSent: cfg.Relay.KeepSent, NoDispatch: !cfg.Relay.Dispatch,
				CommandKeys: cfg.Security.orch, AllowUnsignedCommands: cfg.Security.AllowUnsignedCommands, ReplyKeys: cfg.Security.replyKeys(),
				PaymentProvider: payment.ProviderOptions{URL: pc.PaymentProviderURL, External: external.Config{Logger: log}},
			})
			if err != nil {
				return err
			}
			seed := workload.SchemasOf("", set)
			stock, _ := cmd.Flags().GetInt("seed-stock")
			prepare := func(ctx context.Context) error {
				if err := set.Prepare(ctx); err != nil || stock <= 0 {
					return err
				}
				items := map[string]int{}
				for _, s := range strings.Split(pc.Items, ",") {
					if s = strings.TrimSpace(s); s != "" {
						items[s] = stock
					}
				}
				return workload.Seed(ctx, pool, seed, workload.Plan{Stock: items})
			}
			prep := &preparer{}
			sets, err := set.Migrations()
			if err != nil {
				return err
			}
			var schemas []string
			for _, p := range set.Participants() {
				schemas = append(schemas, p.Schema())
			}
			run, err := withRetention(cfg.Retention, pool, log, ms, schemas, "", set.Run)
			if err != nil {
				return err
			}
			mux := http.NewServeMux()
			mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "{\"status\":\"ok\"}\n") })
			ready := prep.ready(orchestrator.Readiness(pool, bs, dialer, sets))
			mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
				if err := ready(r.Context()); err != nil {
					// The reason only: the error may name hosts, users, databases.
					log.Warn("not ready", slog.String("reason", orchestrator.ReadyReason(err)), slog.String("error", err.Error()))
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusServiceUnavailable)
					_ = json.NewEncoder(w).Encode(map[string]string{"status": "not ready", "error": orchestrator.ReadyReason(err)})
					return
				}
				_, _ = io.WriteString(w, "{\"status\":\"ready\"}\n")
			})
			mux.Handle("GET /metrics", promhttp.HandlerFor(ms.Registry, promhttp.HandlerOpts{Registry: ms.Registry}))
			log.Info("reference participants running", slog.String("brokers", strings.Join(bs, ",")))
			return serveHTTP(ctx, log, httpAddrs{api: pc.HTTPAddr}, mux, limits, prep.then(log, "participants", prepare, run), cfg.Shutdown.Timeout)
		},
	}
	cmd.Flags().Int("seed-stock", 0, "if > 0, set the stock of participants.items to this at start")
	cmd.Flags().String("items", "", "comma-separated items seeded by --seed-stock (participants.items)")
	_ = v.BindPFlag("participants.items", cmd.Flags().Lookup("items"))
	cmd.Flags().String("http-addr", "", "listen address of /healthz, /readyz and /metrics; empty: none (participants.http_addr)")
	_ = v.BindPFlag("participants.http_addr", cmd.Flags().Lookup("http-addr"))
	return cmd
}
