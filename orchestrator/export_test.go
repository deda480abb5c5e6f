package orchestrator

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/message"
)

// InstanceDiscrepancies is what the reconciler finds in one saga alone.
var InstanceDiscrepancies = instanceDiscrepancies

// QueueLoad and ApplyPreloaded reach the reply consumer's prefetch path
// (queueLoad, then applyReplies with what it loaded) from the tests of
// package orchestrator_test.
func (e *Engine) QueueLoad(b *pgx.Batch, ids []uuid.UUID) any { return e.queueLoad(b, ids) }

func (e *Engine) ApplyPreloaded(ctx context.Context, tx pgx.Tx, rs []message.Reply, pre any) ([]error, int, error) {
	p, _ := pre.(*preloaded)
	return e.applyReplies(ctx, tx, rs, p, nil)
}
