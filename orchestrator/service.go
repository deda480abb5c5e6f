package orchestrator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/runall"
	"github.com/sagaflow/sagaflow/internal/txhooks"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/outbox"
	"github.com/sagaflow/sagaflow/relay"
	"github.com/sagaflow/sagaflow/saga"
)

// Service defaults: New gives a zero Config field the matching value.
const (
	// GroupIDDefault is the consumer group of the reply consumer.
	GroupIDDefault = "sagaflow-orchestrator"
	// PartitionsDefault and ReplicationDefault shape the topics the
	// service creates.
	PartitionsDefault  = 8
	ReplicationDefault = 1
)

// Config configures a Service. Zero fields take their defaults; nil is a
// Config of zeros.
type Config struct {
	// Brokers are the Kafka bootstrap brokers; required when Run has the
	// reply consumer or the relay.
	Brokers []string
	// Dialer, if set, makes every Kafka connection of the service (TLS,
	// SASL: see kafkaclient.Security); nil dials plain TCP.
	Dialer *kafka.Dialer
	// GroupID of the reply consumer; every replica uses the same. Default
	// GroupIDDefault. The intake consumer (start and event topics) uses
	// GroupID + IntakeGroupSuffix.
	GroupID string
	// StartTopic carries starts from other services (the body of POST
	// /sagas, message.StartRecord); default StartTopicDefault. EventTopic
	// carries external events (the body of POST /sagas/{id}/events,
	// message.EventRecord); default EventTopicDefault. Both are consumed
	// through the inbox by the intake consumer, which runs with the reply
	// consumer (RunSet.Replies); see HandleIntake.
	StartTopic, EventTopic string
	// Partitions and Replication for topics the service creates at start
	// (reply topic, command topics of registered participants, their
	// DLQs); defaults PartitionsDefault and ReplicationDefault.
	Partitions  int
	Replication int
	// Engine configures the saga engine (its Logger defaults to Logger).
	Engine EngineConfig
	// Inbox configures the reply consumer. The service sets its Brokers,
	// Dialer, GroupID, Topics and Schema, which must be left empty; Lanes
	// defaults to RepliesLanesDefault, BatchSize to RepliesBatchDefault,
	// Logger to Logger.
	Inbox inbox.Config
	// Relay configures the relay of the engine's outbox. The service sets
	// its Brokers and Dialer, which must be left empty; Logger defaults to
	// Logger.
	Relay relay.Config
	// Logger receives the service's logs; nil discards them.
	Logger *slog.Logger
	// Components run by Run; all (DefaultRun) when zero.
	Run RunSet
}

// WithDefaults returns c with its zero fields set to their defaults. The
// embedded configs keep their own zeros (their constructors fill them),
// but for the fields the service gives its reply consumer's defaults.
func (c Config) WithDefaults() Config {
	c.GroupID = cmp.Or(c.GroupID, GroupIDDefault)
	c.StartTopic = cmp.Or(c.StartTopic, StartTopicDefault)
	c.EventTopic = cmp.Or(c.EventTopic, EventTopicDefault)
	c.Partitions = cmp.Or(c.Partitions, PartitionsDefault)
	c.Replication = cmp.Or(c.Replication, ReplicationDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Run = cmp.Or(c.Run, DefaultRun)
	if c.Engine.Logger == nil {
		c.Engine.Logger = c.Logger
	}
	c.Inbox.Lanes = cmp.Or(c.Inbox.Lanes, RepliesLanesDefault)
	c.Inbox.BatchSize = cmp.Or(c.Inbox.BatchSize, RepliesBatchDefault)
	if c.Inbox.Logger == nil {
		c.Inbox.Logger = c.Logger
	}
	if c.Relay.Logger == nil {
		c.Relay.Logger = c.Logger
	}
	return c
}

// validate checks c as given; the error names the field. The embedded
// configs' own values are checked by their constructors in New.
func (c Config) validate() error {
	switch {
	case len(c.Inbox.Brokers) > 0:
		return errors.New("orchestrator: Config.Inbox.Brokers is set; the service uses Config.Brokers: leave it empty")
	case c.Inbox.Dialer != nil:
		return errors.New("orchestrator: Config.Inbox.Dialer is set; the service uses Config.Dialer: leave it nil")
	case c.Inbox.GroupID != "":
		return errors.New("orchestrator: Config.Inbox.GroupID is set; the service uses Config.GroupID: leave it empty")
	case len(c.Inbox.Topics) > 0:
		return errors.New("orchestrator: Config.Inbox.Topics is set; the service consumes the engine's reply topic (Config.Engine.ReplyTopic): leave it empty")
	case c.Inbox.Schema != "":
		return errors.New("orchestrator: Config.Inbox.Schema is set; the service uses the engine's schema (Config.Engine.Schema): leave it empty")
	case len(c.Relay.Brokers) > 0:
		return errors.New("orchestrator: Config.Relay.Brokers is set; the service uses Config.Brokers: leave it empty")
	case c.Relay.Dialer != nil:
		return errors.New("orchestrator: Config.Relay.Dialer is set; the service uses Config.Dialer: leave it nil")
	case c.StartTopic != "" && !topicRE.MatchString(c.StartTopic):
		return fmt.Errorf("orchestrator: Config.StartTopic %q is not a valid topic name", c.StartTopic)
	case c.EventTopic != "" && !topicRE.MatchString(c.EventTopic):
		return fmt.Errorf("orchestrator: Config.EventTopic %q is not a valid topic name", c.EventTopic)
	case c.StartTopic != "" && c.StartTopic == c.EventTopic:
		return fmt.Errorf("orchestrator: Config.StartTopic and Config.EventTopic are both %q; they must differ", c.StartTopic)
	case c.Partitions < 0:
		return fmt.Errorf("orchestrator: Config.Partitions is %d, want > 0", c.Partitions)
	case c.Replication < 0:
		return fmt.Errorf("orchestrator: Config.Replication is %d, want > 0", c.Replication)
	case len(c.Brokers) == 0 && (c.Run == RunSet{} || c.Run.Replies || c.Run.Relay):
		return errors.New("orchestrator: Config.Brokers is empty (the reply consumer and the relay need them)")
	}
	return nil
}

// RunSet picks what a process runs, so a deployment can split roles.
// Replies runs the reply consumer and the intake consumer (start and
// event topics).
type RunSet struct {
	Replies, Relay, Timers bool
}

// DefaultRun runs every component.
var DefaultRun = RunSet{Replies: true, Relay: true, Timers: true}

// Service is a configured orchestrator process.
type Service struct {
	pool   *pgxpool.Pool
	engine *Engine
	cfg    Config
	log    *slog.Logger

	replies  *inbox.Consumer // nil unless Run.Replies
	intake   *inbox.Consumer // start and event topics; nil unless Run.Replies
	relay    *relay.Relay    // nil unless Run.Relay
	dispatch *relay.Relay    // the relay, when it dispatches the engine's commands
}

// New builds the engine over reg, and the reply consumer and the relay it
// will run, validating every configuration now. It does not touch Postgres
// or Kafka. Fields of Config.Inbox and Config.Relay that the service sets
// itself (brokers, dialer, group, topics, schema) must be left empty: New
// says which instead of overwriting them.
func New(pool *pgxpool.Pool, reg *saga.Registry, cfg *Config) (*Service, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := cfg.WithDefaults()
	var rl, d *relay.Relay
	if c.Run.Relay {
		// The relay is built first: unless Relay.NoDispatch the engine's
		// commands go out through it right after their commits, and it
		// publishes what a crash (or Kafka) left behind after the lease.
		ob, err := outbox.New(cmp.Or(c.Engine.Schema, SchemaDefault))
		if err != nil {
			return nil, fmt.Errorf("orchestrator: %w", err)
		}
		rc := c.Relay
		rc.Brokers, rc.Dialer = c.Brokers, c.Dialer
		if rl, err = relay.New(pool, ob, &rc); err != nil {
			return nil, fmt.Errorf("orchestrator: relay: %w", err)
		}
		if !c.Relay.NoDispatch && c.Engine.Dispatcher == nil {
			d = rl
			c.Engine.Dispatcher = d
		}
	}
	eng, err := NewEngine(pool, reg, &c.Engine)
	if err != nil {
		return nil, err
	}
	s := &Service{pool: pool, engine: eng, cfg: c, log: c.Logger, relay: rl, dispatch: d}
	if c.Run.Replies {
		ic := c.Inbox
		ic.Brokers, ic.Dialer, ic.GroupID, ic.Topics, ic.Schema = c.Brokers, c.Dialer, c.GroupID, []string{eng.ReplyTopic()}, eng.Outbox().Schema()
		// The sagas a reply batch concerns (named by the saga-id headers)
		// are loaded in the round trip that begins its transaction.
		txhooks.SetPrefetch(&ic, func(b *pgx.Batch, recs []message.Record) any { return eng.queueLoad(b, headerSagaIDs(recs)) })
		if s.replies, err = inbox.New(pool, s.HandleReplies, &ic); err != nil {
			return nil, fmt.Errorf("orchestrator: reply consumer: %w", err)
		}
		kc := c.Inbox
		kc.Brokers, kc.Dialer, kc.GroupID, kc.Topics, kc.Schema = c.Brokers, c.Dialer, c.GroupID+IntakeGroupSuffix, []string{c.StartTopic, c.EventTopic}, eng.Outbox().Schema()
		if s.intake, err = inbox.New(pool, s.HandleIntake, &kc); err != nil {
			return nil, fmt.Errorf("orchestrator: intake consumer: %w", err)
		}
	}
	return s, nil
}

// Dispatcher publishes the engine's commands right after their commits (nil
// with Relay.NoDispatch or without the relay); another engine of the
// process over the same schema (the HTTP API's) may share it.
func (s *Service) Dispatcher() *relay.Relay { return s.dispatch }

// Engine is the service's saga engine (start, status, operator actions).
func (s *Service) Engine() *Engine { return s.engine }

// Migrations are the sets the orchestrator needs.
func (s *Service) Migrations() ([]migrations.Set, error) {
	return migrations.Orchestrator(s.engine.Outbox().Schema())
}

// Topics lists the topics the service produces to or consumes from: the
// reply, outcome, start and event topics and the command topics.
func (s *Service) Topics() []string {
	t := []string{s.engine.ReplyTopic(), s.engine.OutcomeTopic(), s.cfg.StartTopic, s.cfg.EventTopic}
	for _, p := range s.engine.Registry().Participants() {
		t = append(t, s.engine.CommandTopic(p))
	}
	return t
}

// Prepare applies migrations and creates the topics the service uses.
func (s *Service) Prepare(ctx context.Context) error {
	sets, err := s.Migrations()
	if err != nil {
		return err
	}
	if _, err := migrations.Migrate(ctx, s.pool, sets...); err != nil {
		return err
	}
	if len(s.cfg.Brokers) == 0 {
		return errors.New("orchestrator: no Kafka brokers configured")
	}
	topics := s.Topics()
	suffix := s.cfg.Inbox.WithDefaults().DLQSuffix
	for _, t := range s.Topics() {
		topics = append(topics, t+suffix)
	}
	return kafkaclient.EnsureTopicsWith(ctx, s.cfg.Dialer, s.cfg.Brokers, s.cfg.Partitions, s.cfg.Replication, topics...)
}

// decodeReply decodes a reply record and checks its headers against the
// body. Errors wrap message.ErrInvalid.
func decodeReply(m message.Record) (message.Reply, error) {
	r, err := message.DecodeReply(m.Value)
	if err != nil {
		return r, err
	}
	if err := message.CheckRecordHeaders(m.Headers); err != nil {
		return r, fmt.Errorf("reply %s: %w", r.MessageID, err)
	}
	if err := message.MatchRecordHeaders(m.Headers, r.MessageID, r.SagaID); err != nil {
		return r, fmt.Errorf("reply %s: %w", r.MessageID, err)
	}
	return r, nil
}

// HandleReplies is the inbox handler of the reply topic. Every reply is
// decoded, its headers checked against its body and, with reply signing
// configured (Signing), its signature verified (the engine then takes it
// only from the step's participant); one that is bad is dead-lettered with
// the reason (nothing written for it). The rest are applied together
// (Engine.ApplyReplies: one load, one update, one journal and one outbox
// insert; a saga moved by someone else meanwhile is loaded again and the
// batch decided again), leaving out alone each reply refused by its
// content (a stray reply: for an unknown saga or step, or answering
// nothing the saga sent; an invalid query answer), which is dead-lettered;
// a stray one's dead letter is marked stray, for retention to purge. Inside
// the inbox's batch transaction the writes go with its COMMIT where the
// inbox allows it, and the commands are dispatched after it. A database
// error fails the call: the inbox rolls it back and, for an error about a
// reply's content, splits the batch until that reply stands alone and
// dead-letters it.
func (s *Service) HandleReplies(ctx context.Context, tx pgx.Tx, ms []message.Record) (out []inbox.Result, err error) {
	out = make([]inbox.Result, len(ms))
	rs := make([]message.Reply, 0, len(ms))
	idx := make([]int, 0, len(ms))
	for i, m := range ms {
		r, err := decodeReply(m)
		if err == nil {
			err = s.engine.VerifyReply(m, &r)
		}
		if err != nil {
			out[i] = inbox.Result{Outcome: inbox.DeadLetter, Reason: fmt.Sprintf("reply at %s/%d offset %d: %v", m.Topic, m.Partition, m.Offset, err)}
			continue
		}
		rs = append(rs, r)
		idx = append(idx, i)
	}
	if len(rs) == 0 {
		return out, nil
	}
	rt := s.replySpans(ms, rs, idx)
	defer func() { rt.end(err) }()
	var pre *preloaded
	hooks, inInbox := txhooks.Of(tx)
	if inInbox {
		pre, _ = hooks.Prefetched().(*preloaded)
	}
	refused, retried, err := s.engine.applyReplies(ctx, tx, rs, pre, hooks)
	if err != nil {
		return nil, err
	}
	if retried > 0 {
		rt.retried()
	}
	for k, rerr := range refused {
		if rerr != nil {
			out[idx[k]] = refusedReply(rerr)
			rt.refused(k, rerr)
		}
	}
	return out, nil
}

// refusedReply is the inbox result of a reply refused by its content: a
// dead letter, marked stray when it answers nothing the orchestrator sent.
func refusedReply(err error) inbox.Result {
	return inbox.Result{Outcome: inbox.DeadLetter, Reason: err.Error(), Stray: errors.Is(err, saga.ErrStrayReply)}
}

// RepliesLanesDefault is how many reply batches are applied concurrently:
// each reply touches only its own saga's row, so lanes do not contend.
const RepliesLanesDefault = 4

// RepliesBatchDefault is the most replies applied in one transaction (the
// reply consumer's inbox.Config.BatchSize when zero). Batches only fill up
// when replies queue, and then a bigger batch spends less per reply
// (measured: docs/perf/figures.md#orchestrator-replies-batch). Applying
// replies takes the saga rows' locks only, so a longer transaction holds up
// nobody else.
const RepliesBatchDefault = 500

// Run runs the selected components until ctx is cancelled. If one fails,
// the others are stopped and the first error is returned.
func (s *Service) Run(ctx context.Context) error {
	var comps []func(context.Context) error
	if s.replies != nil {
		comps = append(comps, s.replies.Run)
	}
	if s.intake != nil {
		comps = append(comps, s.intake.Run)
	}
	if s.relay != nil {
		comps = append(comps, s.relay.Run)
	}
	if s.cfg.Run.Timers {
		comps = append(comps, s.engine.RunTimers)
	}
	return runall.Run(ctx, comps...)
}

// headerSagaIDs returns the distinct saga ids the records' saga-id headers
// name (a record without one, or with one that does not parse, names
// none: its saga is loaded when its reply is applied).
func headerSagaIDs(recs []message.Record) []uuid.UUID {
	ids := make([]uuid.UUID, 0, len(recs))
	seen := make(map[uuid.UUID]bool, len(recs))
	for _, r := range recs {
		v, _ := r.Header(message.HeaderSagaID)
		if id, err := uuid.Parse(v); err == nil && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids
}
