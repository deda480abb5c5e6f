package participants

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/outboxdb"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/outbox"
)

// Migrations returns the migration sets of the SDK tables (outbox, inbox,
// barrier) in the participant's schema. Apply them (with the participant's
// own business sets) before Run.
func (p *Participant) Migrations() ([]migrations.Set, error) {
	return migrations.Participant(p.cfg.Schema)
}

// HandleMessage is the inbox handler of the command topic: it decodes the
// record, runs the command behind the barrier (Execute) and enqueues the
// reply in the participant's outbox, all in tx. An error wrapping
// message.ErrInvalid (undecodable record, headers contradicting the body,
// unknown step) means the record belongs on the dead-letter topic; any other
// error means tx must be rolled back and the record processed again.
func (p *Participant) HandleMessage(ctx context.Context, tx pgx.Tx, m message.Record) error {
	ctx = withTrace(ctx, m)
	cmd, err := message.DecodeCommand(m.Value)
	if err != nil {
		return fmt.Errorf("participant %q: topic %s partition %d offset %d: %w", p.cfg.Name, m.Topic, m.Partition, m.Offset, err)
	}
	if err := message.CheckRecordHeaders(m.Headers); err != nil {
		return fmt.Errorf("participant %q: saga %s step %q message-id hash %s: %w", p.cfg.Name, cmd.SagaID, cmd.Step, message.IDHash(cmd.MessageID), err)
	}
	if err := message.MatchRecordHeaders(m.Headers, cmd.MessageID, cmd.SagaID); err != nil {
		return fmt.Errorf("participant %q: saga %s step %q message-id hash %s: %w", p.cfg.Name, cmd.SagaID, cmd.Step, message.IDHash(cmd.MessageID), err)
	}
	if err := p.verifyCommand(m); err != nil {
		return fmt.Errorf("participant %q: saga %s step %q message %s at %s/%d offset %d: %w", p.cfg.Name, cmd.SagaID, cmd.Step, cmd.MessageID, m.Topic, m.Partition, m.Offset, err)
	}
	if err := p.replyTopicAllowed(cmd); err != nil {
		return fmt.Errorf("participant %q: saga %s step %q message-id hash %s: %w", p.cfg.Name, cmd.SagaID, cmd.Step, message.IDHash(cmd.MessageID), err)
	}
	reply, err := p.Execute(ctx, tx, cmd)
	if err != nil {
		return err
	}
	if err := p.enqueueReply(ctx, tx, cmd, reply, m); err != nil {
		return err
	}
	return nil
}

// enqueueReply enqueues reply to cmd, echoing the trace context headers of
// cmd's record m.
func (p *Participant) enqueueReply(ctx context.Context, tx pgx.Tx, cmd message.Command, reply message.Reply, m message.Record) error {
	value, err := message.EncodeReply(reply)
	if err != nil {
		return fmt.Errorf("participant %q: saga %s step %q message-id hash %s: %w", p.cfg.Name, cmd.SagaID, cmd.Step, message.IDHash(cmd.MessageID), err)
	}
	msg := outbox.Message{
		Topic:   cmd.ReplyTo,
		Key:     reply.SagaID.String(),
		Value:   value,
		Headers: message.EchoTrace(message.Headers(reply.MessageID, reply.SagaID), m),
	}
	p.signReply(msg.Topic, msg.Key, msg.Value, msg.Headers)
	err = p.enqueue(ctx, tx, msg)
	if err != nil {
		return fmt.Errorf("participant %q: saga %s step %q message-id hash %s: enqueue reply %s: %w", p.cfg.Name, cmd.SagaID, cmd.Step, message.IDHash(cmd.MessageID), reply.MessageID, err)
	}
	return nil
}

// enqueue writes replies to the outbox in tx. Inside an inbox handler with
// the dispatcher running they are leased to it and handed over once the
// inbox transaction commits (published at once; the relay takes them only
// after the lease); otherwise the relay publishes them.
func (p *Participant) enqueue(ctx context.Context, tx pgx.Tx, msgs ...outbox.Message) error {
	b := &pgx.Batch{}
	after, err := p.queueEnqueue(ctx, b, msgs...)
	if err != nil {
		return err
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	after()
	return nil
}

// queueEnqueue is enqueue's insert added to b; call after once b ran.
func (p *Participant) queueEnqueue(ctx context.Context, b *pgx.Batch, msgs ...outbox.Message) (after func(), err error) {
	d := p.dispatch.Load()
	if d == nil || !d.Active() || !inbox.InHandler(ctx) {
		return func() {}, outboxdb.For(p.outbox.Schema()).QueueEnqueue(b, msgs...)
	}
	pend, err := outboxdb.For(p.outbox.Schema()).QueueEnqueueDirect(b, d.Lease(), msgs...)
	if err != nil {
		return nil, err
	}
	return func() { inbox.AfterCommit(ctx, func() { d.Send(pend) }) }, nil
}
