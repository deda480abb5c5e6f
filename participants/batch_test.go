package participants_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
)

// inBatchTx runs HandleBatch in a transaction that commits on success and
// rolls back on error, as the inbox's batch savepoint does.
func inBatchTx(f *fixture, ms []message.Record) error {
	return pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error { return f.p.HandleBatch(f.ctx, tx, ms) })
}

func TestHandleBatchRecordsForwardsAndDeclinesEverythingElse(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if err := f.p.Handle("reserve", effect(participants.Success(map[string]string{"id": "r1"}), nil), effect(participants.Success(nil), nil)); err != nil {
		t.Fatal(err)
	}
	if err := f.p.Handle("decline", effect(participants.Fail("no stock"), nil), effect(participants.Success(nil), nil)); err != nil {
		t.Fatal(err)
	}
	a, b := command(uuid.New(), "reserve", message.Forward), command(uuid.New(), "reserve", message.Forward)
	if err := inBatchTx(f, []message.Record{record(t, a, nil), record(t, b, nil)}); err != nil {
		t.Fatalf("batch of two first-time forwards: %v", err)
	}
	var effects, barrier, replies int
	count := func() {
		t.Helper()
		if err := f.pool.QueryRow(f.ctx, `SELECT (SELECT count(*) FROM pt.effects), (SELECT count(*) FROM pt.barrier WHERE outcome = 'success'), (SELECT count(*) FROM pt.outbox)`).Scan(&effects, &barrier, &replies); err != nil {
			t.Fatal(err)
		}
	}
	count()
	if effects != 2 || barrier != 2 || replies != 2 {
		t.Fatalf("after the batch: %d effects, %d success barrier rows, %d replies; want 2 each", effects, barrier, replies)
	}
	var value []byte
	if err := f.pool.QueryRow(f.ctx, `SELECT value FROM pt.outbox ORDER BY id LIMIT 1`).Scan(&value); err != nil {
		t.Fatal(err)
	}
	r, err := message.DecodeReply(value)
	if err != nil || r.InReplyTo != a.MessageID || r.Outcome != message.Success || !strings.Contains(string(r.Payload), `"r1"`) {
		t.Fatalf("first reply = %+v (%v); want success to %s with the recorded payload", r, err, a.MessageID)
	}

	// Each of these is declined (and rolled back), for the one-by-one path.
	for name, ms := range map[string][]message.Record{
		"a copy of an executed forward": {record(t, command(uuid.New(), "reserve", message.Forward), nil), record(t, copyOf(a), nil)},
		"a compensation":                {record(t, command(uuid.New(), "reserve", message.Compensate), nil)},
		"a handler failure":             {record(t, command(uuid.New(), "decline", message.Forward), nil)},
		"an unknown step":               {record(t, command(uuid.New(), "nope", message.Forward), nil)},
		"two copies in one batch":       {record(t, command(a.SagaID, "other", message.Forward), nil)},
	} {
		if name == "two copies in one batch" {
			c := command(uuid.New(), "reserve", message.Forward)
			ms = []message.Record{record(t, c, nil), record(t, copyOf(c), nil)}
		}
		if err := inBatchTx(f, ms); err == nil {
			t.Errorf("%s: HandleBatch = nil, want it declined", name)
		}
		count()
		if effects != 2 || barrier != 2 || replies != 2 {
			t.Fatalf("%s: after the declined batch %d effects, %d barrier rows, %d replies; want the 2 of before", name, effects, barrier, replies)
		}
	}

	// The one-by-one path answers the copy from the barrier.
	err = pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error { return f.p.HandleMessage(f.ctx, tx, record(t, copyOf(a), nil)) })
	if err != nil {
		t.Fatal(err)
	}
	count()
	if effects != 2 || replies != 3 {
		t.Fatalf("copy answered one by one: %d effects, %d replies; want 2 (not executed again) and 3", effects, replies)
	}
}

// batchEffect is a BatchFunc that writes one effects row per command in one
// statement, records the sizes of its calls, and answers res for each.
func batchEffect(res participants.Result, calls *[]int) participants.BatchFunc {
	return func(ctx context.Context, tx pgx.Tx, cmds []message.Command) ([]participants.Result, error) {
		*calls = append(*calls, len(cmds))
		ids, steps := make([]uuid.UUID, len(cmds)), make([]string, len(cmds))
		for i, c := range cmds {
			ids[i], steps[i] = c.SagaID, c.Step
		}
		if _, err := tx.Exec(ctx, `INSERT INTO pt.effects SELECT s, st, 'forward' FROM unnest($1::uuid[], $2::text[]) AS u(s, st)`, ids, steps); err != nil {
			return nil, err
		}
		out := make([]participants.Result, len(cmds))
		for i := range out {
			out[i] = res
			if res.Outcome == message.Success {
				out[i] = participants.Success(map[string]string{"saga": cmds[i].SagaID.String()})
			}
		}
		return out, nil
	}
}

func TestHandleForwardBatchRunsOneCallPerStep(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var calls, declineCalls []int
	var single atomic.Int32
	for _, reg := range []struct {
		step string
		f    participants.BatchFunc
	}{{"reserve", batchEffect(participants.Success(nil), &calls)}, {"decline", batchEffect(participants.Fail("short"), &declineCalls)}} {
		if err := f.p.HandleForwardBatch(reg.step, reg.f); err == nil {
			t.Fatalf("HandleForwardBatch(%q) before Handle = nil, want an error", reg.step)
		}
		if err := f.p.Handle(reg.step, effect(participants.Success(nil), &single), nil); err != nil {
			t.Fatal(err)
		}
		if err := f.p.HandleForwardBatch(reg.step, reg.f); err != nil {
			t.Fatalf("HandleForwardBatch(%q): %v", reg.step, err)
		}
		if err := f.p.HandleForwardBatch(reg.step, reg.f); err == nil {
			t.Fatalf("second HandleForwardBatch(%q) = nil, want an error", reg.step)
		}
	}
	if err := f.p.Handle("plain", effect(participants.Success(nil), &single), nil); err != nil {
		t.Fatal(err)
	}
	if err := f.p.HandleForwardBatch("plain", nil); err == nil {
		t.Fatal("HandleForwardBatch with a nil handler = nil, want an error")
	}

	// Three forwards of the batched step and one of a plain step: one batch
	// call with the three, in order, and the plain one through its Func.
	cmds := []message.Command{
		command(uuid.New(), "reserve", message.Forward), command(uuid.New(), "plain", message.Forward),
		command(uuid.New(), "reserve", message.Forward), command(uuid.New(), "reserve", message.Forward),
	}
	ms := make([]message.Record, len(cmds))
	for i, c := range cmds {
		ms[i] = record(t, c, nil)
	}
	if err := inBatchTx(f, ms); err != nil {
		t.Fatalf("batch: %v", err)
	}
	if !slices.Equal(calls, []int{3}) || single.Load() != 1 {
		t.Fatalf("batch calls %v and %d single calls; want one batch call of 3 and 1 single", calls, single.Load())
	}
	rows, err := f.pool.Query(f.ctx, `SELECT value FROM pt.outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	values, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil || len(values) != len(cmds) {
		t.Fatalf("%d replies (%v), want %d", len(values), err, len(cmds))
	}
	for i, v := range values {
		r, err := message.DecodeReply(v)
		if err != nil || r.InReplyTo != cmds[i].MessageID || r.Outcome != message.Success {
			t.Fatalf("reply %d = %+v (%v); want success to command %d", i, r, err, i)
		}
		if cmds[i].Step == "reserve" && !strings.Contains(string(r.Payload), cmds[i].SagaID.String()) {
			t.Fatalf("reply %d payload %s, want the batch result of saga %s", i, r.Payload, cmds[i].SagaID)
		}
	}

	// A non-Success result of a batch call declines the batch: nothing of it
	// stays (the caller rolls back), and the one-by-one path is next.
	if err := inBatchTx(f, []message.Record{record(t, command(uuid.New(), "reserve", message.Forward), nil), record(t, command(uuid.New(), "decline", message.Forward), nil)}); err == nil {
		t.Fatal("batch with a batch handler answering failure = nil, want it declined")
	}
	var effects int
	if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pt.effects`).Scan(&effects); err != nil {
		t.Fatal(err)
	}
	if effects != len(cmds) || !slices.Equal(declineCalls, []int{1}) {
		t.Fatalf("after the declined batch: %d effects (want %d), decline calls %v (want [1])", effects, len(cmds), declineCalls)
	}
}

func TestHandleBatchDeclinesAWrongResultCount(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if err := f.p.Handle("reserve", effect(participants.Success(nil), nil), nil); err != nil {
		t.Fatal(err)
	}
	short := func(ctx context.Context, tx pgx.Tx, cmds []message.Command) ([]participants.Result, error) {
		return []participants.Result{participants.Success(nil)}, nil
	}
	if err := f.p.HandleForwardBatch("reserve", short); err != nil {
		t.Fatal(err)
	}
	ms := []message.Record{record(t, command(uuid.New(), "reserve", message.Forward), nil), record(t, command(uuid.New(), "reserve", message.Forward), nil)}
	err := inBatchTx(f, ms)
	if err == nil || !strings.Contains(err.Error(), "1 results for 2 commands") {
		t.Fatalf("HandleBatch = %v, want a decline naming 1 result for 2 commands", err)
	}
}

// The first reply, made on the batch path, and the answer to a later copy,
// made from the barrier, carry the same payload bytes: the payload as
// Postgres stored it, whose key order ("b" before "aa") is not the
// handler's.
func TestBatchReplyAndCopyAnswerCarryTheSameBytes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if err := f.p.Handle("order", effect(participants.Success(map[string]string{"aa": "1", "b": "2"}), nil), effect(participants.Success(nil), nil)); err != nil {
		t.Fatal(err)
	}
	c := command(uuid.New(), "order", message.Forward)
	if err := inBatchTx(f, []message.Record{record(t, c, nil)}); err != nil {
		t.Fatalf("batch: %v", err)
	}
	if err := pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error { return f.p.HandleMessage(f.ctx, tx, record(t, copyOf(c), nil)) }); err != nil {
		t.Fatalf("copy: %v", err)
	}
	rows, err := f.pool.Query(f.ctx, `SELECT value FROM pt.outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	values, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil || len(values) != 2 {
		t.Fatalf("replies %d (%v), want 2", len(values), err)
	}
	var payloads []string
	for _, v := range values {
		r, err := message.DecodeReply(v)
		if err != nil || r.InReplyTo == uuid.Nil {
			t.Fatalf("reply %s: %v", v, err)
		}
		payloads = append(payloads, string(r.Payload))
	}
	if payloads[0] != payloads[1] {
		t.Fatalf("first reply payload %s, the copy's %s: want the same bytes", payloads[0], payloads[1])
	}
}
