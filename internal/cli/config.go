package cli

import (
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/spf13/viper"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/internal/demo"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/retention"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
)

// Key is one configuration key with its default and documentation; the
// configuration reference (docs/configuration.md) is generated from this table
// (`orchestrator config`).
type Key struct {
	Name    string
	Default any
	Doc     string
}

// Keys lists every configuration key but the per-step overrides.
var Keys = []Key{
	{"database.url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "Postgres URL of the orchestrator (and, for `participants` and `demo`, the reference participants)."},
	{"database.max_conns", 16, "Maximum connections of each pool."},
	{"kafka.brokers", "", "Comma-separated Kafka bootstrap brokers. KAFKA_BROKERS is read too. Empty in `demo`: an embedded broker is started."},
	{"kafka.topic_prefix", "", "Prefix of command topics (`<prefix><participant>.commands`)."},
	{"kafka.reply_topic", saga.ReplyTopicDefault, "Topic participants reply on; the only `reply_to` the `participants` process accepts."},
	{"kafka.partitions", 8, "Partitions of topics the processes create."},
	{"kafka.replication", 1, "Replication factor of topics the processes create."},
	{"kafka.tls.enabled", false, "Connect to the brokers over TLS (every client: relays, consumers, topic creation, readiness)."},
	{"kafka.tls.ca_file", "", "PEM file of the authorities that sign the brokers' certificates; empty: the system's."},
	{"kafka.tls.cert_file", "", "Client certificate (PEM) for brokers that require client authentication; with `kafka.tls.key_file`."},
	{"kafka.tls.key_file", "", "Client private key (PEM) of `kafka.tls.cert_file`."},
	{"kafka.tls.server_name", "", "Name checked against the brokers' certificates; empty: each broker's host."},
	{"kafka.tls.insecure_skip_verify", false, "Accept any broker certificate (development only)."},
	{"kafka.sasl.mechanism", "", "SASL mechanism: empty (none), PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512."},
	{"kafka.sasl.username", "", "SASL user name."},
	{"kafka.sasl.password", "", "SASL password (a secret: set it through the environment or a protected file; never logged)."},
	{"orchestrator.schema", saga.SchemaDefault, "Postgres schema of the orchestrator's tables."},
	{"orchestrator.group_id", "sagaflow-orchestrator", "Consumer group of the reply consumer (shared by replicas)."},
	{"orchestrator.timer_interval", saga.TimerIntervalDefault, "How often due timers (timeouts, retry backoff, deadlines) are looked for."},
	{"orchestrator.timer_batch", saga.TimerBatchDefault, "Due sagas handled per timer transaction."},
	{"orchestrator.start_batch", saga.StartBatchDefault, "Most concurrent saga starts (POST /sagas) committed in one transaction; 1: a transaction per start."},
	{"orchestrator.inbox_batch", orchestrator.RepliesBatchDefault, "Replies handled per inbox transaction (at most)."},
	{"orchestrator.relay_batch", 500, "Outbox rows published per relay cycle."},
	{"relay.keep_sent", false, "Keep published outbox rows as sent history (purged after `retention.sent_outbox_after`) instead of deleting them once Kafka acknowledged them; applies to `serve` and `participants`."},
	{"http.addr", "127.0.0.1:8080", "Listen address of the HTTP API (`serve`)."},
	{"http.admin_token", "", "Bearer token for operator actions (it opens everything the client token opens too); empty disables operator actions. Secret: `config --effective` redacts it."},
	{"http.client_token", "", "Bearer token of the services that start sagas; when set, `POST /sagas` needs it (or the admin token). Secret: `config --effective` redacts it."},
	{"http.protect_reads", false, "Require the client or the admin token for starts, the read endpoints and the status page too."},
	{"http.protect_metrics", false, "Require the client or the admin token for `/metrics` and `/readyz` (`/healthz` stays open)."},
	{"http.max_data_bytes", api.DefaultMaxDataBytes, "Largest saga `data` `POST /sagas` accepts (413 above)."},
	{"http.max_header_bytes", api.MaxHeaderBytesDefault, "Largest request line and headers (431 above)."},
	{"http.read_timeout", api.ReadTimeoutDefault, "Bound on reading a request, headers and body: a client that sends slowly is cut off (also the participants' listener)."},
	{"http.write_timeout", api.WriteTimeoutDefault, "Bound on a request from the end of its headers to the end of its answer; longer than `http.handler_timeout`."},
	{"http.idle_timeout", api.IdleTimeoutDefault, "Keep-alive connections idle this long are closed."},
	{"http.handler_timeout", api.HandlerTimeoutDefault, "Bound on handling one request (its database work is cancelled; 503 past it)."},
	{"http.max_connections", api.MaxConnectionsDefault, "Most HTTP connections open at once; further ones wait until one closes."},
	{"http.db_max_conns", 4, "Connections of the HTTP API's own Postgres pool (starts, reads, operator actions), apart from the reply consumer's and timers' pool (`database.max_conns`), so HTTP cannot starve them."},
	{"log.level", "info", "debug, info, warn or error."},
	{"log.format", "text", "text or json."},
	{"participants.schema_prefix", "", "Prefix of the reference participants' schemas."},
	{"participants.shipping_fail_rate", 0.0, "Chance that one create-shipment attempt answers retry (transient)."},
	{"participants.points_fail_rate", 0.0, "Chance that one award-points attempt answers retry (transient)."},
	{"participants.payment_limit_cents", int64(100_000), "Charges above this are declined."},
	{"participants.seed", int64(1), "Seed of the transient failures."},
	{"participants.http_addr", "", "Listen address of the participants process's /healthz, /readyz and /metrics; empty: no HTTP listener."},
	{"retention.enabled", true, "Run retention in `serve` (orchestrator outbox, inbox, finished sagas) and `participants` (their outboxes and inboxes)."},
	{"retention.sent_outbox_after", retention.SentOutboxAfterDefault, "With `relay.keep_sent`: sent outbox rows older than this are deleted (unsent and dead rows never are)."},
	{"retention.inbox_after", retention.InboxAfterDefault, "Inbox (dedupe) rows older than this are deleted; keep it longer than any redelivery (the consumed topics' Kafka retention)."},
	{"retention.finished_saga_after", retention.FinishedSagaAfterDefault, "Completed and compensated sagas finished longer ago than this lose their row and journal (failed ones are kept)."},
	{"retention.batch_size", retention.BatchSizeDefault, "Rows one retention DELETE removes (bounded batches, short locks)."},
	{"retention.interval", retention.IntervalDefault, "Time between retention cycles."},
	{"shutdown.timeout", 20 * time.Second, "On SIGTERM/SIGINT, how long `serve` and `participants` wait for in-flight work (HTTP requests, inbox batches and offset commits, relay batches) before exiting anyway."},
	{"demo.orders", 1000, "Orders the demo places."},
	{"demo.seed", int64(1), "Seed of the demo's orders."},
	{"demo.out_of_stock_rate", 0.10, "Share of orders for an item whose stock covers half of them."},
	{"demo.coupon_taken_rate", 0.10, "Share of orders using a coupon contested by three orders."},
	{"demo.decline_rate", 0.10, "Share of orders above the payment limit."},
	{"demo.shipping_fail_rate", 0.20, "Transient failure chance per create-shipment attempt in the demo."},
	{"demo.points_fail_rate", 0.20, "Transient failure chance per award-points attempt in the demo."},
	{"demo.concurrency", 16, "Concurrent saga starts."},
	{"demo.timeout", 2 * time.Minute, "Bound on the wait for every saga to be terminal."},
	{"demo.database", "sagaflow_demo", "Database the demo creates afresh on the server of database.url; empty: use database.url as is."},
	{"dev_broker.addr", "127.0.0.1:9092", "Listen address of `dev-broker`."},
	{"tracing.otlp_endpoint", "", "OTLP/HTTP endpoint (`http://host:4318`, or `host:port`; without a path `/v1/traces` is added) that `serve` exports its spans to (saga start, step send, reply apply); empty: tracing off, no exporter and no spans (sagas still carry the `traceparent` they were started with)."},
	{"tracing.service_name", "sagaflow-orchestrator", "`service.name` of the exported spans."},
}

// secretKeys are the keys whose values `config --effective` never prints.
var secretKeys = map[string]bool{"http.admin_token": true, "http.client_token": true, "kafka.sasl.password": true}

// effective is key's value as v has it, secrets redacted.
func effective(v *viper.Viper, key string) string {
	val := v.GetString(key)
	switch {
	case secretKeys[key] && val != "":
		return "<redacted>"
	case key == "database.url":
		return demo.Redact(val)
	}
	return val
}

// httpLimits reads and checks the http.* server limits.
func httpLimits(v *viper.Viper) (api.Limits, error) {
	l := api.Limits{
		ReadTimeout: v.GetDuration("http.read_timeout"), WriteTimeout: v.GetDuration("http.write_timeout"),
		IdleTimeout: v.GetDuration("http.idle_timeout"), MaxHeaderBytes: v.GetInt("http.max_header_bytes"),
		MaxConnections: v.GetInt("http.max_connections"),
	}
	for key, d := range map[string]time.Duration{"http.read_timeout": l.ReadTimeout, "http.write_timeout": l.WriteTimeout,
		"http.idle_timeout": l.IdleTimeout, "http.handler_timeout": v.GetDuration("http.handler_timeout")} {
		if d <= 0 {
			return l, fmt.Errorf("%s %q must be a positive duration", key, v.GetString(key))
		}
	}
	for key, n := range map[string]int{"http.max_header_bytes": l.MaxHeaderBytes, "http.max_connections": l.MaxConnections} {
		if n < 1 {
			return l, fmt.Errorf("%s %d must be at least 1", key, n)
		}
	}
	if l.MaxHeaderBytes < 4<<10 {
		return l, fmt.Errorf("http.max_header_bytes %d must be at least 4096", l.MaxHeaderBytes)
	}
	return l, l.Validate(v.GetDuration("http.handler_timeout"))
}

// apiConfig reads and checks the HTTP API's configuration.
func apiConfig(v *viper.Viper) (api.Config, error) {
	c := api.Config{
		AdminToken: v.GetString("http.admin_token"), ClientToken: v.GetString("http.client_token"),
		ProtectReads: v.GetBool("http.protect_reads"), ProtectMetrics: v.GetBool("http.protect_metrics"),
		MaxDataBytes: v.GetInt("http.max_data_bytes"), HandlerTimeout: v.GetDuration("http.handler_timeout"),
	}
	switch {
	case c.MaxDataBytes < 2:
		return c, fmt.Errorf("http.max_data_bytes %d must be at least 2 (the data is a JSON object)", c.MaxDataBytes)
	case v.GetInt("http.db_max_conns") < 1:
		return c, fmt.Errorf("http.db_max_conns %d must be at least 1", v.GetInt("http.db_max_conns"))
	case c.ClientToken != "" && c.ClientToken == c.AdminToken:
		return c, fmt.Errorf("http.client_token must differ from http.admin_token (a client could act as an operator)")
	case (c.ProtectReads || c.ProtectMetrics) && c.AdminToken == "" && c.ClientToken == "":
		return c, fmt.Errorf("http.protect_reads and http.protect_metrics need http.client_token or http.admin_token: nobody could pass")
	}
	return c, nil
}

// StepKeysDoc documents the per-step overrides.
const StepKeysDoc = "sagas.<type>.steps.<step>.timeout, .deadline, .retry.initial_interval, .retry.max_interval, .retry.multiplier, .retry.max_attempts: override a step's timeout and retry policy without recompiling (e.g. `sagas.place-order.steps.charge-payment.timeout: 3s`)."

func newViper() *viper.Viper {
	v := viper.New()
	for _, k := range Keys {
		v.SetDefault(k.Name, k.Default)
	}
	v.SetEnvPrefix("SAGAFLOW")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_", "-", "_"))
	v.AutomaticEnv()
	return v
}

func loadFile(v *viper.Viper, path string) error {
	if path == "" {
		return nil
	}
	v.SetConfigFile(path)
	if err := v.ReadInConfig(); err != nil {
		return fmt.Errorf("read config file %s: %w", path, err)
	}
	return nil
}

// kafkaSecurity reads kafka.tls.* and kafka.sasl.*.
func kafkaSecurity(v *viper.Viper) kafkaclient.Security {
	return kafkaclient.Security{
		TLS: kafkaclient.TLSConfig{
			Enabled: v.GetBool("kafka.tls.enabled"), CAFile: v.GetString("kafka.tls.ca_file"),
			CertFile: v.GetString("kafka.tls.cert_file"), KeyFile: v.GetString("kafka.tls.key_file"),
			ServerName: v.GetString("kafka.tls.server_name"), InsecureSkipVerify: v.GetBool("kafka.tls.insecure_skip_verify"),
		},
		SASL: kafkaclient.SASLConfig{
			Mechanism: v.GetString("kafka.sasl.mechanism"), Username: v.GetString("kafka.sasl.username"),
			Password: v.GetString("kafka.sasl.password"),
		},
	}
}

// kafkaDialer builds the dialer of every Kafka client of the process from
// kafka.tls.* and kafka.sasl.* (nil: plain TCP).
func kafkaDialer(v *viper.Viper) (*kafka.Dialer, error) {
	d, err := kafkaSecurity(v).Dialer()
	if err != nil {
		return nil, fmt.Errorf("kafka security: %w", err)
	}
	return d, nil
}

func brokers(v *viper.Viper) []string {
	if b := kafkaclient.ParseBrokers(v.GetString("kafka.brokers")); len(b) > 0 {
		return b
	}
	return kafkaclient.ParseBrokers(os.Getenv("KAFKA_BROKERS"))
}

func logger(v *viper.Viper) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(v.GetString("log.level"))); err != nil {
		return nil, fmt.Errorf("log.level %q: want debug, info, warn or error", v.GetString("log.level"))
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch f := v.GetString("log.format"); f {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	default:
		return nil, fmt.Errorf("log.format %q: want text or json", f)
	}
}

// applyOverrides reads sagas.<type>.steps.<step>.* into reg.
func applyOverrides(v *viper.Viper, reg *saga.Registry) error {
	sagas := v.GetStringMap("sagas")
	types := make([]string, 0, len(sagas))
	for t := range sagas {
		types = append(types, t)
	}
	sort.Strings(types)
	for _, t := range types {
		stepsMap := v.GetStringMap("sagas." + t + ".steps")
		for step := range stepsMap {
			base := "sagas." + t + ".steps." + step + "."
			var o saga.StepOverride
			var err error
			dur := func(key string) time.Duration {
				if err != nil || !v.IsSet(base+key) {
					return 0
				}
				d, e := time.ParseDuration(v.GetString(base + key))
				if e != nil || d <= 0 {
					err = fmt.Errorf("config %s%s: %q is not a positive duration", base, key, v.GetString(base+key))
				}
				return d
			}
			o.Timeout = dur("timeout")
			o.Deadline = dur("deadline")
			o.Retry.InitialInterval = dur("retry.initial_interval")
			o.Retry.MaxInterval = dur("retry.max_interval")
			if err != nil {
				return err
			}
			if v.IsSet(base + "retry.multiplier") {
				o.Retry.Multiplier = v.GetFloat64(base + "retry.multiplier")
				if o.Retry.Multiplier < 1 {
					return fmt.Errorf("config %sretry.multiplier: %v must be at least 1", base, o.Retry.Multiplier)
				}
			}
			if v.IsSet(base + "retry.max_attempts") {
				o.Retry.MaxAttempts = v.GetInt(base + "retry.max_attempts")
				if o.Retry.MaxAttempts < 1 {
					return fmt.Errorf("config %sretry.max_attempts: %d must be at least 1", base, o.Retry.MaxAttempts)
				}
			}
			if err := reg.Override(t, step, o); err != nil {
				return fmt.Errorf("config sagas.%s.steps.%s: %w", t, step, err)
			}
		}
	}
	return nil
}
