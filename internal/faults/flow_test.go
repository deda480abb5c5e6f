package faults_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// Flow reconciliation (issue 26): a command the inventory participant
// consumed and answered is deleted by hand from its inbox and its barrier,
// as if consumed and lost. The next reconciliation's flow check asks the
// participant about the saga's commands; its answer (no record) is found
// by the run after as a flow_command_not_recorded difference on that
// saga's step, open until someone resolves it.
func TestFlowReconcileFindsALostCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: 4, seed: 7})
	ctx := testkit.Context(t, 2*time.Minute)
	e.run("orchestrator", e.service(orchestrator.DefaultRun).Run)
	e.runParticipants(e.participants())
	e.startAll(ctx)
	e.waitTerminal(settle)

	var victim uuid.UUID
	if err := e.check.QueryRow(ctx, `SELECT id FROM `+e.schemas.Orchestrator+`.sagas WHERE state = 'completed' ORDER BY created_at LIMIT 1`).Scan(&victim); err != nil {
		t.Fatalf("no completed saga: %v", err)
	}
	in, _, err := e.engine.Get(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	step := in.Steps[0]
	if step.Name != orderapi.StepReserveInventory || step.State != saga.StepSucceeded {
		t.Fatalf("first step %s is %s, want reserve-inventory succeeded", step.Name, step.State)
	}
	cmd := in.CommandID(step.Name, message.Forward, step.Attempts)
	tag, err := e.check.Exec(ctx, `DELETE FROM `+e.schemas.Inventory+`.inbox WHERE message_id = $1`, cmd)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("delete the command %s from the participant's inbox: %v rows, %v", cmd, tag.RowsAffected(), err)
	}
	tag, err = e.check.Exec(ctx, `DELETE FROM `+e.schemas.Inventory+`.barrier WHERE saga_id = $1 AND step = $2`, victim, step.Name)
	if err != nil || tag.RowsAffected() == 0 {
		t.Fatalf("delete the participant's barrier of the command: %v rows, %v", tag.RowsAffected(), err)
	}

	// Every finished saga of the window is sampled (rate 1); the barrier
	// sample is off so the flow check alone asks.
	run, err := e.engine.Reconcile(ctx, orchestrator.ReconcileOptions{SampleRate: -1, FlowSampleRate: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if run.FlowChecked == 0 || run.Differences != 0 {
		t.Fatalf("first run: %+v; want flow checks sent and nothing found yet", run)
	}
	testkit.Eventually(t, settle, "the participant's answers journaled, the victim's difference among them", func() (bool, error) {
		return e.count(`SELECT count(*) FROM `+e.schemas.Orchestrator+`.journal WHERE event = $1 AND saga_id = $2`, saga.JournalDifference, victim) > 0, nil
	})
	found, err := e.engine.Reconcile(ctx, orchestrator.ReconcileOptions{SampleRate: -1, FlowSampleRate: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if found.ByKind[string(orchestrator.KindCommandNotRecorded)] != 1 || found.Open != 1 {
		t.Fatalf("second run: %+v; want the one lost command open as %s", found, orchestrator.KindCommandNotRecorded)
	}
	open, err := e.engine.OpenDiscrepancies(ctx, 10)
	if err != nil || len(open) != 1 || open[0].SagaID != victim || open[0].Step != step.Name || open[0].Kind != orchestrator.KindCommandNotRecorded {
		t.Fatalf("open discrepancies %+v (%v); want the victim's %s", open, err, step.Name)
	}
}
