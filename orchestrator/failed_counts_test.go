package orchestrator_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// checkFailed reads the failed sagas by type three ways: the triggers' count
// (failed_counts), the table itself, and what Stats and InFlight answer.
func checkFailed(t *testing.T, env *engineEnv, when string, want int64) {
	t.Helper()
	ctx := context.Background()
	var kept, table int64
	if err := env.pool.QueryRow(ctx, `SELECT coalesce(sum(n), 0) FROM orch.failed_counts`).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if err := env.pool.QueryRow(ctx, `SELECT count(*) FROM orch.sagas WHERE state = 'failed'`).Scan(&table); err != nil {
		t.Fatal(err)
	}
	st, err := env.eng.Stats(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	in, err := env.eng.InFlight(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var byType int64
	for _, s := range st.Open {
		byType += s[saga.Failed]
	}
	if kept != want || table != want || byType != want || in[saga.Failed] != want {
		t.Fatalf("%s: failed_counts %d, table %d, Stats %d (%v), InFlight %d; want %d", when, kept, table, byType, st.Open, in[saga.Failed], want)
	}
	if want > 0 && st.Open[orderapi.SagaType][saga.Failed] != want {
		t.Fatalf("%s: Stats.Open = %v, want %d failed %s", when, st.Open, want, orderapi.SagaType)
	}
	if want == 0 {
		if _, ok := in[saga.Failed]; ok {
			t.Fatalf("%s: InFlight reports failed sagas %v when none is", when, in)
		}
		for ty, s := range st.Open {
			if _, ok := s[saga.Failed]; ok {
				t.Fatalf("%s: Stats.Open[%s] lists failed sagas %v when none is", when, ty, s)
			}
		}
	}
}

// TestFailedCountsFollowTransitions: the count of failed sagas by type
// (kept by triggers on the saga table, migration 020) follows a saga
// failing (the engine's force-fail), leaving failed (a repair's resume),
// failing again, a failed saga inserted, updates that do not touch the
// state (and so fire nothing), retention's delete of failed sagas, a
// rolled back failure and a truncate.
func TestFailedCountsFollowTransitions(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	checkFailed(t, env, "at the start", 0)
	a := startToShipment(t, env, "o-fc-a")
	b := startToShipment(t, env, "o-fc-b")
	force := func(id uuid.UUID, who string) {
		t.Helper()
		got, err := env.eng.Operate(ctx, id, saga.Operator{Action: saga.ActionForceFail, Actor: who, Reason: "carrier outage", Ticket: "INC-1"})
		if err != nil || got.State != saga.Failed {
			t.Fatalf("force-fail: %v, state %s", err, got.State)
		}
	}
	force(a, "carol")
	checkFailed(t, env, "one saga failed", 1)
	force(b, "carol")
	checkFailed(t, env, "two sagas failed", 2)
	got, err := env.eng.Operate(ctx, a, saga.Operator{Action: saga.ActionResume, Actor: "carol", Reason: "carrier back", Step: orderapi.StepCreateShipment})
	if err != nil || got.State != saga.Running {
		t.Fatalf("resume: %v, state %s", err, got.State)
	}
	checkFailed(t, env, "one resumed out of failed", 1)
	force(a, "dave")
	checkFailed(t, env, "failed again", 2)
	// Updates of failed sagas that keep the state change nothing.
	if _, err := env.pool.Exec(ctx, `UPDATE orch.sagas SET version = version + 1, updated_at = now() WHERE state = 'failed'`); err != nil {
		t.Fatal(err)
	}
	checkFailed(t, env, "failed sagas updated", 2)
	// A saga inserted failed (a copy, as a restore or a fill writes it).
	if _, err := env.pool.Exec(ctx, `INSERT INTO orch.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, current_step, data, steps, version, created_at, updated_at, finished_at)
SELECT gen_random_uuid(), type, definition_version, aggregate_id, 'copy', state, current_step, data, steps, version, created_at, updated_at, finished_at
FROM orch.sagas WHERE id = $1`, a); err != nil {
		t.Fatal(err)
	}
	checkFailed(t, env, "a failed saga inserted", 3)
	// Retention's delete of failed sagas, with their journal, in one
	// statement.
	if _, err := env.pool.Exec(ctx, `WITH victims AS (SELECT id FROM orch.sagas WHERE state = 'failed' AND id <> $1 FOR UPDATE),
j AS (DELETE FROM orch.journal WHERE saga_id IN (SELECT id FROM victims))
DELETE FROM orch.sagas WHERE id IN (SELECT id FROM victims)`, a); err != nil {
		t.Fatal(err)
	}
	checkFailed(t, env, "two failed sagas deleted", 1)
	// A transaction that fails a saga and rolls back leaves the count.
	tx, err := env.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE orch.sagas SET state = 'failed' WHERE state <> 'failed'`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	checkFailed(t, env, "a rolled back failure", 1)
	if _, err := env.pool.Exec(ctx, `TRUNCATE orch.sagas CASCADE`); err != nil {
		t.Fatal(err)
	}
	checkFailed(t, env, "after a truncate", 0)
	var rows int
	if err := env.pool.QueryRow(ctx, `SELECT count(*) FROM orch.failed_counts`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("failed_counts keeps %d rows after a truncate (%v)", rows, err)
	}
}
