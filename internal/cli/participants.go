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

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants/external"
	"github.com/sagaflow/sagaflow/participants/holds"
	"github.com/sagaflow/sagaflow/participants/payment"
	"github.com/sagaflow/sagaflow/participants/reference"
)

// participantsCmd is `orchestrator participants`: the reference
// participants as one process.
func participantsCmd(v *viper.Viper, cfg *Config) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "participants",
		Short: "Run the reference participants (place-order's five, book-trip's three) against Postgres and Kafka",
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
				Trips:   pc.Trips,
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
				return workload.Seed(ctx, pool, seed, workload.Plan{Stock: items, Capacity: tripCapacity(pc.Trips, stock)})
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
			gate, err := api.NewOpsGate(api.OpsGateConfig{AdminToken: cfg.HTTP.AdminToken, ClientToken: cfg.HTTP.ClientToken,
				Protect: cfg.HTTP.ProtectMetrics, TrustProxy: cfg.HTTP.TrustProxy, Logger: log})
			if err != nil {
				return err
			}
			if pc.HTTPAddr != "" && !gate.Protected() && !loopback(pc.HTTPAddr) {
				log.Warn("/metrics and /holds (which saga holds what) are open to anyone who reaches participants.http_addr: set http.protect_metrics",
					slog.String("addr", pc.HTTPAddr))
			}
			mux := http.NewServeMux()
			mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "{\"status\":\"ok\"}\n") })
			ready := prep.ready(orchestrator.Readiness(pool, bs, dialer, sets))
			mux.Handle("GET /readyz", gate.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if err := ready(r.Context()); err != nil {
					// The reason only: the error may name hosts, users, databases.
					log.Warn("not ready", slog.String("reason", orchestrator.ReadyReason(err)), slog.String("error", err.Error()))
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusServiceUnavailable)
					_ = json.NewEncoder(w).Encode(map[string]string{"status": "not ready", "error": orchestrator.ReadyReason(err)})
					return
				}
				_, _ = io.WriteString(w, "{\"status\":\"ready\"}\n")
			})))
			mux.Handle("GET /metrics", gate.Wrap(promhttp.HandlerFor(ms.Registry, promhttp.HandlerOpts{Registry: ms.Registry})))
			mux.Handle("GET /holds", gate.Wrap(holds.Handler(pool, holdTables(set), log)))
			log.Info("reference participants running", slog.String("brokers", strings.Join(bs, ",")))
			return serveHTTP(ctx, log, httpAddrs{api: pc.HTTPAddr}, mux, limits, prep.then(log, "participants", prepare, run), cfg.Shutdown.Timeout)
		},
	}
	cmd.Flags().Int("seed-stock", 0, "if > 0, set the stock of participants.items (and with participants.trips the capacity of the demo's flights, hotels and cars) to this at start")
	cmd.Flags().Bool("trips", true, "run book-trip's participants (flights, hotels, cars) too (participants.trips)")
	_ = v.BindPFlag("participants.trips", cmd.Flags().Lookup("trips"))
	cmd.Flags().String("items", "", "comma-separated items seeded by --seed-stock (participants.items)")
	_ = v.BindPFlag("participants.items", cmd.Flags().Lookup("items"))
	cmd.Flags().String("http-addr", "", "listen address of /healthz, /readyz, /metrics and /holds; empty: none (participants.http_addr)")
	_ = v.BindPFlag("participants.http_addr", cmd.Flags().Lookup("http-addr"))
	return cmd
}

// tripCapacity is the capacity --seed-stock gives every item of
// workload.TripItems when the trip participants run; nil otherwise.
func tripCapacity(trips bool, n int) map[string]map[string]int {
	if !trips {
		return nil
	}
	out := map[string]map[string]int{}
	for part, items := range workload.TripItems {
		out[part] = map[string]int{}
		for _, it := range items {
			out[part][it] = n
		}
	}
	return out
}

// holdTables are the holds tables of set's participants, for GET /holds.
func holdTables(set *reference.Set) []holds.Owned {
	var out []holds.Owned
	for _, p := range set.Participants() {
		out = append(out, holds.Owned{Participant: p.Name(), Table: holds.For(p.Schema())})
	}
	return out
}
