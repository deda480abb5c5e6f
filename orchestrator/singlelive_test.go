package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

func singleLiveEngine(t *testing.T, types ...string) (*orchestrator.Engine, *testkitPool) {
	t.Helper()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("orch")))
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	eng, err := orchestrator.NewEngine(pool, reg, &orchestrator.EngineConfig{Schema: "orch", SingleLiveTypes: types})
	if err != nil {
		t.Fatal(err)
	}
	return eng, &testkitPool{pool}
}

// Concurrent starts of one aggregate with different idempotency keys (a
// client retrying with a fresh key): exactly one saga is created, every
// other start is refused naming it; the same key again returns it; once
// it is terminal (not failed) a new one may start.
func TestSingleLiveSagaPerAggregate(t *testing.T) {
	t.Parallel()
	eng, db := singleLiveEngine(t, orderapi.SagaType)
	ctx := context.Background()
	const n = 12
	var wg sync.WaitGroup
	ids := make([]uuid.UUID, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in, created, err := eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: fmt.Sprintf("try-%d", i), AggregateID: "order-1", Data: order("order-1")})
			if err == nil && !created {
				err = errors.New("not created")
			}
			ids[i], errs[i] = in.ID, err
		}()
	}
	wg.Wait()
	var winner uuid.UUID
	for i, err := range errs {
		if err == nil {
			if winner != uuid.Nil {
				t.Fatalf("two starts created a saga for one aggregate: %s and %s", winner, ids[i])
			}
			winner = ids[i]
		}
	}
	if winner == uuid.Nil {
		t.Fatalf("no start succeeded: %v", errs)
	}
	for i, err := range errs {
		var live *orchestrator.LiveSagaError
		if err != nil && (!errors.As(err, &live) || !errors.Is(err, orchestrator.ErrLiveSaga) || live.ID != winner || live.State != saga.Running) {
			t.Errorf("start %d: err = %v; want a *LiveSagaError naming %s", i, err, winner)
		}
	}
	if got := db.count(t, `SELECT count(*) FROM orch.sagas WHERE aggregate_id = 'order-1'`); got != 1 {
		t.Fatalf("%d sagas for order-1, want exactly 1", got)
	}
	// The winner's own key again: the same saga, not an error.
	var winnerKey string
	if err := db.QueryRow(ctx, `SELECT idempotency_key FROM orch.sagas WHERE id = $1`, winner).Scan(&winnerKey); err != nil {
		t.Fatal(err)
	}
	in, created, err := eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: winnerKey, AggregateID: "order-1", Data: order("order-1")})
	if err != nil || created || in.ID != winner {
		t.Fatalf("same key again = %s created=%v err=%v; want %s", in.ID, created, err, winner)
	}
	// StartTx applies the same rule; another aggregate is not affected.
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		_, _, err := eng.StartTx(ctx, tx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "tx", AggregateID: "order-1", Data: order("order-1")})
		return err
	})
	if !errors.Is(err, orchestrator.ErrLiveSaga) {
		t.Fatalf("StartTx for the live aggregate: err = %v, want ErrLiveSaga", err)
	}
	if _, created, err := eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "other", AggregateID: "order-2", Data: order("order-2")}); err != nil || !created {
		t.Fatalf("start for another aggregate: created=%v err=%v", created, err)
	}
	// failed still blocks (its outcome is not settled); completed does not.
	for _, st := range []struct {
		state   saga.State
		refused bool
	}{{saga.Failed, true}, {saga.Completed, false}} {
		if _, err := db.Exec(ctx, `UPDATE orch.sagas SET state = $2 WHERE id = $1`, winner, string(st.state)); err != nil {
			t.Fatal(err)
		}
		_, created, err := eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "after-" + string(st.state), AggregateID: "order-1", Data: order("order-1")})
		if st.refused != errors.Is(err, orchestrator.ErrLiveSaga) || (!st.refused && (err != nil || !created)) {
			t.Errorf("start while the first is %s: created=%v err=%v; want refused=%v", st.state, created, err, st.refused)
		}
	}
}

// Without the setting, a fresh key starts a second saga for the aggregate.
func TestSeveralLiveSagasPerAggregateByDefault(t *testing.T) {
	t.Parallel()
	eng, db := singleLiveEngine(t)
	ctx := context.Background()
	for _, key := range []string{"a", "b"} {
		if _, created, err := eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: key, AggregateID: "order-1", Data: order("order-1")}); err != nil || !created {
			t.Fatalf("start %s: created=%v err=%v", key, created, err)
		}
	}
	if got := db.count(t, `SELECT count(*) FROM orch.sagas WHERE aggregate_id = 'order-1'`); got != 2 {
		t.Fatalf("%d sagas, want 2", got)
	}
}

type testkitPool struct{ *pgxpool.Pool }

func (p *testkitPool) count(t *testing.T, q string) int {
	t.Helper()
	var n int
	if err := p.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
