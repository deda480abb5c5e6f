package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/spf13/viper"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/internal/retention"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/relay"
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
	{"kafka.reply_topic", orchestrator.ReplyTopicDefault, "Topic participants reply on; the only `reply_to` the `participants` process accepts."},
	{"kafka.outcome_topic", orchestrator.OutcomeTopicDefault, "Topic the orchestrator writes a record to for every end of a saga and every flag (docs/conformance.md)."},
	{"kafka.start_topic", orchestrator.StartTopicDefault, "Topic the orchestrator starts sagas from (the body of `POST /sagas`; docs/conformance.md)."},
	{"kafka.event_topic", orchestrator.EventTopicDefault, "Topic the orchestrator takes external events from (the body of `POST /sagas/{id}/events`; docs/conformance.md)."},
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
	{"kafka.sasl.allow_plaintext", false, "Let SASL PLAIN run without `kafka.tls.enabled` (the password goes in clear; development only). Off: PLAIN without TLS is refused at start."},
	{"orchestrator.schema", orchestrator.SchemaDefault, "Postgres schema of the orchestrator's tables."},
	{"orchestrator.group_id", "sagaflow-orchestrator", "Consumer group of the reply consumer (shared by replicas)."},
	{"orchestrator.timer_interval", orchestrator.TimerIntervalDefault, "How often due timers (timeouts, retry backoff, deadlines) are looked for."},
	{"orchestrator.timer_batch", orchestrator.TimerBatchDefault, "Due sagas handled per timer transaction."},
	{"orchestrator.single_live_types", "", "Comma-separated saga types that allow at most one live (running, compensating or failed) saga per aggregate id: a start for an aggregate that has one answers 409 with its id, whatever the idempotency key, so a client retry with a fresh key cannot run it (and charge) twice."},
	{"orchestrator.max_sends_per_saga", 0, fmt.Sprintf("Commands one saga may send on its own (forward, compensation and query sends of all its steps) before its timers stop: the next timeout or re-send then fails it, flagged with the bound, for an operator (whose retry re-opens it with one send). Bounds the dead letters a participant refusing a saga's commands can be made to write. 0: each definition's own (`saga.Definition.MaxSends`, default %d); negative: no bound.", saga.MaxSendsDefault)},
	{"orchestrator.proposal_ttl", orchestrator.ProposalTTLDefault, "How long a four-eyes proposal (`sagas.<type>.four_eyes`) waits for a second person; past it, it is expired and cannot be approved."},
	{"orchestrator.start_batch", orchestrator.StartBatchDefault, "Most concurrent saga starts (POST /sagas) committed in one transaction; 1: a transaction per start."},
	{"orchestrator.saga_cache", orchestrator.SagaCacheDefault, "Sagas in flight each orchestrator process keeps as its last write left them, so that a batch of replies to them is applied in one round trip to Postgres instead of two (the version check of the update guards the copy; a saga moved elsewhere is loaded). About 1-2 KB a saga of a few steps and small data; negative: keep none."},
	{"orchestrator.inbox_batch", orchestrator.RepliesBatchDefault, "Replies handled per inbox transaction (at most)."},
	{"orchestrator.relay_batch", 500, "Outbox rows published per relay cycle."},
	{"relay.dispatch", true, "Publish outbox rows right after the commit that wrote them (the process's dispatcher; `serve` and `participants`) and leave the relay only what a crash, a Kafka refusal or a full queue left behind, after `relay.dispatch_lease`; false: every row waits for the relay, woken by NOTIFY."},
	{"relay.dispatch_lease", relay.DispatchLeaseDefault, "How long a dispatched row is left to the process that committed it before the relay may publish it (the extra delay of a command whose process died right after its commit)."},
	{"relay.keep_sent", false, "Keep published outbox rows as sent history (purged after `retention.sent_outbox_after`) instead of deleting them once Kafka acknowledged them; applies to `serve` and `participants`."},
	{"http.addr", "127.0.0.1:8080", "Listen address of the HTTP API (`serve`). On an address other than loopback (127.0.0.0/8, ::1, localhost; an empty host is every interface) `serve` refuses to start unless both `http.admin_token` and `http.client_token` are set."},
	{"http.admin_token", "", "Bearer token for operator actions (it opens everything the client token opens too); empty disables operator actions. At least 24 characters, not a placeholder or a repeated pattern (`openssl rand -hex 32`), else `serve` refuses to start. Secret: `config --effective` redacts it."},
	{"http.client_token", "", "Bearer token of the services that start sagas; when set, `POST /sagas` needs it (or the admin token). Same rules as `http.admin_token`. Secret: `config --effective` redacts it."},
	{"http.operator_tokens", "", "Named operator tokens, one a person, as `name:token` entries (a list, or comma-separated in SAGAFLOW_HTTP_OPERATOR_TOKENS). Each grants what the admin token does, and the actor of its operator actions and four-eyes decisions is its name; once any is set, operator actions and proposal decisions need one (the shared admin token is refused for them). Names: lower-case letters, digits, '-', '_'; tokens follow `http.admin_token`'s rules and differ from every other token. Secret: `config --effective` redacts it."},
	{"http.trust_proxy", false, "A reverse proxy is in front of `serve`: the budget of wrong tokens is kept per the last `X-Forwarded-For` address (the one the proxy saw; the proxy must set or append it) and the session cookie is `Secure` when `X-Forwarded-Proto` is `https`. Leave it off when clients reach `serve` directly (they could write the headers themselves)."},
	{"http.secure_cookie", false, "Always mark the status page's session cookie `Secure` (sent over HTTPS only): for a TLS proxy that does not set `X-Forwarded-Proto`."},
	{"http.protect_reads", false, "Require the client or the admin token for starts, the read endpoints and the status page too."},
	{"http.protect_metrics", false, "Require the client or the admin token for `/metrics` and `/readyz` (`/healthz` stays open), on `serve`'s port and on the `participants` process's (there also for `/holds`)."},
	{"http.max_data_bytes", api.DefaultMaxDataBytes, "Largest saga `data` `POST /sagas` accepts (413 above)."},
	{"http.max_header_bytes", api.MaxHeaderBytesDefault, "Largest request line and headers (431 above)."},
	{"http.read_timeout", api.ReadTimeoutDefault, "Bound on reading a request, headers and body: a client that sends slowly is cut off (also the participants' listener)."},
	{"http.write_timeout", api.WriteTimeoutDefault, "Bound on a request from the end of its headers to the end of its answer; longer than `http.handler_timeout`."},
	{"http.idle_timeout", api.IdleTimeoutDefault, "Keep-alive connections idle this long are closed."},
	{"http.handler_timeout", api.HandlerTimeoutDefault, "Bound on handling one request (its database work is cancelled; 503 past it)."},
	{"http.max_connections", api.MaxConnectionsDefault, "Most HTTP connections served at once. At the cap a new connection takes the place of the one idle longest; when none is idle it answers only `/healthz` and `/readyz` (503 to anything else)."},
	{"http.max_connections_per_client", api.MaxConnectionsPerClientDefault, "Most of them from one client (IPv4 address, or IPv6 /64; more than `http.max_connections` counts as it); past it a connection answers only `/healthz` and `/readyz` (429 to anything else). Behind a proxy every client is the proxy: raise it to `http.max_connections`."},
	{"http.busy_idle_timeout", api.BusyIdleTimeoutDefault, "Idle timeout of keep-alive connections while 80% of `http.max_connections` or more are open (instead of `http.idle_timeout`; longer counts as it)."},
	{"http.health_addr", "", "Optional listen address serving only `/healthz` and `/readyz`, with connections of their own apart from the API's (`serve`); empty: none (they stay on `http.addr`)."},
	{"http.db_max_conns", 4, "Connections of the HTTP API's own Postgres pool (starts, reads, operator actions), apart from the reply consumer's and timers' pool (`database.max_conns`), so HTTP cannot starve them."},
	{"http.max_concurrent_reads", api.MaxConcurrentReadsDefault, "Most reads (`GET` of sagas, stats, dead letters, reconciliation and the pages) handled at once; the others wait (503 past `http.handler_timeout`). Less than `http.db_max_conns`: a flood of reads holds at most this many of the API pool's connections and starts keep the rest."},
	{"log.level", "info", "debug, info, warn or error."},
	{"log.format", "text", "text or json."},
	{"participants.schema_prefix", "", "Prefix of the reference participants' schemas."},
	{"participants.shipping_fail_rate", 0.0, "Chance that one create-shipment attempt answers retry (transient)."},
	{"participants.points_fail_rate", 0.0, "Chance that one award-points attempt answers retry (transient)."},
	{"participants.payment_limit_cents", int64(100_000), "Charges above this are declined."},
	{"participants.payment_provider_url", "", "Base URL of a payment provider to charge through (POST /charges with an Idempotency-Key, GET /charges/{key}): the payment step answers `accepted` and is settled by the provider's answer, made after the commit (package participants/external). Empty: charges are recorded in the ledger at once."},
	{"participants.seed", int64(1), "Seed of the transient failures."},
	{"participants.http_addr", "", "Listen address of the participants process's /healthz, /readyz, /metrics and /holds (the last three behind `http.protect_metrics`); empty: no HTTP listener."},
	{"participants.items", "sku-apple,sku-pear,sku-plum,sku-fig", "Comma-separated items whose stock `participants --seed-stock` sets at start (with `participants.trips`, the demo's flights, hotels and cars get that capacity too)."},
	{"participants.trips", true, "Run the book-trip saga's participants (flights, hotels, cars) beside place-order's five."},
	{"reconcile.enabled", true, "Run the reconciler in `serve` (one replica at a time): failed, stuck and dead-command sagas, the journal's rules, checks of sampled finished sagas; safe repairs through the one door (actor `reconciler`), the rest kept as open discrepancies."},
	{"reconcile.interval", ReconcileIntervalDefault, "Time between reconciliation runs in `serve`."},
	{"reconcile.since", orchestrator.ReconcileSinceDefault, "Window of journal entries and finished sagas a run looks at (failed, stuck and dead commands: all)."},
	{"reconcile.sample_rate", orchestrator.ReconcileSampleDefault, "Share of the finished sagas in the window that are checked against their participants (queries); 0 checks none."},
	{"reconcile.flow_sample_rate", orchestrator.ReconcileFlowSampleDefault, "Share of the finished sagas in the window whose commands are checked against their participants' records (flow reconciliation: a command answered but not recorded is `flow_command_not_recorded`), at most 100 a run; 0 checks none."},
	{"reconcile.stuck_after", orchestrator.ReconcileStuckAfterDefault, "A running or compensating saga that has not moved for this long is stuck (its active command is re-sent)."},
	{"retention.enabled", true, "Run retention in `serve` (orchestrator outbox, inbox, finished sagas) and `participants` (their outboxes, inboxes and barriers)."},
	{"retention.sent_outbox_after", retention.SentOutboxAfterDefault, "With `relay.keep_sent`: sent outbox rows older than this are deleted (unsent and dead rows never are)."},
	{"retention.inbox_after", retention.InboxAfterDefault, "Inbox (dedupe) rows older than this are deleted; keep it longer than any redelivery (the consumed topics' Kafka retention)."},
	{"retention.finished_saga_after", retention.FinishedSagaAfterDefault, "Completed and compensated sagas finished longer ago than this lose their row and journal, unless an operator or the reconciler acted on them (see `retention.failed_saga_after`)."},
	{"retention.failed_saga_after", retention.FailedSagaAfterDefault, "Failed sagas, and finished ones an operator or the reconciler acted on (a journal entry with an actor), are deleted this long after they finished; at least `retention.finished_saga_after`: their journal is the audit."},
	{"retention.barrier_after", retention.BarrierAfterDefault, "Participants' barrier rows older than this are deleted. Keep it longer than any redelivery (the command topics' Kafka retention, `retention.inbox_after`, the longest a saga stays open): a barrier row deleted too early would let a very late forward run after its compensation, or twice. Holds settled (confirmed or released) longer ago go too; held ones stay."},
	{"retention.dead_letter_after", retention.DeadLetterAfterDefault, "Dead letters redriven longer ago than this are deleted (every schema: the orchestrator's and the participants'). Open dead letters are never deleted; the `.dlq` topic keeps its own copy for its Kafka retention."},
	{"retention.stray_dead_letter_after", retention.StrayDeadLetterAfterDefault, "Dead letters of stray replies (answering nothing the orchestrator sent: an unknown saga or step, an in_reply_to the saga never sent) older than this are deleted, redriven or not: no operator needs to act on them."},
	{"retention.audit_after", retention.AuditAfterDefault, "Operators' message repairs (`ops_audit`: redrives, requeues) older than this are deleted; so are the saga operator audit (`operator_audit`) of sagas already deleted, and four-eyes proposals this long past their expiry; at least `retention.dead_letter_after`."},
	{"retention.batch_size", retention.BatchSizeDefault, "Rows one retention DELETE removes (bounded batches, short locks)."},
	{"retention.interval", retention.IntervalDefault, "Time between retention cycles."},
	{"shutdown.timeout", 20 * time.Second, "On SIGTERM/SIGINT, how long `serve` and `participants` wait for in-flight work (HTTP requests, inbox batches and offset commits, relay batches) before exiting anyway."},
	{"demo.orders", 1000, "Orders the demo places."},
	{"demo.trip_ratio", 0.25, "Book-trip sagas the demo runs per order, besides the orders (0.25: one trip for four orders; 0: place-order only). Its trips: some with a car, some needing an approval the demo gives or refuses through `POST /sagas/{id}/events`, some for a sold-out hotel."},
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
	{"security.orchestrator_keys", "", "The orchestrator's signing keys, `id:secret` comma-separated (secret: base64 of at least 32 random bytes, or `hex:` and hex digits; ids printable ASCII). `serve` (and `retry`, `reconcile`) sign every command with `security.orchestrator_key_id`; `participants` verify commands with any of them. Rotation: add the new key everywhere, make it the active one, drop the old one once no unsent command carries it. Empty: commands are unsigned (`demo`: a key is generated). Never printed by `config --effective`."},
	{"security.orchestrator_key_id", "", "Id of the key of `security.orchestrator_keys` that signs commands; empty: the first."},
	{"security.participant_keys", "", "Each participant's keys, `participant:id:secret` comma-separated (several per participant during a rotation). Once set, `serve` takes a reply for a step only when it is signed by a key of that step's participant, and dead-letters any other with the reason; `participants` sign each participant's replies with its first key. Empty: replies are not checked (`demo`: keys are generated). Never printed by `config --effective`."},
	{"security.allow_unsigned_replies", false, "Migration window: take unsigned replies from every participant while `security.participant_keys` is set (signed ones are still checked; `sagaflow_replies_unauthenticated_total{outcome=\"taken\"}` counts them). Off by default: unsigned replies are dead-lettered."},
	{"security.allow_unsigned_replies_from", "", "Migration window for some participants only: comma-separated participants whose unsigned replies are taken."},
	{"security.allow_unsigned_commands", false, "Migration window for `participants`: execute unsigned commands while `security.orchestrator_keys` is set (signed ones are still verified). Off by default: unsigned commands are dead-lettered unexecuted."},
	{"tracing.otlp_endpoint", "", "OTLP/HTTP endpoint (`http://host:4318`, or `host:port`; without a path `/v1/traces` is added) that `serve` exports its spans to (saga start, step send, reply apply); empty: tracing off, no exporter and no spans (sagas still carry the `traceparent` they were started with)."},
	{"tracing.service_name", "sagaflow-orchestrator", "`service.name` of the exported spans."},
}

// secretKeys are the keys whose values `config --effective` never prints.
var secretKeys = map[string]bool{"http.admin_token": true, "http.client_token": true, "http.operator_tokens": true, "kafka.sasl.password": true,
	"security.orchestrator_keys": true, "security.participant_keys": true}

// StepKeysDoc documents the per-step overrides.
const StepKeysDoc = "sagas.<type>.steps.<step>.timeout, .deadline, .accepted_deadline, .retry.initial_interval, .retry.max_interval, .retry.multiplier, .retry.max_attempts: override a step's timeout, deadlines and retry policy without recompiling (e.g. `sagas.place-order.steps.charge-payment.timeout: 3s`)."

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

// kafkaDialer builds the dialer of every Kafka client of the process from
// kafka.tls.* and kafka.sasl.* (nil: plain TCP).
func kafkaDialer(k KafkaConfig) (*kafka.Dialer, error) {
	d, err := k.security().Dialer()
	if err != nil {
		return nil, fmt.Errorf("kafka security: %w", err)
	}
	return d, nil
}
