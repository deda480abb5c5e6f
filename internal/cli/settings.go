package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cast"
	"github.com/spf13/viper"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/pgid"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/relay"
	"github.com/sagaflow/sagaflow/saga"
)

// Config is the binary's whole configuration, one field per key of Keys
// (and the per-step overrides), decoded once by Load after the file, the
// environment and the flags are bound. Commands read its fields, never
// viper.
type Config struct {
	Database     DatabaseConfig
	Kafka        KafkaConfig
	Orchestrator OrchestratorConfig
	Relay        RelayConfig
	HTTP         HTTPConfig
	Log          LogConfig
	Participants ParticipantsConfig
	Retention    RetentionConfig
	Reconcile    ReconcileConfig
	Tracing      TracingConfig
	Shutdown     ShutdownConfig
	Demo         DemoConfig
	DevBroker    DevBrokerConfig
	Security     SecurityConfig
	// Steps are the per-step overrides (sagas.<type>.steps.<step>.*),
	// sorted by saga type and step.
	Steps []StepOverride
	// SagaTypes are the per-type settings (sagas.<type>.four_eyes, .slo),
	// sorted by saga type.
	SagaTypes []SagaTypeConfig
}

// DatabaseConfig is database.*.
type DatabaseConfig struct {
	URL      string
	MaxConns int
	// URLConfigured: database.url was set by a flag, the environment or the
	// file rather than left at its default (the demo then uses it as is).
	URLConfigured bool
}

// KafkaConfig is kafka.*.
type KafkaConfig struct {
	// Brokers is kafka.brokers split at commas, or KAFKA_BROKERS when that
	// is empty.
	Brokers                 []string
	TopicPrefix, ReplyTopic string
	// OutcomeTopic, StartTopic and EventTopic are the orchestrator's
	// saga-level topics.
	OutcomeTopic, StartTopic, EventTopic string
	Partitions, Replication              int
	TLS                                  kafkaclient.TLSConfig
	SASL                                 kafkaclient.SASLConfig
}

// OrchestratorConfig is orchestrator.*.
type OrchestratorConfig struct {
	Schema, GroupID                                string
	SingleLiveTypes                                []string
	TimerInterval                                  time.Duration
	TimerBatch, StartBatch, InboxBatch, RelayBatch int
	// SagaCache is how many sagas in flight the engine keeps as it last
	// wrote them (orchestrator.Advanced.SagaCache); negative: none.
	SagaCache int
	// MaxSendsPerSaga overrides every definition's send bound
	// (saga.Definition.MaxSends): 0 keeps theirs, negative: none.
	MaxSendsPerSaga int
	// ProposalTTL is how long a four-eyes proposal waits for approval.
	ProposalTTL time.Duration
}

// RelayConfig is relay.*.
type RelayConfig struct {
	KeepSent, Dispatch bool
	DispatchLease      time.Duration
}

// advanced is the relay's dispatch settings of c.
func (c RelayConfig) advanced() relay.Advanced {
	return relay.Advanced{NoDispatch: !c.Dispatch, DispatchLease: c.DispatchLease}
}

// HTTPConfig is http.*.
type HTTPConfig struct {
	Addr, HealthAddr, AdminToken, ClientToken                string
	ProtectReads, ProtectMetrics, TrustProxy, SecureCookie   bool
	MaxDataBytes, MaxHeaderBytes, MaxConnections, DBMaxConns int
	ReadTimeout, WriteTimeout, IdleTimeout, HandlerTimeout   time.Duration
	MaxConnectionsPerClient, MaxConcurrentReads              int
	BusyIdleTimeout                                          time.Duration
	// OperatorTokens are "name:token" entries (http.operator_tokens).
	OperatorTokens []string
}

// LogConfig is log.*.
type LogConfig struct{ Level, Format string }

// ParticipantsConfig is participants.*.
type ParticipantsConfig struct {
	SchemaPrefix, HTTPAddr string
	// Items are the items --seed-stock seeds, comma-separated.
	Items                            string
	ShippingFailRate, PointsFailRate float64
	PaymentLimitCents, Seed          int64
	// Trips runs flights, hotels and cars too.
	Trips bool
	// PaymentProviderURL, if set, makes payment charge through it.
	PaymentProviderURL string
}

// RetentionConfig is retention.*.
type RetentionConfig struct {
	Enabled                                        bool
	SentOutboxAfter, InboxAfter, FinishedSagaAfter time.Duration
	FailedSagaAfter, BarrierAfter                  time.Duration
	DeadLetterAfter, AuditAfter                    time.Duration
	StrayDeadLetterAfter                           time.Duration
	BatchSize                                      int
	Interval                                       time.Duration
}

// ReconcileConfig is reconcile.*.
type ReconcileConfig struct {
	Enabled                     bool
	Interval, Since, StuckAfter time.Duration
	SampleRate, FlowSampleRate  float64
}

// options are the reconciler's options of c (a sample rate of 0 is none).
func (c ReconcileConfig) options() orchestrator.ReconcileOptions {
	o := orchestrator.ReconcileOptions{Since: c.Since, StuckAfter: c.StuckAfter, SampleRate: c.SampleRate, FlowSampleRate: c.FlowSampleRate}
	if o.SampleRate == 0 {
		o.SampleRate = -1
	}
	if o.FlowSampleRate == 0 {
		o.FlowSampleRate = -1
	}
	return o
}

// TracingConfig is tracing.*.
type TracingConfig struct{ OTLPEndpoint, ServiceName string }

// ShutdownConfig is shutdown.*.
type ShutdownConfig struct{ Timeout time.Duration }

// DemoConfig is demo.*.
type DemoConfig struct {
	Orders, Concurrency                          int
	Seed                                         int64
	TripRatio                                    float64
	OutOfStockRate, CouponTakenRate, DeclineRate float64
	ShippingFailRate, PointsFailRate             float64
	Timeout                                      time.Duration
	Database                                     string
}

// DevBrokerConfig is dev_broker.*.
type DevBrokerConfig struct{ Addr string }

// StepOverride is sagas.<Type>.steps.<Step>.*: what is set there.
type StepOverride struct {
	Type, Step string
	saga.StepOverride
}

// binding ties a key of Keys to its field: a *string, *bool, *int,
// *int64, *float64, *time.Duration or *[]string (comma-separated).
type binding struct {
	key string
	ptr any
}

// bindings lists every key of Keys with the field of c it fills.
func (c *Config) bindings() []binding {
	d, k, o, h, p, r, m := &c.Database, &c.Kafka, &c.Orchestrator, &c.HTTP, &c.Participants, &c.Retention, &c.Demo
	return []binding{
		{"database.url", &d.URL}, {"database.max_conns", &d.MaxConns},
		{"kafka.brokers", &k.Brokers}, {"kafka.topic_prefix", &k.TopicPrefix}, {"kafka.reply_topic", &k.ReplyTopic},
		{"kafka.outcome_topic", &k.OutcomeTopic}, {"kafka.start_topic", &k.StartTopic}, {"kafka.event_topic", &k.EventTopic},
		{"kafka.partitions", &k.Partitions}, {"kafka.replication", &k.Replication},
		{"kafka.tls.enabled", &k.TLS.Enabled}, {"kafka.tls.ca_file", &k.TLS.CAFile}, {"kafka.tls.cert_file", &k.TLS.CertFile},
		{"kafka.tls.key_file", &k.TLS.KeyFile}, {"kafka.tls.server_name", &k.TLS.ServerName},
		{"kafka.tls.insecure_skip_verify", &k.TLS.InsecureSkipVerify},
		{"kafka.sasl.mechanism", &k.SASL.Mechanism}, {"kafka.sasl.username", &k.SASL.Username}, {"kafka.sasl.password", &k.SASL.Password},
		{"kafka.sasl.allow_plaintext", &k.SASL.AllowPlaintext},
		{"orchestrator.schema", &o.Schema}, {"orchestrator.group_id", &o.GroupID}, {"orchestrator.timer_interval", &o.TimerInterval},
		{"orchestrator.timer_batch", &o.TimerBatch}, {"orchestrator.start_batch", &o.StartBatch},
		{"orchestrator.saga_cache", &o.SagaCache},
		{"orchestrator.inbox_batch", &o.InboxBatch}, {"orchestrator.relay_batch", &o.RelayBatch},
		{"orchestrator.single_live_types", &o.SingleLiveTypes}, {"orchestrator.max_sends_per_saga", &o.MaxSendsPerSaga},
		{"orchestrator.proposal_ttl", &o.ProposalTTL},
		{"relay.keep_sent", &c.Relay.KeepSent}, {"relay.dispatch", &c.Relay.Dispatch}, {"relay.dispatch_lease", &c.Relay.DispatchLease},
		{"http.addr", &h.Addr}, {"http.admin_token", &h.AdminToken}, {"http.client_token", &h.ClientToken},
		{"http.operator_tokens", &h.OperatorTokens},
		{"http.protect_reads", &h.ProtectReads}, {"http.protect_metrics", &h.ProtectMetrics},
		{"http.trust_proxy", &h.TrustProxy}, {"http.secure_cookie", &h.SecureCookie},
		{"http.max_data_bytes", &h.MaxDataBytes}, {"http.max_header_bytes", &h.MaxHeaderBytes},
		{"http.read_timeout", &h.ReadTimeout}, {"http.write_timeout", &h.WriteTimeout}, {"http.idle_timeout", &h.IdleTimeout},
		{"http.handler_timeout", &h.HandlerTimeout}, {"http.max_connections", &h.MaxConnections}, {"http.db_max_conns", &h.DBMaxConns},
		{"http.health_addr", &h.HealthAddr}, {"http.max_connections_per_client", &h.MaxConnectionsPerClient}, {"http.busy_idle_timeout", &h.BusyIdleTimeout},
		{"http.max_concurrent_reads", &h.MaxConcurrentReads},
		{"log.level", &c.Log.Level}, {"log.format", &c.Log.Format},
		{"participants.schema_prefix", &p.SchemaPrefix}, {"participants.shipping_fail_rate", &p.ShippingFailRate},
		{"participants.points_fail_rate", &p.PointsFailRate}, {"participants.payment_limit_cents", &p.PaymentLimitCents},
		{"participants.seed", &p.Seed}, {"participants.http_addr", &p.HTTPAddr}, {"participants.items", &p.Items},
		{"participants.trips", &p.Trips},
		{"participants.payment_provider_url", &p.PaymentProviderURL},
		{"retention.enabled", &r.Enabled}, {"retention.sent_outbox_after", &r.SentOutboxAfter}, {"retention.inbox_after", &r.InboxAfter},
		{"retention.finished_saga_after", &r.FinishedSagaAfter},
		{"retention.failed_saga_after", &r.FailedSagaAfter}, {"retention.barrier_after", &r.BarrierAfter},
		{"retention.dead_letter_after", &r.DeadLetterAfter}, {"retention.audit_after", &r.AuditAfter},
		{"retention.stray_dead_letter_after", &r.StrayDeadLetterAfter}, {"retention.batch_size", &r.BatchSize}, {"retention.interval", &r.Interval},
		{"reconcile.enabled", &c.Reconcile.Enabled}, {"reconcile.interval", &c.Reconcile.Interval}, {"reconcile.since", &c.Reconcile.Since},
		{"reconcile.sample_rate", &c.Reconcile.SampleRate}, {"reconcile.flow_sample_rate", &c.Reconcile.FlowSampleRate}, {"reconcile.stuck_after", &c.Reconcile.StuckAfter},
		{"tracing.otlp_endpoint", &c.Tracing.OTLPEndpoint}, {"tracing.service_name", &c.Tracing.ServiceName},
		{"shutdown.timeout", &c.Shutdown.Timeout},
		{"demo.orders", &m.Orders}, {"demo.seed", &m.Seed}, {"demo.trip_ratio", &m.TripRatio}, {"demo.out_of_stock_rate", &m.OutOfStockRate},
		{"demo.coupon_taken_rate", &m.CouponTakenRate}, {"demo.decline_rate", &m.DeclineRate},
		{"demo.shipping_fail_rate", &m.ShippingFailRate}, {"demo.points_fail_rate", &m.PointsFailRate},
		{"demo.concurrency", &m.Concurrency}, {"demo.timeout", &m.Timeout}, {"demo.database", &m.Database},
		{"dev_broker.addr", &c.DevBroker.Addr},
		{"security.orchestrator_keys", &c.Security.OrchestratorKeys}, {"security.orchestrator_key_id", &c.Security.OrchestratorKeyID},
		{"security.participant_keys", &c.Security.ParticipantKeys}, {"security.allow_unsigned_replies", &c.Security.AllowUnsignedReplies},
		{"security.allow_unsigned_replies_from", &c.Security.AllowUnsignedRepliesFrom},
		{"security.allow_unsigned_commands", &c.Security.AllowUnsignedCommands},
	}
}

// Load decodes v (defaults, file, environment and flags already bound)
// into a Config and validates it. Every error names its key.
func Load(v *viper.Viper) (*Config, error) {
	c, err := decode(v)
	if err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// decode is Load without the checks of the values (`config --effective`
// shows what is in force even when it would be refused).
func decode(v *viper.Viper) (*Config, error) {
	c := &Config{}
	var errs []error
	for _, b := range c.bindings() {
		if err := decodeKey(b, v.Get(b.key)); err != nil {
			errs = append(errs, err)
		}
	}
	if len(c.Kafka.Brokers) == 0 {
		c.Kafka.Brokers = kafkaclient.ParseBrokers(os.Getenv("KAFKA_BROKERS"))
	}
	steps, err := decodeOverrides(v)
	c.Steps = steps
	types, terr := decodeSagaTypes(v)
	c.SagaTypes = types
	if err = errors.Join(append(errs, err, terr)...); err != nil {
		return nil, err
	}
	return c, nil
}

// decodeKey converts raw, the value viper holds for b.key, into b's field.
func decodeKey(b binding, raw any) error {
	var err error
	want := ""
	switch p := b.ptr.(type) {
	case *string:
		*p, err = cast.ToStringE(raw)
		want = "a string"
	case *[]string:
		var s string
		if list, ok := raw.([]any); ok { // a YAML list
			var items []string
			items, err = cast.ToStringSliceE(list)
			s = strings.Join(items, ",")
		} else {
			s, err = cast.ToStringE(raw)
		}
		*p = kafkaclient.ParseBrokers(s)
		want = "a comma-separated list"
	case *bool:
		*p, err = cast.ToBoolE(raw)
		want = "true or false"
	case *int:
		*p, err = cast.ToIntE(raw)
		want = "an integer"
	case *int64:
		*p, err = cast.ToInt64E(raw)
		want = "an integer"
	case *float64:
		*p, err = cast.ToFloat64E(raw)
		want = "a number"
	case *time.Duration:
		*p, err = cast.ToDurationE(raw)
		want = "a duration such as 500ms or 2m"
	default:
		panic(fmt.Sprintf("cli: binding %s: unsupported field type %T", b.key, b.ptr))
	}
	if err != nil {
		return fmt.Errorf("config: %s: want %s, got %q", b.key, want, fmt.Sprint(raw))
	}
	return nil
}

// decodeOverrides reads sagas.<type>.steps.<step>.*, sorted.
func decodeOverrides(v *viper.Viper) ([]StepOverride, error) {
	var out []StepOverride
	var errs []error
	for _, t := range sortedKeys(v.GetStringMap("sagas")) {
		for _, step := range sortedKeys(v.GetStringMap("sagas." + t + ".steps")) {
			base := "sagas." + t + ".steps." + step + "."
			o := StepOverride{Type: t, Step: step}
			dur := func(key string, d *time.Duration) {
				if !v.IsSet(base + key) {
					return
				}
				raw := v.Get(base + key)
				var err error
				if *d, err = time.ParseDuration(cast.ToString(raw)); err != nil || *d <= 0 {
					errs = append(errs, fmt.Errorf("config: %s%s: want a positive duration, got %q", base, key, fmt.Sprint(raw)))
				}
			}
			dur("timeout", &o.Timeout)
			dur("deadline", &o.Deadline)
			dur("accepted_deadline", &o.AcceptedDeadline)
			dur("retry.initial_interval", &o.Retry.InitialInterval)
			dur("retry.max_interval", &o.Retry.MaxInterval)
			if raw := v.Get(base + "retry.multiplier"); v.IsSet(base + "retry.multiplier") {
				m, err := cast.ToFloat64E(raw)
				if err != nil || m < 1 {
					errs = append(errs, fmt.Errorf("config: %sretry.multiplier: must be at least 1, got %q", base, fmt.Sprint(raw)))
				}
				o.Retry.Multiplier = m
			}
			if raw := v.Get(base + "retry.max_attempts"); v.IsSet(base + "retry.max_attempts") {
				n, err := cast.ToIntE(raw)
				if err != nil || n < 1 {
					errs = append(errs, fmt.Errorf("config: %sretry.max_attempts: must be at least 1, got %q", base, fmt.Sprint(raw)))
				}
				o.Retry.MaxAttempts = n
			}
			out = append(out, o)
		}
	}
	return out, errors.Join(errs...)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// validate checks every value on its own and the values that must agree;
// each error names the key.
func (c *Config) validate() error {
	var errs []error
	bad := func(key, rule string, got any) {
		errs = append(errs, fmt.Errorf("config: %s: %s, got %v", key, rule, got))
	}
	atLeast := func(key string, n, lo int) {
		if n < lo {
			bad(key, fmt.Sprintf("must be at least %d", lo), n)
		}
	}
	positive := func(key string, d time.Duration) {
		if d <= 0 {
			bad(key, "must be a positive duration", d)
		}
	}
	rate := func(key string, r float64) {
		if r < 0 || r > 1 {
			bad(key, "must be between 0 and 1", r)
		}
	}
	atLeast("database.max_conns", c.Database.MaxConns, 1)
	if err := c.Security.parse(); err != nil {
		errs = append(errs, err)
	}
	k := c.Kafka
	for _, tp := range []struct{ key, v string }{{"kafka.reply_topic", k.ReplyTopic}, {"kafka.outcome_topic", k.OutcomeTopic},
		{"kafka.start_topic", k.StartTopic}, {"kafka.event_topic", k.EventTopic}} {
		if err := message.CheckTopicName(tp.v); err != nil {
			bad(tp.key, "must be a Kafka topic name ("+err.Error()+")", fmt.Sprintf("%q", tp.v))
		}
	}
	if k.StartTopic == k.EventTopic {
		bad("kafka.event_topic", "must differ from kafka.start_topic", fmt.Sprintf("%q", k.EventTopic))
	}
	atLeast("kafka.partitions", k.Partitions, 1)
	atLeast("kafka.replication", k.Replication, 1)
	if err := (kafkaclient.Security{TLS: k.TLS, SASL: k.SASL}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("config: %w", err))
	}
	o := c.Orchestrator
	if !pgid.ValidIdentifier(o.Schema) {
		bad("orchestrator.schema", "must match "+pgid.IdentifierPattern, fmt.Sprintf("%q", o.Schema))
	}
	if o.GroupID == "" {
		bad("orchestrator.group_id", "must not be empty", `""`)
	}
	positive("orchestrator.timer_interval", o.TimerInterval)
	atLeast("orchestrator.timer_batch", o.TimerBatch, 1)
	atLeast("orchestrator.start_batch", o.StartBatch, 1)
	atLeast("orchestrator.inbox_batch", o.InboxBatch, 1)
	atLeast("orchestrator.relay_batch", o.RelayBatch, 1)
	h := c.HTTP
	positive("http.read_timeout", h.ReadTimeout)
	positive("http.write_timeout", h.WriteTimeout)
	positive("http.idle_timeout", h.IdleTimeout)
	positive("http.handler_timeout", h.HandlerTimeout)
	atLeast("http.max_connections", h.MaxConnections, 1)
	atLeast("http.max_header_bytes", h.MaxHeaderBytes, 4<<10)
	atLeast("http.max_data_bytes", h.MaxDataBytes, 2) // the data is a JSON object
	atLeast("http.db_max_conns", h.DBMaxConns, 1)
	atLeast("http.max_connections_per_client", h.MaxConnectionsPerClient, 1)
	atLeast("http.max_concurrent_reads", h.MaxConcurrentReads, 1)
	if h.DBMaxConns >= 1 && h.MaxConcurrentReads >= h.DBMaxConns {
		bad("http.max_concurrent_reads", fmt.Sprintf("must be less than http.db_max_conns %d, so that reads cannot take every connection starts need (raise http.db_max_conns)", h.DBMaxConns), h.MaxConcurrentReads)
	}
	positive("http.busy_idle_timeout", h.BusyIdleTimeout)
	if h.HealthAddr != "" && h.HealthAddr == h.Addr {
		bad("http.health_addr", "must differ from http.addr", fmt.Sprintf("%q", h.HealthAddr))
	}
	if h.WriteTimeout > 0 && h.WriteTimeout <= h.HandlerTimeout {
		bad("http.write_timeout", "must be longer than http.handler_timeout "+h.HandlerTimeout.String()+" (or a slow answer is cut off without its error)", h.WriteTimeout)
	}
	if h.ClientToken != "" && h.ClientToken == h.AdminToken {
		errs = append(errs, errors.New("config: http.client_token: must differ from http.admin_token (a client could act as an operator)"))
	}
	if _, err := h.operators(); err != nil {
		errs = append(errs, err)
	}
	if (h.ProtectReads || h.ProtectMetrics) && h.AdminToken == "" && h.ClientToken == "" && len(h.OperatorTokens) == 0 {
		errs = append(errs, errors.New("config: http.protect_reads and http.protect_metrics need http.client_token or http.admin_token: nobody could pass"))
	}
	if _, err := parseLevel(c.Log.Level); err != nil {
		bad("log.level", "want debug, info, warn or error", fmt.Sprintf("%q", c.Log.Level))
	}
	if f := c.Log.Format; f != "text" && f != "json" {
		bad("log.format", "want text or json", fmt.Sprintf("%q", f))
	}
	p := c.Participants
	rate("participants.shipping_fail_rate", p.ShippingFailRate)
	rate("participants.points_fail_rate", p.PointsFailRate)
	if u, err := url.Parse(p.PaymentProviderURL); p.PaymentProviderURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		bad("participants.payment_provider_url", "must be an http:// or https:// URL", p.PaymentProviderURL)
	}
	if p.PaymentLimitCents < 0 {
		bad("participants.payment_limit_cents", "must not be negative", p.PaymentLimitCents)
	}
	r := c.Retention
	positive("retention.sent_outbox_after", r.SentOutboxAfter)
	positive("retention.inbox_after", r.InboxAfter)
	positive("retention.finished_saga_after", r.FinishedSagaAfter)
	positive("retention.interval", r.Interval)
	positive("relay.dispatch_lease", c.Relay.DispatchLease)
	positive("retention.failed_saga_after", r.FailedSagaAfter)
	positive("retention.barrier_after", r.BarrierAfter)
	if r.FailedSagaAfter < r.FinishedSagaAfter {
		bad("retention.failed_saga_after", "must be at least retention.finished_saga_after ("+r.FinishedSagaAfter.String()+")", r.FailedSagaAfter)
	}
	if r.BarrierAfter < r.InboxAfter {
		bad("retention.barrier_after", "must be at least retention.inbox_after ("+r.InboxAfter.String()+")", r.BarrierAfter)
	}
	positive("retention.dead_letter_after", r.DeadLetterAfter)
	positive("retention.stray_dead_letter_after", r.StrayDeadLetterAfter)
	positive("retention.audit_after", r.AuditAfter)
	if r.AuditAfter < r.DeadLetterAfter {
		bad("retention.audit_after", "must be at least retention.dead_letter_after ("+r.DeadLetterAfter.String()+")", r.AuditAfter)
	}
	rc := c.Reconcile
	positive("reconcile.interval", rc.Interval)
	positive("reconcile.since", rc.Since)
	positive("reconcile.stuck_after", rc.StuckAfter)
	rate("reconcile.sample_rate", rc.SampleRate)
	rate("reconcile.flow_sample_rate", rc.FlowSampleRate)
	atLeast("retention.batch_size", r.BatchSize, 1)
	positive("shutdown.timeout", c.Shutdown.Timeout)
	m := c.Demo
	atLeast("demo.orders", m.Orders, 1)
	atLeast("demo.concurrency", m.Concurrency, 1)
	if m.TripRatio < 0 {
		bad("demo.trip_ratio", "must be at least 0", m.TripRatio)
	}
	positive("demo.timeout", m.Timeout)
	rate("demo.out_of_stock_rate", m.OutOfStockRate)
	rate("demo.coupon_taken_rate", m.CouponTakenRate)
	rate("demo.decline_rate", m.DeclineRate)
	rate("demo.shipping_fail_rate", m.ShippingFailRate)
	rate("demo.points_fail_rate", m.PointsFailRate)
	return errors.Join(errs...)
}

func parseLevel(s string) (slog.Level, error) {
	var lvl slog.Level
	err := lvl.UnmarshalText([]byte(s))
	return lvl, err
}

// effective is the value in force of key, secrets redacted.
func (c *Config) effective(key string) string {
	for _, b := range c.bindings() {
		if b.key != key {
			continue
		}
		var val string
		switch p := b.ptr.(type) {
		case *[]string:
			vs := make([]string, len(*p))
			for i, v := range *p {
				vs[i] = redactSetting(key, v)
			}
			return safe(strings.Join(vs, ","))
		case *time.Duration:
			val = p.String()
		case *string:
			val = *p
		case *bool:
			val = fmt.Sprint(*p)
		case *int:
			val = fmt.Sprint(*p)
		case *int64:
			val = fmt.Sprint(*p)
		case *float64:
			val = fmt.Sprint(*p)
		}
		return safe(redactSetting(key, val))
	}
	return ""
}

// engine is the saga engine's configuration.
func (c *Config) engine() orchestrator.EngineConfig {
	return orchestrator.EngineConfig{
		Schema: c.Orchestrator.Schema, ReplyTopic: c.Kafka.ReplyTopic, TopicPrefix: c.Kafka.TopicPrefix,
		OutcomeTopic:  c.Kafka.OutcomeTopic,
		TimerInterval: c.Orchestrator.TimerInterval, TimerBatch: c.Orchestrator.TimerBatch,
		Advanced:        orchestrator.Advanced{StartBatch: c.Orchestrator.StartBatch, SagaCache: c.Orchestrator.SagaCache},
		SingleLiveTypes: c.Orchestrator.SingleLiveTypes,
		Signing:         c.Security.engine(),
		FourEyes:        c.fourEyes(),
		SLO:             c.slo(),
		ProposalTTL:     c.Orchestrator.ProposalTTL,
	}
}

// limits are the HTTP server's limits.
func (h HTTPConfig) limits() api.Limits {
	return api.Limits{ReadTimeout: h.ReadTimeout, WriteTimeout: h.WriteTimeout, IdleTimeout: h.IdleTimeout,
		MaxHeaderBytes: h.MaxHeaderBytes, MaxConnections: h.MaxConnections,
		MaxConnectionsPerClient: h.MaxConnectionsPerClient, BusyIdleTimeout: h.BusyIdleTimeout}
}

// operators parses http.operator_tokens ("name:token" each) into the
// API's named operator tokens; an entry without a name or a token, or a
// name given twice, is an error naming its position (never the token).
func (h HTTPConfig) operators() (map[string]string, error) {
	if len(h.OperatorTokens) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(h.OperatorTokens))
	for i, e := range h.OperatorTokens {
		name, tok, ok := strings.Cut(strings.TrimSpace(e), ":")
		switch {
		case !ok || name == "" || tok == "":
			return nil, fmt.Errorf("config: http.operator_tokens: entry %d: want name:token", i+1)
		case out[name] != "":
			return nil, fmt.Errorf("config: http.operator_tokens: entry %d: operator %q is given twice", i+1, name)
		}
		out[name] = tok
	}
	return out, nil
}

// api is the HTTP API's configuration.
func (h HTTPConfig) api() api.Config {
	ops, _ := h.operators() // validate reported a bad entry already
	return api.Config{AdminToken: h.AdminToken, ClientToken: h.ClientToken, Operators: ops, ProtectReads: h.ProtectReads,
		ProtectMetrics: h.ProtectMetrics, TrustProxy: h.TrustProxy, SecureCookie: h.SecureCookie,
		MaxDataBytes: h.MaxDataBytes, HandlerTimeout: h.HandlerTimeout,
		MaxConcurrentReads: h.MaxConcurrentReads}
}

// validateServe checks what `serve` needs beyond validate: tokens fit to
// be tokens (api.WeakToken), and both tokens when http.addr is not a
// loopback address. Each error names the keys to set.
func (h HTTPConfig) validateServe() error {
	var errs []error
	for _, t := range []struct{ key, val string }{{"http.admin_token", h.AdminToken}, {"http.client_token", h.ClientToken}} {
		if t.val == "" {
			continue
		}
		if why := api.WeakToken(t.val); why != "" {
			errs = append(errs, fmt.Errorf("config: %s: refused: %s", t.key, why))
		}
	}
	if !loopback(h.Addr) {
		var missing []string
		if h.AdminToken == "" {
			missing = append(missing, "http.admin_token (SAGAFLOW_HTTP_ADMIN_TOKEN)")
		}
		if h.ClientToken == "" {
			missing = append(missing, "http.client_token (SAGAFLOW_HTTP_CLIENT_TOKEN)")
		}
		if len(missing) > 0 {
			errs = append(errs, fmt.Errorf("config: http.addr %q is not a loopback address, and serve does not listen beyond loopback without tokens: set %s (at least %d characters each, e.g. `openssl rand -hex 32`), or listen on 127.0.0.1",
				h.Addr, strings.Join(missing, " and "), api.TokenMinLength))
		}
	}
	return errors.Join(errs...)
}

// loopback reports whether the listen address addr (host:port) is on
// loopback only: 127.0.0.0/8, ::1 or localhost. An empty host (every
// interface) or an address that does not parse is not.
func loopback(addr string) bool {
	if addr == "" {
		return true // no listener
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// security is kafka.tls.* and kafka.sasl.*.
func (k KafkaConfig) security() kafkaclient.Security {
	return kafkaclient.Security{TLS: k.TLS, SASL: k.SASL}
}

// logger writes to stderr at log.level in log.format.
func (l LogConfig) logger() *slog.Logger {
	lvl, _ := parseLevel(l.Level)
	opts := &slog.HandlerOptions{Level: lvl}
	if l.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// applyOverrides puts the per-step overrides into reg.
func (c *Config) applyOverrides(reg *saga.Registry) error {
	for _, o := range c.Steps {
		if err := reg.Override(o.Type, o.Step, o.StepOverride); err != nil {
			return fmt.Errorf("config sagas.%s.steps.%s: %w", o.Type, o.Step, err)
		}
	}
	return nil
}
