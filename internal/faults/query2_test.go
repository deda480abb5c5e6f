package faults_test

import (
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// quickPivot gives charge-payment short timeouts and deadline, so a pivot
// without answers is given up (and queried) within seconds.
func quickPivot(r *saga.Registry) error {
	return r.Override(orderapi.SagaType, orderapi.StepChargePayment, saga.StepOverride{Timeout: 200 * time.Millisecond, Deadline: time.Second,
		Retry: saga.RetryPolicy{InitialInterval: 30 * time.Millisecond, MaxInterval: 60 * time.Millisecond, MaxAttempts: 3}})
}

// dropRows installs a trigger on schema's outbox that throws away, before
// insert, the records of step with action (decoded from the value): lost
// messages, as if the network ate them after the writer committed.
func (e *env) dropRows(schema, step, action string) {
	e.t.Helper()
	ctx := testkit.Context(e.t, 10*time.Second)
	q := `CREATE FUNCTION ` + schema + `.drop_lost() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF convert_from(NEW.value, 'UTF8')::jsonb->>'step' = '` + step + `' AND convert_from(NEW.value, 'UTF8')::jsonb->>'action' = '` + action + `' THEN
    RETURN NULL;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER drop_lost BEFORE INSERT ON ` + schema + `.outbox FOR EACH ROW EXECUTE FUNCTION ` + schema + `.drop_lost();`
	if _, err := e.check.Exec(ctx, q); err != nil {
		e.t.Fatal(err)
	}
}

// queriedBy counts the sagas of ids whose journal has a query answered by
// the reconciler with the reason given.
func (e *env) queriedBy(reason string) int {
	return e.count(`SELECT count(DISTINCT saga_id) FROM `+e.schemas.Orchestrator+`.journal
WHERE event = $1 AND actor = $2 AND step = $3 AND reason = $4`, saga.JournalQueryAnswered, saga.ActorReconciler, orderapi.StepChargePayment, reason)
}

// Every answer of the payment participant to a charge is lost (its reply
// never leaves its outbox), but it recorded the outcome. The pivot is given
// up at its deadline, the orchestrator queries, and the recorded outcome
// settles each saga with nobody acting: a done charge completes forward, a
// declined one compensates.
func TestQuerySettlesAPivotWhoseAnswersWereLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: 8, seed: 5, override: quickPivot})
	e.dropRows(e.schemas.Payment, orderapi.StepChargePayment, "forward")
	ctx := testkit.Context(t, 2*time.Minute)
	e.run("orchestrator", e.service(orchestrator.DefaultRun).Run)
	e.runParticipants(e.participants())
	e.startAll(ctx)
	e.waitTerminal(settle)
	e.logFailedJournal()
	e.checkInvariants(false)
	e.endsReported()
	charged := e.count(`SELECT count(*) FROM ` + e.schemas.Payment + `.barrier WHERE action = 'forward' AND outcome = 'success'`)
	declined := e.count(`SELECT count(*) FROM ` + e.schemas.Payment + `.barrier WHERE action = 'forward' AND outcome = 'failure' AND NOT closed`)
	if charged == 0 {
		t.Fatal("no charge was recorded: the test did not reach the pivot")
	}
	if n := e.count(`SELECT count(*) FROM ` + e.schemas.Payment + `.outbox WHERE convert_from(value, 'UTF8')::jsonb->>'action' = 'forward'`); n != 0 {
		t.Fatalf("%d forward replies left the payment participant's outbox; the trigger should have lost them all", n)
	}
	completed := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.sagas s WHERE state = 'completed'
AND EXISTS (SELECT 1 FROM ` + e.schemas.Payment + `.barrier b WHERE b.saga_id = s.id AND b.action = 'forward' AND b.outcome = 'success')`)
	if completed != charged {
		t.Fatalf("%d of %d charged sagas completed, want all (settled by the query)", completed, charged)
	}
	if got := e.queriedBy("participant recorded done"); got != charged {
		t.Fatalf("%d sagas journaled 'query answered: done' by the reconciler, want %d", got, charged)
	}
	if got := e.queriedBy("participant recorded failed"); got != declined {
		t.Fatalf("%d sagas journaled 'query answered: failed', want the %d declined", got, declined)
	}
	if n := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.sagas WHERE state = 'failed'`); n != 0 {
		t.Fatalf("%d sagas failed; every pivot was settled by its participant's record", n)
	}
	if n := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.journal WHERE event LIKE 'operator %'`); n != 0 {
		t.Fatalf("%d operator actions journaled; nobody should have acted", n)
	}
}

// Every charge command is lost before it reaches the payment participant,
// which so records nothing. The query finds nothing, closes the barrier
// (a charge arriving later would be refused) and the saga compensates.
func TestQueryClosesAPivotThatNeverArrived(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: 6, seed: 9, override: quickPivot})
	e.dropRows(e.schemas.Orchestrator, orderapi.StepChargePayment, "forward")
	ctx := testkit.Context(t, 2*time.Minute)
	e.run("orchestrator", e.service(orchestrator.DefaultRun).Run)
	e.runParticipants(e.participants())
	e.startAll(ctx)
	e.waitTerminal(settle)
	e.logFailedJournal()
	e.checkInvariants(false)
	closed := e.count(`SELECT count(*) FROM ` + e.schemas.Payment + `.barrier WHERE action = 'forward' AND closed AND reason = 'closed_by_query'`)
	if closed == 0 {
		t.Fatal("no pivot was closed by a query: the test did not reach the pivot")
	}
	if n := e.count(`SELECT count(*) FROM ` + e.schemas.Payment + `.barrier WHERE action = 'forward' AND NOT closed`); n != 0 {
		t.Fatalf("%d charges recorded though every charge command was lost", n)
	}
	compensated := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.sagas s WHERE state = 'compensated'
AND EXISTS (SELECT 1 FROM ` + e.schemas.Payment + `.barrier b WHERE b.saga_id = s.id AND b.closed)`)
	if compensated != closed {
		t.Fatalf("%d of %d sagas whose pivot the query closed ended compensated, want all", compensated, closed)
	}
	if got := e.queriedBy("participant recorded closed"); got != closed {
		t.Fatalf("%d sagas journaled 'query answered: closed' by the reconciler, want %d", got, closed)
	}
	if n := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.sagas WHERE state = 'failed'`); n != 0 {
		t.Fatalf("%d sagas failed; the participant's record (nothing) settles them", n)
	}
}

// logFailedJournal logs the journal of one failed saga, if any, to explain
// a failure.
func (e *env) logFailedJournal() { e.logJournalOf(`state = 'failed'`) }

// logJournalOf logs the steps and journal of one saga matching where.
func (e *env) logJournalOf(where string) {
	e.t.Helper()
	ctx := testkit.Context(e.t, 10*time.Second)
	var steps string
	if err := e.check.QueryRow(ctx, `SELECT steps::text FROM `+e.schemas.Orchestrator+`.sagas WHERE `+where+` LIMIT 1`).Scan(&steps); err != nil {
		return
	}
	e.t.Logf("saga steps: %s", steps)
	rows, err := e.check.Query(ctx, `SELECT j.event, j.step, j.action, j.actor, j.reason FROM `+e.schemas.Orchestrator+`.journal j
WHERE j.saga_id = (SELECT id FROM `+e.schemas.Orchestrator+`.sagas WHERE `+where+` LIMIT 1) ORDER BY j.id`)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var ev, step, action, actor, reason string
		if err := rows.Scan(&ev, &step, &action, &actor, &reason); err != nil {
			e.t.Fatal(err)
		}
		e.t.Logf("journal: %s %s %s %s %s", ev, step, action, actor, reason)
	}
}
