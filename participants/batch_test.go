package participants_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
)

// inBatchTx runs HandleCommands for ms in a transaction that commits on
// success, and returns the results.
func inBatchTx(t *testing.T, f *fixture, ms []message.Record) []inbox.Result {
	t.Helper()
	var res []inbox.Result
	err := pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
		var err error
		res, err = f.p.HandleCommands(f.ctx, tx, ms)
		return err
	})
	if err != nil {
		t.Fatalf("HandleCommands: %v", err)
	}
	if len(res) != len(ms) {
		t.Fatalf("HandleCommands: %d results for %d records", len(res), len(ms))
	}
	return res
}

// replies returns the replies in the outbox by the message id they answer.
func replies(t *testing.T, f *fixture) map[uuid.UUID][]message.Reply {
	t.Helper()
	rows, err := f.pool.Query(f.ctx, `SELECT value FROM pt.outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	values, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		t.Fatal(err)
	}
	out := map[uuid.UUID][]message.Reply{}
	for _, v := range values {
		r, err := message.DecodeReply(v)
		if err != nil {
			t.Fatalf("outbox value %s: %v", v, err)
		}
		out[r.InReplyTo] = append(out[r.InReplyTo], r)
	}
	return out
}

// One batch holding every kind of command gets every command the answer
// it gets alone: one code path, a single command being a batch of one.
func TestBatchAnswersEachCommandAsAlone(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var reserves atomic.Int32
	if err := f.p.Handle("reserve", effect(participants.Success(map[string]string{"id": "r1"}), &reserves), effect(participants.Success(nil), nil)); err != nil {
		t.Fatal(err)
	}
	if err := f.p.Handle("decline", effect(participants.Fail("no stock"), nil), effect(participants.Success(nil), nil)); err != nil {
		t.Fatal(err)
	}
	done := command(uuid.New(), "reserve", message.Forward)
	if res := inBatchTx(t, f, []message.Record{record(t, done, nil)}); res[0].Outcome != inbox.Applied {
		t.Fatalf("a forward alone: %+v", res[0])
	}
	a, twice := command(uuid.New(), "reserve", message.Forward), command(uuid.New(), "reserve", message.Forward)
	comp := command(uuid.New(), "reserve", message.Compensate)
	lateFwd := comp
	lateFwd.MessageID, lateFwd.Action = uuid.New(), message.Forward
	no := command(uuid.New(), "decline", message.Forward)
	unknown := command(uuid.New(), "nope", message.Forward)
	batch := []message.Command{a, twice, copyOf(done), comp, lateFwd, no, unknown, copyOf(twice)}
	ms := make([]message.Record, len(batch))
	for i, c := range batch {
		ms[i] = record(t, c, nil)
	}
	res := inBatchTx(t, f, ms)
	for i, r := range res {
		want := inbox.Applied
		if batch[i].Step == "nope" {
			want = inbox.DeadLetter
		}
		if r.Outcome != want {
			t.Fatalf("result %d (%s %s) = %+v, want %v", i, batch[i].Step, batch[i].Action, r, want)
		}
	}
	if n := reserves.Load(); n != 3 {
		t.Fatalf("reserve ran %d times, want 3 (done, a, twice once)", n)
	}
	got := replies(t, f)
	for _, w := range []struct {
		cmd     message.Command
		outcome message.Outcome
		reason  string
	}{
		{a, message.Success, ""}, {twice, message.Success, ""}, {batch[2], message.Success, ""}, {batch[7], message.Success, ""},
		{comp, message.Success, participants.ReasonEmpty}, {lateFwd, message.Failure, participants.ReasonCompensated},
		{no, message.Failure, "no stock"},
	} {
		rs := got[w.cmd.MessageID]
		if len(rs) != 1 || rs[0].Outcome != w.outcome || rs[0].Reason != w.reason {
			t.Fatalf("replies to %s %s: %+v, want one %s (reason %q)", w.cmd.Step, w.cmd.Action, rs, w.outcome, w.reason)
		}
		if w.outcome == message.Success && w.cmd.Action == message.Forward && !strings.Contains(string(rs[0].Payload), `"r1"`) {
			t.Fatalf("reply to %s: payload %s, want the recorded one", w.cmd.MessageID, rs[0].Payload)
		}
	}
	if rs := got[unknown.MessageID]; len(rs) != 0 {
		t.Fatalf("a dead-lettered command was answered: %+v", rs)
	}
	var effects int
	if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pt.effects WHERE step = 'reserve' AND action = 'forward'`).Scan(&effects); err != nil {
		t.Fatal(err)
	}
	if effects != 3 {
		t.Fatalf("%d reserve effects, want 3", effects)
	}
}

// batchEffect is a batch handler that writes one effects row per command in
// one statement, records the sizes of its calls, and answers res for each.
func batchEffect(res participants.Result, calls *[]int) participants.Handler {
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

func TestBatchRunsOneHandlerCallPerStep(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var calls, declineCalls []int
	var single atomic.Int32
	if err := f.p.Handle("reserve", participants.WithBatch(effectOne(participants.Success(nil), &single), batchEffect(participants.Success(nil), &calls)), nil); err != nil {
		t.Fatal(err)
	}
	if err := f.p.Handle("decline", participants.WithBatch(effectOne(participants.Success(nil), &single), batchEffect(participants.Fail("short"), &declineCalls)), nil); err != nil {
		t.Fatal(err)
	}
	var acceptCalls []int
	if err := f.p.Handle("accept", participants.WithBatch(effectOne(participants.Success(nil), &single), batchEffect(participants.Accepted(), &acceptCalls)), nil); err != nil {
		t.Fatal(err)
	}
	if err := f.p.Handle("plain", effect(participants.Success(nil), &single), nil); err != nil {
		t.Fatal(err)
	}
	if err := f.p.Handle("plain", effect(participants.Success(nil), &single), nil); err == nil {
		t.Fatal("a second Handle of a step = nil, want an error")
	}
	if err := f.p.Handle("nil", nil, nil); err == nil {
		t.Fatal("Handle with a nil forward = nil, want an error")
	}

	// Three forwards of the batched step and one of a plain step: one batch
	// call with the three, in order, and the plain one alone.
	cmds := []message.Command{
		command(uuid.New(), "reserve", message.Forward), command(uuid.New(), "plain", message.Forward),
		command(uuid.New(), "reserve", message.Forward), command(uuid.New(), "reserve", message.Forward),
	}
	ms := make([]message.Record, len(cmds))
	for i, c := range cmds {
		ms[i] = record(t, c, nil)
	}
	inBatchTx(t, f, ms)
	if !slices.Equal(calls, []int{3}) || single.Load() != 1 {
		t.Fatalf("batch calls %v and %d single calls; want one batch call of 3 and 1 single", calls, single.Load())
	}
	got := replies(t, f)
	for i, c := range cmds {
		rs := got[c.MessageID]
		if len(rs) != 1 || rs[0].Outcome != message.Success {
			t.Fatalf("replies to command %d: %+v, want one success", i, rs)
		}
		if c.Step == "reserve" && !strings.Contains(string(rs[0].Payload), c.SagaID.String()) {
			t.Fatalf("reply %d payload %s, want the batch result of saga %s", i, rs[0].Payload, c.SagaID)
		}
	}

	// A batch call answering anything but Success for all is undone, and
	// each of its commands runs alone: here they succeed alone.
	single.Store(0)
	d1, d2 := command(uuid.New(), "decline", message.Forward), command(uuid.New(), "decline", message.Forward)
	inBatchTx(t, f, []message.Record{record(t, d1, nil), record(t, d2, nil)})
	var effects int
	if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pt.effects WHERE step = 'decline'`).Scan(&effects); err != nil {
		t.Fatal(err)
	}
	if effects != 2 || !slices.Equal(declineCalls, []int{2}) || single.Load() != 2 {
		t.Fatalf("after the failed batch: %d effects (want 2, the runs alone), batch calls %v (want [2]), %d runs alone (want 2)", effects, declineCalls, single.Load())
	}
	got = replies(t, f)
	for _, c := range []message.Command{d1, d2} {
		if rs := got[c.MessageID]; len(rs) != 1 || rs[0].Outcome != message.Success {
			t.Fatalf("replies to %s: %+v, want one success from the run alone", c.MessageID, rs)
		}
	}

	// A batch whose results are all accepted keeps its writes like one of
	// successes: one call, nothing run alone.
	single.Store(0)
	a1, a2 := command(uuid.New(), "accept", message.Forward), command(uuid.New(), "accept", message.Forward)
	inBatchTx(t, f, []message.Record{record(t, a1, nil), record(t, a2, nil)})
	if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pt.effects WHERE step = 'accept'`).Scan(&effects); err != nil {
		t.Fatal(err)
	}
	if effects != 2 || !slices.Equal(acceptCalls, []int{2}) || single.Load() != 0 {
		t.Fatalf("accepted batch: %d effects (want 2), batch calls %v (want [2]), %d runs alone (want 0)", effects, acceptCalls, single.Load())
	}
	got = replies(t, f)
	for _, c := range []message.Command{a1, a2} {
		if rs := got[c.MessageID]; len(rs) != 1 || rs[0].Outcome != message.Accepted {
			t.Fatalf("replies to %s: %+v, want one accepted", c.MessageID, rs)
		}
	}
}

// A batch handler returning a wrong result count has its commands run
// alone.
func TestBatchWithAWrongResultCountRunsAlone(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var single atomic.Int32
	short := func(ctx context.Context, tx pgx.Tx, cmds []message.Command) ([]participants.Result, error) {
		return []participants.Result{participants.Success(nil)}, nil
	}
	if err := f.p.Handle("reserve", participants.WithBatch(effectOne(participants.Success(nil), &single), short), nil); err != nil {
		t.Fatal(err)
	}
	a, b := command(uuid.New(), "reserve", message.Forward), command(uuid.New(), "reserve", message.Forward)
	inBatchTx(t, f, []message.Record{record(t, a, nil), record(t, b, nil)})
	got := replies(t, f)
	if single.Load() != 2 || len(got[a.MessageID]) != 1 || len(got[b.MessageID]) != 1 {
		t.Fatalf("%d runs alone, replies %v; want 2 runs alone and one reply each", single.Load(), got)
	}
}

// The first reply, made for a batch, and the answer to a later copy, made
// from the barrier, carry the same payload bytes: the payload as Postgres
// stored it, whose key order ("b" before "aa") is not the handler's.
func TestBatchReplyAndCopyAnswerCarryTheSameBytes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if err := f.p.Handle("order", effect(participants.Success(map[string]string{"aa": "1", "b": "2"}), nil), effect(participants.Success(nil), nil)); err != nil {
		t.Fatal(err)
	}
	c, d := command(uuid.New(), "order", message.Forward), command(uuid.New(), "order", message.Forward)
	inBatchTx(t, f, []message.Record{record(t, c, nil), record(t, d, nil)})
	cc := copyOf(c)
	inBatchTx(t, f, []message.Record{record(t, cc, nil)})
	got := replies(t, f)
	first, again := got[c.MessageID], got[cc.MessageID]
	if len(first) != 1 || len(again) != 1 || string(first[0].Payload) != string(again[0].Payload) || !strings.HasPrefix(string(first[0].Payload), `{"b"`) {
		t.Fatalf("first reply %+v, the copy's %+v: want the same payload bytes, as stored", first, again)
	}
}
