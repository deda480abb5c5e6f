package participants

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/message"
)

// Execute runs cmd alone behind the barrier in tx, the way HandleCommands
// runs a batch of one, without enqueuing the reply: it returns the reply,
// or why the command would be dead-lettered.
func (p *Participant) Execute(ctx context.Context, tx pgx.Tx, cmd message.Command) (message.Reply, error) {
	h, err := p.step(cmd)
	if err != nil {
		return message.Reply{}, fmt.Errorf("participant %q: %w", p.cfg.Name, err)
	}
	it := &item{ctx: ctx, cmd: cmd, h: h}
	c := &call{p: p, ctx: ctx, tx: tx, tail: &pgx.Batch{}}
	if err := c.run([]*item{it}); err != nil {
		return message.Reply{}, err
	}
	if err := c.flush(ctx); err != nil {
		return message.Reply{}, err
	}
	return it.reply, it.dead
}

// HandleMessage runs HandleCommands for m alone and returns why m would be
// dead-lettered, or nil when its reply is enqueued.
func (p *Participant) HandleMessage(ctx context.Context, tx pgx.Tx, m message.Record) error {
	items, err := p.handle(ctx, tx, []message.Record{m})
	if err != nil {
		return err
	}
	return items[0].dead
}

// BarrierStatements returns the SQL of the barrier's run of forwards in
// schema: the claim and the record.
func BarrierStatements(schema string) (claim, record string) {
	b := newBarrier(schema)
	return b.claimForwards, b.recordForwards
}
