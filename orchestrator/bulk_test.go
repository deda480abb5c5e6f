package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// A dry run lists the matching sagas and what the action would do to each,
// writing nothing; the real run applies it to each through Operate,
// journaled with actor and reason; sagas whose state refuses it are
// listed as refused; an empty filter is refused whole.
func TestOperateMatchingDryRunThenApply(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	for i := range 3 {
		k := fmt.Sprintf("bulk-%d", i)
		if _, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: k, AggregateID: k, Data: order(k)}); err != nil {
			t.Fatal(err)
		}
	}
	journalRows := func() int {
		var n int
		if err := env.pool.QueryRow(ctx, `SELECT count(*) FROM orch.journal`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := journalRows()
	op := saga.Operator{Action: saga.ActionCompensate, Actor: "alice", Reason: "supplier recall"}
	filter := orchestrator.Filter{State: saga.Running, Type: orderapi.SagaType}

	dry, err := env.eng.OperateMatching(ctx, orchestrator.BulkRequest{Filter: filter, Operator: op, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if dry.Matched != 3 || dry.Counts.WouldApply != 3 || len(dry.Items) != 3 || dry.Items[0].Outcome != orchestrator.BulkWouldApply {
		t.Fatalf("dry run = %+v, want 3 would_apply", dry)
	}
	if n := journalRows(); n != before {
		t.Fatalf("dry run wrote %d journal rows", n-before)
	}

	two, err := env.eng.OperateMatching(ctx, orchestrator.BulkRequest{Filter: filter, Operator: op, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if two.Matched != 2 || !two.Truncated || two.Counts.Applied != 2 || two.Items[0].State != saga.Compensating {
		t.Fatalf("limited run = %+v, want 2 applied (compensating), truncated", two)
	}
	var audited int
	if err := env.pool.QueryRow(ctx, `SELECT count(*) FROM orch.journal WHERE actor = 'alice' AND reason = 'supplier recall'`).Scan(&audited); err != nil {
		t.Fatal(err)
	}
	if audited != 2 {
		t.Fatalf("%d journal rows with the actor and reason, want 2", audited)
	}

	// Resolving sagas that are not failed is refused one by one.
	res, err := env.eng.OperateMatching(ctx, orchestrator.BulkRequest{Filter: orchestrator.Filter{Type: orderapi.SagaType},
		Operator: saga.Operator{Action: saga.ActionResolve, Actor: "bob", Reason: "r", Outcome: saga.Completed}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Matched != 3 || res.Counts.Refused != 3 || res.Items[0].Reason == "" {
		t.Fatalf("resolve of open sagas = %+v, want 3 refused with reasons", res)
	}

	if _, err := env.eng.OperateMatching(ctx, orchestrator.BulkRequest{Operator: op}); !errors.Is(err, orchestrator.ErrInvalidInput) {
		t.Fatalf("empty filter: %v, want ErrInvalidInput", err)
	}
}
