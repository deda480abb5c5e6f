package orchestrator

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
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

// Kept is the engine's kept copy of saga id (sagacache.go), if any.
func (e *Engine) Kept(id uuid.UUID) (saga.Instance, bool) {
	if e.cache == nil {
		return saga.Instance{}, false
	}
	e.cache.mu.Lock()
	defer e.cache.mu.Unlock()
	in, ok := e.cache.m[id]
	return in, ok
}
