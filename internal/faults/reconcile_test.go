package faults_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// The payment participant is down through the pivot's deadline and its
// queries: the sagas that reached the pivot fail. Once it is back, a
// reconciliation run finds them (failed_unknown_step), asks again through
// the one door (actor reconciler), and the answers settle them with
// nobody else acting; the next run finds nothing open. A sampled check of
// the finished sagas then finds a participant record that disagrees.
func TestReconcileRepairsFailedPivotsAndFindsDifferences(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: 6, seed: 42, override: quickPivot})
	ctx := testkit.Context(t, 3*time.Minute)
	e.run("orchestrator", e.service(orchestrator.DefaultRun).Run)
	e.runParticipants(e.participants(), orderapi.Payment)
	e.startAll(ctx)
	e.waitTerminal(settle)
	failed := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.sagas WHERE state = 'failed'`)
	if failed == 0 {
		t.Fatal("no saga failed at the pivot")
	}
	dry, err := e.engine.Reconcile(ctx, orchestrator.ReconcileOptions{DryRun: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if dry.ByKind[string(orchestrator.KindFailedUnknown)] != failed || dry.Repaired != 0 || dry.Open != 0 {
		t.Fatalf("dry run: %+v, want %d failed_unknown_step, nothing repaired or recorded", dry, failed)
	}
	// The payment participant comes back with every copy of the pivot
	// and query waiting in its topic.
	e.runParticipants(e.participants(), orderapi.Inventory, orderapi.Coupon, orderapi.Shipping, orderapi.Points)
	testkit.Eventually(t, settle, "the payment participant answered its backlog", func() (bool, error) {
		return e.count(`SELECT count(*) FROM `+e.schemas.Payment+`.outbox WHERE sent_at IS NULL`) == 0 &&
			e.count(`SELECT count(*) FROM `+e.schemas.Payment+`.barrier WHERE action = 'forward'`) >= failed, nil
	})
	rep, err := e.engine.Reconcile(ctx, orchestrator.ReconcileOptions{SampleRate: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Differences < failed || rep.Repaired < failed {
		t.Fatalf("first run: %d differences, %d repaired; want at least %d of each (the failed pivots): %+v", rep.Differences, rep.Repaired, failed, rep.List)
	}
	for _, d := range rep.List {
		if d.Kind == orchestrator.KindFailedUnknown && d.Repair != string(saga.ActionQuery) {
			t.Fatalf("failed pivot not repaired by a query: %+v", d)
		}
	}
	e.waitTerminal(settle)
	// The re-query of a pivot gets the step's short timeouts (200 ms, five
	// queries): on a loaded machine an answer can miss them and the saga
	// fails again, as it would in production; the next run asks again,
	// as the reconciler's cadence would.
	for pass := 2; ; pass++ {
		n := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.sagas WHERE state = 'failed'`)
		if n == 0 {
			break
		}
		if pass > 5 {
			t.Fatalf("%d sagas still failed after %d reconciler runs asked again", n, pass-1)
		}
		t.Logf("run %d: %d sagas failed again (their queries timed out); asking again", pass, n)
		if _, err := e.engine.Reconcile(ctx, orchestrator.ReconcileOptions{SampleRate: -1}, nil); err != nil {
			t.Fatal(err)
		}
		e.waitTerminal(settle)
	}
	if n := e.count(`SELECT count(DISTINCT saga_id) FROM `+e.schemas.Orchestrator+`.journal WHERE event = $1 AND actor = $2`, saga.JournalQueryAnswered, saga.ActorReconciler); n < failed {
		t.Fatalf("%d sagas journaled a query answered by the reconciler, want %d", n, failed)
	}
	e.checkInvariants(false)
	again, err := e.engine.Reconcile(ctx, orchestrator.ReconcileOptions{SampleRate: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.Differences != 0 || again.Open != 0 {
		t.Fatalf("second run: %d differences, %d open, want none: %+v", again.Differences, again.Open, again.List)
	}

	// Tamper with one participant's record of a completed saga: its
	// inventory reservation row is gone, so the check answers closed.
	var victim string
	// One no check has asked about yet (the flow check samples finished
	// sagas in every run; a saga is checked once).
	if err := e.check.QueryRow(ctx, `SELECT id::text FROM `+e.schemas.Orchestrator+`.sagas s WHERE state = 'completed'
  AND NOT EXISTS (SELECT 1 FROM `+e.schemas.Orchestrator+`.journal j WHERE j.saga_id = s.id AND j.event = $1) LIMIT 1`, saga.JournalCheckSent).Scan(&victim); err != nil {
		t.Fatal(err)
	}
	if _, err := e.check.Exec(ctx, `DELETE FROM `+e.schemas.Inventory+`.barrier WHERE saga_id = $1 AND step = $2`, victim, orderapi.StepReserveInventory); err != nil {
		t.Fatal(err)
	}
	checks, err := e.engine.Reconcile(ctx, orchestrator.ReconcileOptions{SampleRate: 1, FlowSampleRate: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if checks.Checked == 0 {
		t.Fatalf("no finished saga was checked: %+v", checks)
	}
	// A check asks about every step of its saga: wait for the victim's
	// difference itself, not just for as many answers as sagas checked
	// (the other sagas' agreements can make up that count first).
	testkit.Eventually(t, settle, "the check answers journaled, the victim's difference among them", func() (bool, error) {
		return e.count(`SELECT count(*) FROM `+e.schemas.Orchestrator+`.journal WHERE event IN ($1, $2)`, saga.JournalCheckAgrees, saga.JournalDifference) >= checks.Checked &&
			e.count(`SELECT count(*) FROM `+e.schemas.Orchestrator+`.journal WHERE event = $1 AND saga_id = $2`, saga.JournalDifference, victim) > 0, nil
	})
	found, err := e.engine.Reconcile(ctx, orchestrator.ReconcileOptions{SampleRate: -1, FlowSampleRate: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The participant has no record of a command it answered: the flow
	// check's kind.
	if found.ByKind[string(orchestrator.KindCommandNotRecorded)] != 1 || found.Open != 1 {
		var dbg []string
		rows, _ := e.check.Query(ctx, `SELECT j.id::text || ' ' || j.at::text || ' ' || j.event || ' ' || j.ignored::text || ' ' || j.from_state || '->' || j.to_state || ' ' || coalesce(j.step, '') || ' | saga updated ' || s.updated_at::text || ' v' || s.version::text FROM `+e.schemas.Orchestrator+`.journal j JOIN `+e.schemas.Orchestrator+`.sagas s ON s.id = j.saga_id WHERE j.saga_id = $1 ORDER BY j.id`, victim)
		for rows != nil && rows.Next() {
			var l string
			_ = rows.Scan(&l)
			dbg = append(dbg, l)
		}
		t.Fatalf("after the checks: %+v, want the one tampered record open; the victim's journal:\n%s", found, strings.Join(dbg, "\n"))
	}
	open, err := e.engine.OpenDiscrepancies(ctx, 10)
	if err != nil || len(open) != 1 || open[0].SagaID.String() != victim || open[0].Step != orderapi.StepReserveInventory {
		t.Fatalf("open discrepancies %+v (%v), want the victim's reserve-inventory", open, err)
	}
	if err := e.engine.ResolveDiscrepancy(ctx, open[0].ID, "dana", "restored the reservation by hand"); err != nil {
		t.Fatal(err)
	}
	if err := e.engine.ResolveDiscrepancy(ctx, open[0].ID, "dana", "twice"); err == nil {
		t.Fatal("a resolved discrepancy was resolved again")
	}
	if rest, _ := e.engine.OpenDiscrepancies(ctx, 10); len(rest) != 0 {
		t.Fatalf("still open after the resolve: %+v", rest)
	}
}
