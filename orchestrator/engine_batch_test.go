package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

func countRows(t *testing.T, env *engineEnv, q string) int {
	t.Helper()
	var n int
	if err := env.pool.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// applyAll applies rs in a transaction of its own; a refused reply is an
// error.
func applyAll(ctx context.Context, env *engineEnv, eng *orchestrator.Engine, rs ...message.Reply) error {
	return pgx.BeginFunc(ctx, env.pool, func(tx pgx.Tx) error {
		refused, err := eng.ApplyReplies(ctx, tx, rs)
		return errors.Join(append(refused, err)...)
	})
}

func successReply(c message.Command) message.Reply {
	return message.Reply{MessageID: uuid.New(), InReplyTo: c.MessageID, SagaID: c.SagaID, Step: c.Step, Action: c.Action,
		Outcome: message.Success, Payload: json.RawMessage(`{"reservation_id":"r"}`)}
}

// A batch moves every saga as ApplyReply would, one step each; a second copy
// of a reply in the same batch sees the first's effect and is journaled late.
func TestApplyRepliesMovesEachSagaOnceAndJournalsLateCopies(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	var ids []uuid.UUID
	for _, k := range []string{"a", "b", "c"} {
		in, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: k, AggregateID: "o-" + k, Data: order("o-" + k)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
	}
	cmds := pendingCommands(t, env)
	if len(cmds) != 3 {
		t.Fatalf("%d commands after 3 starts, want 3", len(cmds))
	}
	var rs []message.Reply
	for _, c := range cmds {
		rs = append(rs, successReply(c))
	}
	rs = append(rs, successReply(cmds[0])) // a second copy for saga a
	journalBefore := countRows(t, env, `SELECT count(*) FROM orch.journal`)
	if err := applyAll(ctx, env, env.eng, rs...); err != nil {
		t.Fatalf("ApplyReplies: %v", err)
	}
	for _, id := range ids {
		in, journal := get(t, env, id)
		if in.State != saga.Running || in.CurrentStep() != orderapi.StepLockCoupon || in.Version != 2 {
			t.Fatalf("saga %s: state %s step %q version %d; want running at %s, version 2", id, in.State, in.CurrentStep(), in.Version, orderapi.StepLockCoupon)
		}
		succeeded, late := 0, 0
		for _, j := range journal {
			if j.Event == saga.JournalStepSucceeded {
				succeeded++
			}
			if j.Ignored {
				late++
			}
		}
		wantLate := 0
		if id == ids[0] {
			wantLate = 1
		}
		if succeeded != 1 || late != wantLate {
			t.Fatalf("saga %s journal: %d step-succeeded, %d ignored; want 1 and %d", id, succeeded, late, wantLate)
		}
	}
	if got := countRows(t, env, `SELECT count(*) FROM orch.journal`) - journalBefore; got != 4 {
		t.Fatalf("%d journal rows written, want 4 (3 moves, 1 late)", got)
	}
	next := pendingCommands(t, env)[3:]
	if len(next) != 3 {
		t.Fatalf("%d new commands, want 3", len(next))
	}
	for i, c := range next {
		if c.Step != orderapi.StepLockCoupon || c.SagaID != ids[i] || c.ReplyTo != orchestrator.ReplyTopicDefault {
			t.Fatalf("new command %d = saga %s %s reply_to %q, want saga %s %s in reply order", i, c.SagaID, c.Step, c.ReplyTo, ids[i], orderapi.StepLockCoupon)
		}
	}
}

// A reply for an unknown saga is refused alone and writes nothing; a saga
// moved by someone else between the batch's load and its conditional
// update makes ApplyReplies undo the batch's writes, load that saga again
// and decide again, so the reply moves it once, on top of the other
// writer's change.
func TestApplyRepliesRedecidesWhatMovedWithoutWritingTwice(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	in, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "k", AggregateID: "o", Data: order("o")})
	if err != nil {
		t.Fatal(err)
	}
	c := lastCommand(t, env)
	unknown := successReply(message.Command{MessageID: uuid.New(), SagaID: uuid.New(), Step: orderapi.StepReserveInventory, Action: message.Forward})

	snapshot := func() [2]int {
		return [2]int{countRows(t, env, `SELECT count(*) FROM orch.journal`), countRows(t, env, `SELECT count(*) FROM orch.outbox`)}
	}
	before := snapshot()
	var refused []error
	err = pgx.BeginFunc(ctx, env.pool, func(tx pgx.Tx) error {
		var err error
		refused, err = env.eng.ApplyReplies(ctx, tx, []message.Reply{unknown})
		return err
	})
	if err != nil || !errors.Is(refused[0], saga.ErrStrayReply) {
		t.Fatalf("reply for an unknown saga: err = %v, refused %v; want nil and a stray reply", err, refused[0])
	}
	if got := snapshot(); got != before {
		t.Fatalf("journal/outbox rows %v after a refused reply, want %v", got, before)
	}

	// A conflicting writer moves the saga between load and update: the
	// engine's clock runs after the load, so it commits the bump there.
	var bump atomic.Bool
	eng, err := orchestrator.NewEngine(env.pool, env.eng.Registry(), &orchestrator.EngineConfig{Schema: "orch", Now: func() time.Time {
		if bump.CompareAndSwap(true, false) {
			if _, err := env.pool.Exec(ctx, `UPDATE orch.sagas SET version = version + 1 WHERE id = $1`, in.ID); err != nil {
				t.Errorf("bump version: %v", err)
			}
		}
		return env.clock.now()
	}})
	if err != nil {
		t.Fatal(err)
	}
	bump.Store(true)
	if err := applyAll(ctx, env, eng, successReply(c)); err != nil {
		t.Fatalf("conflicting batch: %v", err)
	}
	if bump.Load() {
		t.Fatal("the other writer never moved the saga: no conflict was tested")
	}
	got, journal := get(t, env, in.ID)
	if got.CurrentStep() != orderapi.StepLockCoupon || got.Version != 3 {
		t.Fatalf("after the conflict: step %q version %d, want %s at version 3 (bumped once, moved once)", got.CurrentStep(), got.Version, orderapi.StepLockCoupon)
	}
	succeeded := 0
	for _, j := range journal {
		if j.Event == saga.JournalStepSucceeded {
			succeeded++
		}
	}
	if succeeded != 1 {
		t.Fatalf("%d step-succeeded journal rows, want 1", succeeded)
	}
	if n := snapshot()[1] - before[1]; n != 1 {
		t.Fatalf("%d commands written, want 1 (the next step's, once)", n)
	}
}

// Sagas preloaded in the transaction's first round trip (the reply
// consumer's prefetch) are applied like loaded ones; a saga moved by
// someone else after the preload is loaded again and the batch decided
// again, and a saga the preload did not ask for is loaded then.
func TestApplyRepliesPreloaded(t *testing.T) {
	t.Parallel()
	// The statement's path: no kept sagas (the engine would not load them).
	env := setupEngineWith(t, func(c *orchestrator.EngineConfig) { c.SagaCache = -1 })
	ctx := context.Background()
	var ins []saga.Instance
	for _, k := range []string{"p1", "p2", "p3"} {
		in, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: k, AggregateID: "o-" + k, Data: order("o-" + k)})
		if err != nil {
			t.Fatal(err)
		}
		ins = append(ins, in)
	}
	cmds := pendingCommands(t, env)
	byID := map[uuid.UUID]message.Command{}
	for _, c := range cmds {
		byID[c.SagaID] = c
	}
	preloadThen := func(ids []uuid.UUID, between func(), rs ...message.Reply) (int, error) {
		b := &pgx.Batch{}
		b.BeginTx(pgx.TxOptions{})
		pre := env.eng.QueueLoad(b, ids)
		br := env.pool.SendBatch(ctx, b)
		tx := br.Tx()
		if err := br.Close(); err != nil {
			return 0, err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		between()
		refused, retried, err := env.eng.ApplyPreloaded(ctx, tx, rs, pre)
		if err := errors.Join(append(refused, err)...); err != nil {
			return retried, err
		}
		return retried, tx.Commit(ctx)
	}
	// Moved after the preload: decided again on the saga as it is now.
	p1 := ins[0].ID
	retried, err := preloadThen([]uuid.UUID{p1}, func() {
		if _, err := env.pool.Exec(ctx, `UPDATE orch.sagas SET version = version + 1 WHERE id = $1`, p1); err != nil {
			t.Fatal(err)
		}
	}, successReply(byID[p1]))
	if err != nil || retried != 1 {
		t.Fatalf("saga moved after the preload: err = %v, decided again %d times; want nil and once", err, retried)
	}
	if got, _ := get(t, env, p1); got.CurrentStep() != orderapi.StepLockCoupon || got.Version != 3 {
		t.Fatalf("after the conflict: step %q version %d, want %s at version 3 (the bump, one move)", got.CurrentStep(), got.Version, orderapi.StepLockCoupon)
	}
	// Preloaded p2 and p3 not asked for: both move, at once.
	p2, p3 := ins[1].ID, ins[2].ID
	if retried, err := preloadThen([]uuid.UUID{p2}, func() {}, successReply(byID[p2]), successReply(byID[p3])); err != nil || retried != 0 {
		t.Fatalf("preloaded batch: %v, decided again %d times", err, retried)
	}
	for _, in := range ins[1:] {
		if got, _ := get(t, env, in.ID); got.CurrentStep() != orderapi.StepLockCoupon || got.Version != 2 {
			t.Fatalf("saga %s at %q version %d after the preloaded batch, want %s at version 2", in.ID, got.CurrentStep(), got.Version, orderapi.StepLockCoupon)
		}
	}
}

// ApplyReplies leaves out, each alone, the replies that answer nothing the
// orchestrator sent (an unknown saga, an unknown step, an in_reply_to
// never sent), reporting them as stray, and applies the rest as one.
func TestApplyRepliesLeavesStrayRepliesOut(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	in, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "k", AggregateID: "o", Data: order("o")})
	if err != nil {
		t.Fatal(err)
	}
	c := lastCommand(t, env)
	unknownSaga := successReply(message.Command{MessageID: uuid.New(), SagaID: uuid.New(), Step: orderapi.StepReserveInventory, Action: message.Forward})
	neverSent := successReply(c)
	neverSent.InReplyTo = uuid.New()
	unknownStep := successReply(c)
	unknownStep.Step = "no-such-step"
	rs := []message.Reply{unknownSaga, neverSent, successReply(c), unknownStep}
	var refused []error
	if err := pgx.BeginFunc(ctx, env.pool, func(tx pgx.Tx) error {
		var err error
		refused, err = env.eng.ApplyReplies(ctx, tx, rs)
		return err
	}); err != nil {
		t.Fatalf("ApplyReplies: %v", err)
	}
	for k, want := range []bool{true, true, false, true} {
		if got := errors.Is(refused[k], saga.ErrStrayReply); got != want {
			t.Fatalf("reply %d: refused %v, want stray %v", k, refused[k], want)
		}
	}
	got, _ := get(t, env, in.ID)
	if got.CurrentStep() != orderapi.StepLockCoupon || got.Version != 2 {
		t.Fatalf("saga at %q version %d, want %s at version 2: the valid reply applied once", got.CurrentStep(), got.Version, orderapi.StepLockCoupon)
	}
}
