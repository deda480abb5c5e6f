package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/txhooks"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
)

// Intake defaults: the topics other services start sagas and send events
// on, and the suffix of the intake consumer's group.
const (
	StartTopicDefault = message.StartTopicDefault
	EventTopicDefault = message.EventTopicDefault
	IntakeGroupSuffix = ".intake"
)

// intakeSavepointErr begins the errors of the savepoint around a record.
const intakeSavepointErr = "intake: savepoint"

// HandleIntake is the inbox handler of the start and event topics. Each
// record runs in a savepoint of its own inside the inbox's batch
// transaction:
//   - a start record (message.StartRecord, the body of POST /sagas) starts
//     its saga through the engine's start path (StartTx), deduplicated by
//     (type, idempotency_key) like an HTTP start: a second record with the
//     same type and key starts nothing;
//   - an event record (message.EventRecord, the body of POST
//     /sagas/{id}/events with the saga id in the body or the record key)
//     goes to SendEventTx, the door of the HTTP path: the same event_id
//     again is a no-op.
//
// A record refused for its content (not JSON, a missing field, an unknown
// saga type, invalid data, a second live saga of a single-live type; an
// unknown or finished saga, a name never waited for or waited for no
// more) has its writes rolled back and is dead-lettered with the reason;
// the partition moves on. A database error fails the call (the inbox
// retries the batch).
func (s *Service) HandleIntake(ctx context.Context, tx pgx.Tx, ms []message.Record) ([]inbox.Result, error) {
	out := make([]inbox.Result, len(ms))
	hooks, _ := txhooks.Of(tx)
	for i, m := range ms {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", intakeSavepointErr, err)
		}
		result, herr := s.intakeOne(ctx, sp, hooks, m)
		if herr == nil {
			if err := sp.Commit(ctx); err != nil {
				return nil, fmt.Errorf("%s: release: %w", intakeSavepointErr, err)
			}
			s.countIntake(hooks, m.Topic, result)
			continue
		}
		if !inbox.IsPermanent(herr) {
			return nil, herr
		}
		if err := sp.Rollback(ctx); err != nil {
			return nil, fmt.Errorf("%s: roll back after %q: %w", intakeSavepointErr, herr.Error(), err)
		}
		out[i] = inbox.Result{Outcome: inbox.DeadLetter, Reason: fmt.Sprintf("%s at %s/%d offset %d: %v", s.intakeKind(m.Topic), m.Topic, m.Partition, m.Offset, herr)}
		s.countIntake(hooks, m.Topic, kafkaDeadLettered)
		s.log.LogAttrs(ctx, slog.LevelWarn, "intake record dead-lettered", slog.String("topic", m.Topic),
			slog.Int("partition", m.Partition), slog.Int64("offset", m.Offset), slog.String("reason", herr.Error()))
	}
	return out, nil
}

// intakeKind names what a record of topic is.
func (s *Service) intakeKind(topic string) string {
	if topic == s.cfg.StartTopic {
		return "start"
	}
	return "event"
}

// countIntake counts a record by result once the batch commits (at once
// outside an inbox transaction).
func (s *Service) countIntake(hooks txhooks.Tx, topic, result string) {
	m := s.engine.cfg.Metrics
	if m == nil {
		return
	}
	count := func() { m.countEvent(result) }
	if topic == s.cfg.StartTopic {
		count = func() { m.countStart(result) }
	}
	if hooks == nil {
		count()
		return
	}
	hooks.AfterCommit(count)
}

// intakeOne handles one record in tx (a savepoint); a permanent error
// (inbox.IsPermanent) is about the record itself.
func (s *Service) intakeOne(ctx context.Context, tx pgx.Tx, hooks txhooks.Tx, m message.Record) (string, error) {
	switch m.Topic {
	case s.cfg.StartTopic:
		return s.intakeStart(ctx, tx, hooks, m)
	case s.cfg.EventTopic:
		return s.intakeEvent(ctx, tx, hooks, m)
	}
	return "", inbox.Permanent(fmt.Errorf("topic %q is neither the start topic %q nor the event topic %q", m.Topic, s.cfg.StartTopic, s.cfg.EventTopic))
}

// intakeStart starts the saga of a start record; its commands are
// dispatched after the inbox commits (or left to the relay).
func (s *Service) intakeStart(ctx context.Context, tx pgx.Tx, hooks txhooks.Tx, m message.Record) (string, error) {
	r, err := message.DecodeStartRecord(m.Value)
	if err != nil {
		return "", inbox.Permanent(err)
	}
	req := StartRequest{Type: r.Type, IdempotencyKey: r.IdempotencyKey, AggregateID: r.AggregateID, Data: r.Data}
	req.TraceParent, _ = m.Header(message.HeaderTraceParent)
	req.TraceState, _ = m.Header(message.HeaderTraceState)
	e := s.engine
	def, data, err := e.prepare(&req)
	if err != nil {
		return "", inbox.Permanent(err)
	}
	p := &pendingStart{req: req, def: def, data: data}
	pc := &postCommit{}
	if err := e.startOne(ctx, tx, p, pc); err != nil {
		var live *LiveSagaError
		if errors.As(err, &live) || errors.Is(err, ErrInvalidInput) || errors.Is(err, saga.ErrUnknownType) {
			return "", inbox.Permanent(err)
		}
		return "", err
	}
	e.afterInbox(hooks, pc)
	if p.created {
		return kafkaCreated, nil
	}
	return kafkaExisting, nil
}

// intakeEvent records an event record through SendEventTx's code; the
// commands it sends are dispatched after the inbox commits (or left to the
// relay).
func (s *Service) intakeEvent(ctx context.Context, tx pgx.Tx, hooks txhooks.Tx, m message.Record) (string, error) {
	ev, err := message.DecodeEventRecord(m.Key, m.Value)
	if err != nil {
		return "", inbox.Permanent(err)
	}
	pc := &postCommit{}
	res, err := s.engine.sendEventTx(ctx, tx, ev.SagaID, ev.Name, ev.EventID, ev.Data, pc)
	if err != nil {
		var ee *saga.EventError
		if errors.As(err, &ee) || errors.Is(err, saga.ErrNotFound) || errors.Is(err, saga.ErrUnknownType) {
			return "", inbox.Permanent(err)
		}
		return "", err
	}
	s.engine.afterInbox(hooks, pc)
	if res.Duplicate {
		return kafkaDuplicate, nil
	}
	return kafkaRecorded, nil
}
