package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/saga"
)

// ErrLiveSaga is returned (as a *LiveSagaError) by Start and StartTx for
// a saga type of EngineConfig.SingleLiveTypes when its aggregate already has a
// live saga: a client retry with a fresh idempotency key must not run the
// saga (and charge) twice.
var ErrLiveSaga = errors.New("the aggregate already has a live saga of this type")

// LiveSagaError names the live saga that refused a start.
type LiveSagaError struct {
	Type, AggregateID string
	// ID and State are the live saga's.
	ID    uuid.UUID
	State saga.State
}

func (e *LiveSagaError) Error() string {
	return fmt.Sprintf("start saga %q for aggregate %q: saga %s is %s: one live saga per aggregate for this type (finish or resolve it first)",
		e.Type, e.AggregateID, e.ID, e.State)
}

// Is makes errors.Is(err, ErrLiveSaga) true.
func (e *LiveSagaError) Is(target error) bool { return target == ErrLiveSaga }

// liveLockClass is the first half of the advisory lock key of a (type,
// aggregate) start.
const liveLockClass int32 = 0x5a6a0c0d

// checkSingleLive refuses a single-live type the registry does not know.
func checkSingleLive(reg *saga.Registry, types []string) error {
	for _, t := range types {
		if _, ok := reg.Latest(t); !ok {
			return fmt.Errorf("saga engine: EngineConfig.SingleLiveTypes: unknown saga type %q (known: %v)", t, reg.Types())
		}
	}
	return nil
}

// singleLive reports whether sagaType allows one live saga per aggregate.
func (e *Engine) singleLive(sagaType string) bool {
	return slices.Contains(e.cfg.SingleLiveTypes, sagaType)
}

// admitSingleLive runs checkLive for the starts of a single-live type
// among ss (decided for ps) and returns those left to insert: a start
// whose idempotency key exists gets that saga, one refused for a live saga
// its *LiveSagaError.
func (e *Engine) admitSingleLive(ctx context.Context, tx pgx.Tx, ss []started, ps []*pendingStart) ([]started, []*pendingStart, error) {
	keep := 0
	for i, p := range ps {
		if e.singleLive(p.req.Type) {
			existing, found, err := e.checkLive(ctx, tx, p.req)
			var live *LiveSagaError
			switch {
			case errors.As(err, &live):
				p.err = err
				continue
			case err != nil:
				return nil, nil, err
			case found:
				p.in = existing
				continue
			}
		}
		ss[keep], ps[keep] = ss[i], p
		keep++
	}
	return ss[:keep], ps[:keep], nil
}

// checkLive runs in a start's transaction before the insert, for a
// single-live type: it takes the transaction-scoped advisory lock of
// (type, aggregate), so concurrent starts of one aggregate (any replica,
// any idempotency key) run one after the other, then returns the saga
// with the request's idempotency key if there is one (found), or a
// *LiveSagaError when another saga of the aggregate is running,
// compensating or failed (failed: its outcome is not settled until an
// operator resolves it). The lock is released at commit or rollback.
func (e *Engine) checkLive(ctx context.Context, tx pgx.Tx, req StartRequest) (existing saga.Instance, found bool, err error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int4, hashtext($2))`, liveLockClass, req.Type+"\x1f"+req.AggregateID); err != nil {
		return saga.Instance{}, false, fmt.Errorf("start saga %q for aggregate %q: lock the aggregate: %w", req.Type, req.AggregateID, err)
	}
	existing, err = e.st.loadByKey(ctx, tx, req.Type, req.IdempotencyKey)
	switch {
	case err == nil:
		return existing, true, nil
	case !errors.Is(err, saga.ErrNotFound):
		return saga.Instance{}, false, err
	}
	live := &LiveSagaError{Type: req.Type, AggregateID: req.AggregateID}
	err = tx.QueryRow(ctx, `SELECT id, state FROM `+e.st.sagas+`
WHERE aggregate_id = $1 AND type = $2 AND state IN ('running', 'compensating', 'failed')
ORDER BY created_at DESC, id DESC LIMIT 1`, req.AggregateID, req.Type).Scan(&live.ID, &live.State)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return saga.Instance{}, false, nil
	case err != nil:
		return saga.Instance{}, false, fmt.Errorf("start saga %q for aggregate %q: look for a live saga: %w", req.Type, req.AggregateID, err)
	}
	return saga.Instance{}, false, live
}
