// Package orchestrator wires one orchestrator process: the saga engine, the
// consumer of the reply topic (through the inbox), the relay of the
// orchestrator's outbox and the timer loop. Several processes may run the
// same service on one database and consumer group: replies are applied with
// conditional updates, timers are claimed with SKIP LOCKED, and the relay
// publishes only while it holds the outbox's advisory lock.
package orchestrator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/relay"
	"github.com/sagaflow/sagaflow/saga"
)

// GroupIDDefault is the consumer group of the reply consumer.
const GroupIDDefault = "sagaflow-orchestrator"

// Config configures a Service.
type Config struct {
	Brokers []string
	// Dialer, if set, makes every Kafka connection of the service (TLS,
	// SASL: see kafkaclient.Security); nil dials plain TCP.
	Dialer *kafka.Dialer
	// GroupID of the reply consumer; every replica uses the same.
	GroupID string
	// Partitions and Replication for topics the service creates at start
	// (reply topic, command topics of registered participants, their DLQs).
	Partitions  int
	Replication int
	Engine      saga.Config
	Inbox       inbox.Config
	Relay       relay.Config
	Logger      *slog.Logger
	// Components run by Run; all true by default via DefaultRun.
	Run RunSet
}

// RunSet picks what a process runs, so a deployment can split roles.
type RunSet struct {
	Replies, Relay, Timers bool
}

// DefaultRun runs every component.
var DefaultRun = RunSet{Replies: true, Relay: true, Timers: true}

// Service is a configured orchestrator process.
type Service struct {
	pool   *pgxpool.Pool
	engine *saga.Engine
	cfg    Config
	log    *slog.Logger

	replies *inbox.Consumer // nil unless Run.Replies
	relay   *relay.Relay    // nil unless Run.Relay
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
	c := *cfg
	switch {
	case len(c.Inbox.Brokers) > 0:
		return nil, errors.New("orchestrator: Config.Inbox.Brokers is set; the service uses Config.Brokers: leave it empty")
	case c.Inbox.Dialer != nil:
		return nil, errors.New("orchestrator: Config.Inbox.Dialer is set; the service uses Config.Dialer: leave it nil")
	case c.Inbox.GroupID != "":
		return nil, errors.New("orchestrator: Config.Inbox.GroupID is set; the service uses Config.GroupID: leave it empty")
	case len(c.Inbox.Topics) > 0:
		return nil, errors.New("orchestrator: Config.Inbox.Topics is set; the service consumes the engine's reply topic (Config.Engine.ReplyTopic): leave it empty")
	case c.Inbox.Schema != "":
		return nil, errors.New("orchestrator: Config.Inbox.Schema is set; the service uses the engine's schema (Config.Engine.Schema): leave it empty")
	case len(c.Relay.Brokers) > 0:
		return nil, errors.New("orchestrator: Config.Relay.Brokers is set; the service uses Config.Brokers: leave it empty")
	case c.Relay.Dialer != nil:
		return nil, errors.New("orchestrator: Config.Relay.Dialer is set; the service uses Config.Dialer: leave it nil")
	}
	if c.GroupID == "" {
		c.GroupID = GroupIDDefault
	}
	if c.Partitions <= 0 {
		c.Partitions = 8
	}
	if c.Replication <= 0 {
		c.Replication = 1
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Run == (RunSet{}) {
		c.Run = DefaultRun
	}
	ec := c.Engine
	if ec.Logger == nil {
		ec.Logger = c.Logger
	}
	eng, err := saga.NewEngine(pool, reg, &ec)
	if err != nil {
		return nil, err
	}
	s := &Service{pool: pool, engine: eng, cfg: c, log: c.Logger}
	if c.Run.Replies || c.Run.Relay {
		if len(c.Brokers) == 0 {
			return nil, errors.New("orchestrator: Config.Brokers is empty (the reply consumer and the relay need them)")
		}
	}
	if c.Run.Replies {
		ic := c.Inbox
		ic.Brokers, ic.Dialer, ic.GroupID, ic.Topics, ic.Schema = c.Brokers, c.Dialer, c.GroupID, []string{eng.ReplyTopic()}, eng.Outbox().Schema()
		ic.Lanes = cmp.Or(ic.Lanes, RepliesLanesDefault)
		ic.BatchSize = cmp.Or(ic.BatchSize, RepliesBatchDefault)
		if ic.Logger == nil {
			ic.Logger = c.Logger
		}
		if s.replies, err = inbox.New(pool, s.HandleReplies, &ic); err != nil {
			return nil, fmt.Errorf("orchestrator: reply consumer: %w", err)
		}
	}
	if c.Run.Relay {
		rc := c.Relay
		rc.Brokers, rc.Dialer = c.Brokers, c.Dialer
		if rc.Logger == nil {
			rc.Logger = c.Logger
		}
		if s.relay, err = relay.New(pool, eng.Outbox(), &rc); err != nil {
			return nil, fmt.Errorf("orchestrator: relay: %w", err)
		}
	}
	return s, nil
}

// Engine is the service's saga engine (start, status, operator actions).
func (s *Service) Engine() *saga.Engine { return s.engine }

// Migrations are the sets the orchestrator needs.
func (s *Service) Migrations() ([]migrations.Set, error) {
	return migrations.Orchestrator(s.engine.Outbox().Schema())
}

// Topics lists the topics the service produces to or consumes from.
func (s *Service) Topics() []string {
	t := []string{s.engine.ReplyTopic()}
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
	for _, t := range s.Topics() {
		topics = append(topics, t+inboxDLQSuffix(s.cfg.Inbox))
	}
	return kafkaclient.EnsureTopicsWith(ctx, s.cfg.Dialer, s.cfg.Brokers, s.cfg.Partitions, s.cfg.Replication, topics...)
}

func inboxDLQSuffix(c inbox.Config) string {
	if c.DLQSuffix != "" {
		return c.DLQSuffix
	}
	return inbox.DLQSuffixDefault
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
// decoded and its headers checked against its body; one that is bad is
// dead-lettered with the reason (nothing written for it). The rest are
// applied together (saga.Engine.ApplyReplies: one load, one update, one
// journal and one outbox insert). When that cannot be done as one (a saga
// moved by someone else meanwhile, a reply for an unknown saga or step, a
// stray reply), they are applied one by one with saga.Engine.ApplyReply,
// which reloads and re-decides on a conflict; a reply it refuses as invalid
// is dead-lettered. A database error fails the call: the inbox rolls it back
// and, for an error about a reply's content, splits the batch until that
// reply stands alone and dead-letters it.
func (s *Service) HandleReplies(ctx context.Context, tx pgx.Tx, ms []message.Record) ([]inbox.Result, error) {
	out := make([]inbox.Result, len(ms))
	rs := make([]message.Reply, 0, len(ms))
	idx := make([]int, 0, len(ms))
	for i, m := range ms {
		r, err := decodeReply(m)
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
	end := s.replySpans(ms, rs, idx)
	err := s.engine.ApplyReplies(ctx, tx, rs)
	defer func() { end(err) }()
	switch {
	case err == nil:
		return out, nil
	case !errors.Is(err, saga.ErrBatchFallback) && !errors.Is(err, message.ErrInvalid):
		return nil, err
	}
	// Nothing of the batch was written: one by one.
	for k := range rs {
		if err := s.engine.ApplyReply(ctx, tx, rs[k]); err != nil {
			if !errors.Is(err, message.ErrInvalid) {
				return nil, err
			}
			out[idx[k]] = inbox.Result{Outcome: inbox.DeadLetter, Reason: err.Error()}
		}
	}
	return out, nil
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
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var comps []func(context.Context) error
	if s.replies != nil {
		comps = append(comps, s.replies.Run)
	}
	if s.relay != nil {
		comps = append(comps, s.relay.Run)
	}
	if s.cfg.Run.Timers {
		comps = append(comps, s.engine.RunTimers)
	}
	return runAll(ctx, cancel, comps...)
}

// runAll runs fns concurrently; the first error cancels the rest.
func runAll(ctx context.Context, cancel context.CancelFunc, fns ...func(context.Context) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(fns))
	for _, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx); err != nil {
				errs <- err
				cancel()
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
