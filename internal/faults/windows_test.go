package faults_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

const (
	orders  = 12
	settle  = 60 * time.Second
	noRelay = "replies+timers"
)

// Row: crash after state commit, before publish. The orchestrator runs
// without its relay, so the first commands are committed in its outbox and
// never published; it is then stopped (the crash) and a new orchestrator
// process on a new pool publishes them.
func TestWindowCrashAfterStateCommitBeforePublish(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: orders, seed: 11})
	ctx := testkit.Context(t, 2*time.Minute)
	first := e.run("orchestrator without relay", e.service(orchestrator.RunSet{Replies: true, Timers: true}).Run)
	parts := e.run("participants", e.participants().Run)
	e.startAll(ctx)
	if n := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.outbox WHERE sent_at IS NULL`); n < orders {
		t.Fatalf("%d unsent commands after start, want %d", n, orders)
	}
	first.stop(t) // crash: the commands were never published
	if n := e.count(`SELECT count(*) FROM ` + e.schemas.Inventory + `.barrier`); n != 0 {
		t.Fatalf("participant executed %d commands that were never published", n)
	}
	e.run("orchestrator restarted", e.service(orchestrator.DefaultRun).Run)
	e.waitTerminal(settle)
	e.checkInvariants(false)
	_ = parts
}

// Row: crash after publish, before mark sent. Everything runs to the end;
// then both sides' outbox rows are marked unsent, as a relay that
// published and crashed before marking leaves them, and processes restart:
// every command and reply is published again and the inboxes drop the
// copies (no effect, no transition).
func TestWindowCrashAfterPublishBeforeMark(t *testing.T) {
	t.Parallel()
	// The env's relays keep sent rows, so that every record can be made
	// unsent again below: the window after Kafka acknowledged and before the
	// delete (or mark) committed, for all of them at once. The crash itself
	// between publish and delete, in both modes, is
	// TestCrashBetweenPublishAndMarkRepublishes (relay).
	e := newEnv(t, envOpts{orders: orders, seed: 12})
	ctx := testkit.Context(t, 2*time.Minute)
	o, p := e.runAll()
	e.startAll(ctx)
	e.waitTerminal(settle)
	e.waitOutboxesDrained()
	o.stop(t)
	p.stop(t)
	before := e.checkInvariants(false)
	barrier := e.barrierRows()
	journal := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.journal`)
	var rows int
	for _, s := range e.allSchemas() {
		tag, err := e.check.Exec(ctx, `UPDATE `+s+`.outbox SET sent_at = NULL`)
		if err != nil {
			t.Fatal(err)
		}
		rows += int(tag.RowsAffected())
		// Outcome records are published again too, but nothing here
		// consumes them: they are not among the copies an inbox drops.
		rows -= e.count(`SELECT count(*) FROM `+s+`.outbox WHERE topic = $1`, orchestrator.OutcomeTopicDefault)
	}
	dups := e.metric("sagaflow_inbox_duplicates_total")
	e.runAll()
	e.waitOutboxesDrained()
	testkit.Eventually(t, settle, "every re-published record dropped as a duplicate", func() (bool, error) {
		return e.metric("sagaflow_inbox_duplicates_total")-dups >= float64(rows), nil
	})
	after := e.checkInvariants(false)
	if after.Completed != before.Completed || after.Compensated != before.Compensated {
		t.Fatalf("outcomes changed by re-publishing: before %+v after %+v", before, after)
	}
	if got := e.barrierRows(); got != barrier {
		t.Fatalf("barrier rows %d after re-publish, %d before: a command executed twice", got, barrier)
	}
	if got := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.journal`); got != journal {
		t.Fatalf("journal grew from %d to %d on re-published replies", journal, got)
	}
}

func (e *env) barrierRows() int {
	n := 0
	for _, s := range e.allSchemas()[1:] {
		n += e.count(`SELECT count(*) FROM ` + s + `.barrier`)
	}
	return n
}

// Row: participant crash after its commit, before its reply is published.
// The participants run without their reply relays: commands execute and the
// replies stay in their outboxes; then they stop (crash) and restart in
// full: the replies are sent and the sagas finish, each command executed
// once.
func TestWindowParticipantCrashBeforeReplyPublished(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: orders, seed: 13})
	ctx := testkit.Context(t, 2*time.Minute)
	e.run("orchestrator", e.service(orchestrator.DefaultRun).Run)
	set := e.participants()
	half := e.run("participants without relay", e.inboxOnly(set, e.pool()))
	e.startAll(ctx)
	testkit.Eventually(t, settle, "first step executed for every order, replies unsent", func() (bool, error) {
		return e.count(`SELECT count(*) FROM `+e.schemas.Inventory+`.barrier`) == orders, nil
	})
	if n := e.count(`SELECT count(*) FROM ` + e.schemas.Inventory + `.outbox WHERE sent_at IS NULL`); n != orders {
		t.Fatalf("%d unsent replies, want %d", n, orders)
	}
	half.stop(t) // crash before the replies are published
	if n := e.count(`SELECT count(*) FROM `+e.schemas.Orchestrator+`.sagas WHERE current_step <> $1 OR state <> 'running'`, orderapi.StepReserveInventory); n != 0 {
		t.Fatalf("%d sagas moved without a reply", n)
	}
	e.run("participants restarted", e.participants().Run)
	e.waitTerminal(settle)
	e.checkInvariants(false)
}

// Row: reply consumed twice / offset commit lost. After every saga ends,
// every reply ever produced is produced again: the orchestrator's inbox
// drops each copy and no saga changes.
func TestWindowReplyConsumedTwice(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: orders, seed: 14})
	ctx := testkit.Context(t, 2*time.Minute)
	e.runAll()
	e.startAll(ctx)
	e.waitTerminal(settle)
	e.checkInvariants(false)
	journal := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.journal`)
	versions := e.count(`SELECT coalesce(sum(version), 0)::int FROM ` + e.schemas.Orchestrator + `.sagas`)
	replies := e.readAll(e.replies, orders)
	dups := e.metric("sagaflow_inbox_duplicates_total")
	e.produce(e.replies, replies...)
	testkit.Eventually(t, settle, "every replayed reply dropped as a duplicate", func() (bool, error) {
		return e.metric("sagaflow_inbox_duplicates_total")-dups >= float64(len(replies)), nil
	})
	e.checkInvariants(false)
	if got := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.journal`); got != journal {
		t.Fatalf("journal grew from %d to %d on %d duplicate replies", journal, got, len(replies))
	}
	if got := e.count(`SELECT coalesce(sum(version), 0)::int FROM ` + e.schemas.Orchestrator + `.sagas`); got != versions {
		t.Fatalf("saga versions moved (%d -> %d) on duplicate replies", versions, got)
	}
}

// Row: two starts with the same idempotency key. Many goroutines on two
// engines (two pools) start the same order at once: one saga exists, every
// caller gets its id, exactly one was told it created it.
func TestWindowTwoStartsSameKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: 1, seed: 15})
	ctx := testkit.Context(t, time.Minute)
	engines := []*orchestrator.Engine{e.engine, e.service(orchestrator.DefaultRun).Engine()}
	o := e.plan.Orders[0]
	const n = 16
	var wg sync.WaitGroup
	ids := make([]uuid.UUID, n)
	created := make([]bool, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			in, c, err := engines[i%2].Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: o.OrderID, AggregateID: o.OrderID, Data: o})
			ids[i], created[i], errs[i] = in.ID, c, err
		}()
	}
	close(start)
	wg.Wait()
	nCreated := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("start %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("start %d got saga %s, start 0 got %s", i, ids[i], ids[0])
		}
		if created[i] {
			nCreated++
		}
	}
	if nCreated != 1 {
		t.Fatalf("%d callers were told they created the saga, want 1", nCreated)
	}
	if got := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.sagas`); got != 1 {
		t.Fatalf("%d sagas for one idempotency key", got)
	}
	if got := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.outbox`); got != 1 {
		t.Fatalf("%d first commands enqueued for one saga, want 1", got)
	}
	e.runAll()
	e.waitTerminal(settle)
	e.checkInvariants(false)
}

// runParticipants runs the reference participants except those named in
// skip, each with its own Run.
func (e *env) runParticipants(set interface {
	Participants() []*participants.Participant
}, skip ...string) {
	for _, p := range set.Participants() {
		if slices.Contains(skip, p.Name()) {
			continue
		}
		e.run("participant "+p.Name(), p.Run)
	}
}

// outboxRow is an orchestrator outbox row read back as the record it is.
type outboxRow struct {
	id  int64
	msg kafka.Message
	cmd message.Command
}

func (e *env) commandsIn(topic string) []outboxRow {
	e.t.Helper()
	rows, err := e.check.Query(context.Background(), `SELECT id, key, value, headers FROM `+e.schemas.Orchestrator+`.outbox WHERE topic = $1 ORDER BY id`, topic)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []outboxRow
	for rows.Next() {
		var r outboxRow
		var key string
		var hdr map[string]string
		if err := rows.Scan(&r.id, &key, &r.msg.Value, &hdr); err != nil {
			e.t.Fatal(err)
		}
		r.msg.Key = []byte(key)
		for k, v := range hdr {
			r.msg.Headers = append(r.msg.Headers, kafka.Header{Key: k, Value: []byte(v)})
		}
		if r.cmd, err = message.DecodeCommand(r.msg.Value); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// sagasWithAction counts the sagas with at least one a command of step.
func sagasWithAction(rows []outboxRow, step string, a message.Action) int {
	seen := map[uuid.UUID]bool{}
	for _, r := range rows {
		if r.cmd.Step == step && r.cmd.Action == a {
			seen[r.cmd.SagaID] = true
		}
	}
	return len(seen)
}

func countAction(rows []outboxRow, step string, a message.Action) int {
	n := 0
	for _, r := range rows {
		if r.cmd.Step == step && r.cmd.Action == a {
			n++
		}
	}
	return n
}

// Row: command timed out but actually executed, before the pivot. The
// inventory participant is down while reserve-inventory times out, so the
// saga compensates the step blindly; when the participant comes back it
// finds the forward and then its compensation on the topic: the late
// success is undone by the compensation already sent, the late reply is
// journaled and ignored, stock is conserved.
func TestWindowCommandTimedOutButExecuted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: 6, seed: 16, override: func(r *saga.Registry) error {
		return r.Override(orderapi.SagaType, orderapi.StepReserveInventory, saga.StepOverride{Timeout: 300 * time.Millisecond, Deadline: 300 * time.Millisecond, Retry: saga.RetryPolicy{MaxAttempts: 1}})
	}})
	ctx := testkit.Context(t, 2*time.Minute)
	e.run("orchestrator", e.service(orchestrator.DefaultRun).Run)
	set := e.participants()
	e.runParticipants(set, orderapi.Inventory)
	e.startAll(ctx)
	topic := e.prefix + orderapi.Inventory + ".commands"
	testkit.Eventually(t, settle, "every saga's reserve-inventory given up and its compensation sent", func() (bool, error) {
		// Count sagas, not rows: a compensation the absent participant
		// does not answer is re-sent, so rows alone would let a saga still
		// querying its step through (and the returning participant would
		// then answer its query with the executed forward).
		return sagasWithAction(e.commandsIn(topic), orderapi.StepReserveInventory, message.Compensate) == 6, nil
	})
	late := e.metric("sagaflow_late_replies_total")
	e.runParticipants(e.participants(), orderapi.Coupon, orderapi.Payment, orderapi.Shipping, orderapi.Points)
	e.waitTerminal(settle)
	rep := e.checkInvariants(false)
	if rep.Compensated != 6 {
		t.Fatalf("report %+v: want all 6 compensated", rep)
	}
	// Every forward executed (late: none was closed by an empty
	// compensation), and every successful one was undone by the
	// compensation that followed it.
	if n := e.count(`SELECT count(*) FROM ` + e.schemas.Inventory + `.barrier WHERE action = 'forward' AND NOT closed`); n != 6 {
		t.Fatalf("%d late forwards executed, want 6", n)
	}
	ok := e.count(`SELECT count(*) FROM ` + e.schemas.Inventory + `.barrier WHERE action = 'forward' AND outcome = 'success'`)
	undone := e.count(`SELECT count(*) FROM ` + e.schemas.Inventory + `.barrier b WHERE action = 'forward' AND outcome = 'success'
		AND EXISTS (SELECT 1 FROM ` + e.schemas.Inventory + `.barrier c WHERE c.saga_id = b.saga_id AND c.action = 'compensate' AND c.outcome = 'success')`)
	if ok == 0 || undone != ok {
		t.Fatalf("%d of %d late successful forwards undone by their compensation", undone, ok)
	}
	testkit.Eventually(t, settle, "late success replies journaled as late", func() (bool, error) {
		return e.count(`SELECT count(*) FROM `+e.schemas.Orchestrator+`.journal WHERE ignored AND step = $1 AND action = 'forward'`, orderapi.StepReserveInventory) >= 6, nil
	})
	if e.metric("sagaflow_late_replies_total") < late+6 {
		t.Fatalf("late replies metric %v, want >= %v", e.metric("sagaflow_late_replies_total"), late+6)
	}
}

// Row: command timed out but actually executed, at the pivot. The payment
// participant is down while charge-payment times out and is re-sent; when
// it comes back it executes the first copy and answers every other copy
// with the recorded outcome: one charge per saga, nothing compensated after
// the pivot.
func TestWindowPivotTimedOutButExecuted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: 6, seed: 17, override: func(r *saga.Registry) error {
		return r.Override(orderapi.SagaType, orderapi.StepChargePayment, saga.StepOverride{Timeout: 200 * time.Millisecond,
			Retry: saga.RetryPolicy{InitialInterval: 50 * time.Millisecond, MaxInterval: 100 * time.Millisecond, MaxAttempts: 100}})
	}})
	ctx := testkit.Context(t, 2*time.Minute)
	e.run("orchestrator", e.service(orchestrator.DefaultRun).Run)
	e.runParticipants(e.participants(), orderapi.Payment)
	e.startAll(ctx)
	topic := e.prefix + orderapi.Payment + ".commands"
	testkit.Eventually(t, settle, "pivot re-sent at least once for every saga that reached it", func() (bool, error) {
		// One statement, one snapshot: read apart, a saga could move to
		// the pivot between the two counts and be missed by both.
		var at, open int
		if err := e.check.QueryRow(ctx, `SELECT count(*) FILTER (WHERE current_step = $1),
  count(*) FILTER (WHERE current_step IN ('reserve-inventory', 'lock-coupon'))
FROM `+e.schemas.Orchestrator+`.sagas WHERE state = 'running'`, orderapi.StepChargePayment).Scan(&at, &open); err != nil {
			return false, err
		}
		// Read after the counts: sends only grow.
		sent := countAction(e.commandsIn(topic), orderapi.StepChargePayment, message.Forward)
		return at > 0 && open == 0 && sent >= 2*at, nil
	})
	sent := countAction(e.commandsIn(topic), orderapi.StepChargePayment, message.Forward)
	e.runParticipants(e.participants(), orderapi.Inventory, orderapi.Coupon, orderapi.Shipping, orderapi.Points)
	e.waitTerminal(settle)
	rep := e.checkInvariants(false)
	charged := e.count(`SELECT count(*) FROM ` + e.schemas.Payment + `.barrier WHERE action = 'forward'`)
	if charged == 0 || charged > rep.Sagas {
		t.Fatalf("%d pivot executions for %d sagas (sent %d copies)", charged, rep.Sagas, sent)
	}
	if sent <= charged {
		t.Fatalf("pivot sent %d times for %d executions: no re-send happened", sent, charged)
	}
}

// Row: compensation arrives before its forward. The orchestrator's relay is
// held back while reserve-inventory times out; the compensation command is
// delivered first (taken from the outbox and produced by hand), the
// participant records an empty compensation, and when the relay then
// publishes the forward it is refused (reason "compensated"): no stock
// stays reserved.
func TestWindowCompensationBeforeForward(t *testing.T) {
	t.Parallel()
	const n = 4
	e := newEnv(t, envOpts{orders: n, seed: 18, override: func(r *saga.Registry) error {
		return r.Override(orderapi.SagaType, orderapi.StepReserveInventory, saga.StepOverride{Timeout: 200 * time.Millisecond, Deadline: 200 * time.Millisecond, Retry: saga.RetryPolicy{MaxAttempts: 1}})
	}})
	ctx := testkit.Context(t, 2*time.Minute)
	e.run("orchestrator without relay", e.service(orchestrator.RunSet{Replies: true, Timers: true}).Run)
	e.run("participants", e.participants().Run)
	e.startAll(ctx)
	topic := e.prefix + orderapi.Inventory + ".commands"
	// The first compensation of every saga (a slow participant may see
	// re-sends enqueued too: one per saga is produced).
	var comps []kafka.Message
	testkit.Eventually(t, settle, "compensations enqueued", func() (bool, error) {
		comps = comps[:0]
		seen := map[uuid.UUID]bool{}
		for _, r := range e.commandsIn(topic) {
			if r.cmd.Action == message.Compensate && r.cmd.Attempt == 1 && !seen[r.cmd.SagaID] {
				seen[r.cmd.SagaID] = true
				comps = append(comps, r.msg)
			}
		}
		return len(comps) == n, nil
	})
	e.produce(topic, comps...)
	// The saga awaits only its latest compensation: if it re-sent one
	// before the participant's answer to the first came back, that answer
	// is ignored. The re-sends enqueued meanwhile are delivered too (still
	// before any forward), and the barrier answers each with the recorded
	// compensation, until every saga is compensated.
	produced := map[uuid.UUID]bool{}
	for _, m := range comps {
		c, err := message.DecodeCommand(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		produced[c.MessageID] = true
	}
	testkit.Eventually(t, settle, "sagas compensated with their forwards held back", func() (bool, error) {
		if e.count(`SELECT count(*) FROM `+e.schemas.Orchestrator+`.sagas WHERE state IN ('running', 'compensating')`) == 0 {
			return true, nil
		}
		var more []kafka.Message
		for _, r := range e.commandsIn(topic) {
			if r.cmd.Action == message.Compensate && !produced[r.cmd.MessageID] {
				produced[r.cmd.MessageID] = true
				more = append(more, r.msg)
			}
		}
		if len(more) > 0 {
			e.produce(topic, more...)
		}
		return false, nil
	})
	e.waitTerminal(settle)
	if got := e.count(`SELECT count(*) FROM ` + e.schemas.Inventory + `.barrier WHERE action = 'forward' AND closed`); got != n {
		t.Fatalf("%d forwards closed by an empty compensation, want %d", got, n)
	}
	var forwards []uuid.UUID
	for _, r := range e.commandsIn(topic) {
		if r.cmd.Action == message.Forward {
			forwards = append(forwards, r.cmd.MessageID)
		}
	}
	e.run("relay", e.service(orchestrator.RunSet{Relay: true}).Run)
	testkit.Eventually(t, settle, "late forwards delivered to the participant", func() (bool, error) {
		return e.count(`SELECT count(*) FROM `+e.schemas.Inventory+`.inbox WHERE message_id = ANY($1)`, forwards) == n, nil
	})
	rep := e.checkInvariants(false)
	if rep.Compensated != n {
		t.Fatalf("report %+v: want %d compensated", rep, n)
	}
	if got := e.count(`SELECT count(*) FROM ` + e.schemas.Inventory + `.barrier WHERE action = 'forward' AND outcome = 'success'`); got != 0 {
		t.Fatalf("%d forwards executed after their compensation", got)
	}
}

// Row: two orchestrator replicas touch one saga. Two services share the
// database and the consumer group; one is killed (context cancelled) while
// sagas flow. No transition is applied twice, none is stuck.
func TestWindowTwoReplicasOneSaga(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: 40, seed: 19})
	ctx := testkit.Context(t, 2*time.Minute)
	a := e.run("replica a", e.service(orchestrator.DefaultRun).Run)
	e.run("replica b", e.service(orchestrator.DefaultRun).Run)
	e.run("participants", e.participants().Run)
	e.startAll(ctx)
	testkit.Eventually(t, settle, "some sagas finished", func() (bool, error) {
		return e.count(`SELECT count(*) FROM `+e.schemas.Orchestrator+`.sagas WHERE state NOT IN ('running', 'compensating')`) >= 5, nil
	})
	a.stop(t) // replica a dies mid-run
	if e.count(`SELECT count(*) FROM `+e.schemas.Orchestrator+`.sagas WHERE state IN ('running', 'compensating')`) == 0 {
		t.Log("every saga finished before the kill; the kill exercised only shutdown")
	}
	e.waitTerminal(settle)
	e.checkInvariants(false)
	// A saga version is written once: the journal's transitions per saga
	// equal the saga's final version minus its start.
	if n := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.sagas s WHERE (SELECT count(*) FROM ` + e.schemas.Orchestrator + `.journal j WHERE j.saga_id = s.id AND NOT j.ignored) > s.version`); n != 0 {
		t.Fatalf("%d sagas have more journaled transitions than versions", n)
	}
}
