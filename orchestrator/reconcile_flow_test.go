package orchestrator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
)

func TestFlowKind(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want DiscrepancyKind
	}{
		{saga.Disagreement(saga.Completed, saga.StepSucceeded, message.QueryClosed), KindCommandNotRecorded},
		{saga.Disagreement(saga.Compensated, saga.StepSucceeded, message.QueryClosed), KindCommandNotRecorded},
		{saga.Disagreement(saga.Completed, saga.StepSucceeded, message.QueryCompensated), "participant_compensated_step_succeeded"},
		{saga.Disagreement(saga.Failed, saga.StepUnknown, message.QueryDone), "participant_done_step_unknown"},
	} {
		if got := flowKind(tc.in); got != tc.want {
			t.Errorf("flowKind(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// One saga per start: while the unique index on idempotency keys is in
// force nothing is looked for; without it, a start that made two sagas
// in the window is found, on the extra saga, naming the first.
func TestFlowFindsADuplicatedStart(t *testing.T) {
	t.Parallel()
	pool, e := orchEngine(t)
	ctx := context.Background()
	insert := func(key string, age time.Duration) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO orch.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, current_step, data, steps, version, created_at, updated_at, finished_at)
VALUES (gen_random_uuid(), 'place-order', 1, $1, $1, 'completed', '', '{}', '[]', 3, now() - $2::interval, now(), now())`, key, age.String()); err != nil {
			t.Fatal(err)
		}
	}
	insert("k-1", time.Hour)
	insert("k-2", time.Hour)
	d, err := e.duplicatedStarts(ctx, time.Now().Add(-24*time.Hour))
	if err != nil || len(d) != 0 {
		t.Fatalf("with the unique index: %+v, %v; want nothing", d, err)
	}
	if _, err := pool.Exec(ctx, `DROP INDEX orch.sagas_idempotency_key_idx`); err != nil {
		t.Fatal(err)
	}
	insert("k-1", 30*time.Minute) // a second saga of the start k-1
	insert("k-3", 48*time.Hour)
	insert("k-3", 47*time.Hour) // outside the window
	rep, err := e.Reconcile(ctx, ReconcileOptions{DryRun: true, Since: 24 * time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ByKind[string(KindStartDuplicated)] != 1 {
		t.Fatalf("dry run %+v; want one %s", rep, KindStartDuplicated)
	}
	for _, x := range rep.List {
		if x.Kind == KindStartDuplicated && (!strings.Contains(x.Detail, `"k-1" made 2 sagas`) || x.SagaType != "place-order") {
			t.Errorf("discrepancy %+v; want the k-1 start named", x)
		}
	}
}
