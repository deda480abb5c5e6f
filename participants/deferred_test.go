package participants_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
)

// In a running participant the handlers of a batch of forwards run as if
// no forward had a barrier row, and the outcomes are inserted with the
// commit. When one had a row (a copy under a new message id of an executed
// forward; a forward its compensation overtook), the insert fails, what the
// handlers wrote is rolled back with the batch, and the batch runs again
// with the rows claimed first: the copy is answered from the barrier, the
// overtaken forward is refused, and the fresh forward of the same batch is
// applied once. A copy whose handler now answers retry, or fails
// permanently (writes that record no row), is answered from its row too,
// and one whose outcome carries a payload gets the recorded bytes.
func TestHandlersRunAheadAndACopyIsAnsweredFromTheBarrier(t *testing.T) {
	t.Parallel()
	k := newKafkaParticipant(t, "ptd", 1)
	p, pool, brokers, replyTopic, ctx := k.p, k.pool, k.brokers, k.replies, k.ctx
	var forwards atomic.Int32
	if err := p.Handle("reserve", effect(participants.Success(nil), &forwards), effect(participants.Success(nil), nil)); err != nil {
		t.Fatal(err)
	}
	// charge answers as mode says: 0 success with a payload, 1 retry, 2 a
	// permanent error; it writes its effect first every time.
	var mode atomic.Int32
	if err := p.Handle("charge", participants.One(func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
		if _, err := tx.Exec(ctx, `INSERT INTO pt.effects VALUES ($1, $2, $3)`, cmd.SagaID, cmd.Step, string(cmd.Action)); err != nil {
			return participants.Result{}, err
		}
		switch mode.Load() {
		case 1:
			return participants.RetryLater("busy"), nil
		case 2:
			return participants.Result{}, inbox.Permanent(errors.New("card refused by a bug"))
		}
		return participants.Success(map[string]any{"zeta": 1, "alpha": cmd.SagaID.String()}), nil
	}), nil); err != nil {
		t.Fatal(err)
	}
	k.run(t)

	w := k.writer(t)
	send := func(cs ...message.Command) {
		t.Helper()
		var ms []kafka.Message
		for _, c := range cs {
			c.ReplyTo = replyTopic
			ms = append(ms, toKafka(t, c))
		}
		if err := w.WriteMessages(ctx, ms...); err != nil {
			t.Fatal(err)
		}
	}
	replies := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: replyTopic, Partition: 0, MaxWait: 50 * time.Millisecond})
	defer replies.Close()
	got := map[uuid.UUID]message.Reply{}
	await := func(ids ...uuid.UUID) {
		t.Helper()
		for _, id := range ids {
			for {
				if _, ok := got[id]; ok {
					break
				}
				m, err := replies.ReadMessage(ctx)
				if err != nil {
					t.Fatalf("waiting for the reply to %s: %v", id, err)
				}
				r, err := message.DecodeReply(m.Value)
				if err != nil {
					t.Fatal(err)
				}
				got[r.InReplyTo] = r
			}
		}
	}

	a := command(uuid.New(), "reserve", message.Forward)
	send(a)
	await(a.MessageID)
	if r := got[a.MessageID]; r.Outcome != message.Success {
		t.Fatalf("first forward answered %+v, want success", r)
	}

	// A copy of a under a new id, with a fresh forward in the same batch.
	cp, fresh := copyOf(a), command(uuid.New(), "reserve", message.Forward)
	send(cp, fresh)
	await(cp.MessageID, fresh.MessageID)
	if r := got[cp.MessageID]; r.Outcome != message.Success {
		t.Fatalf("the copy was answered %+v, want the recorded success", r)
	}
	if r := got[fresh.MessageID]; r.Outcome != message.Success {
		t.Fatalf("the fresh forward was answered %+v, want success", r)
	}

	// A malformed record, a copy, a fresh forward and a second copy: the
	// second copy ends the run, so the first run's outcomes are sent (and
	// fail on the copy's row) with the second run's first statement, inside
	// its handler; the malformed record makes the inbox record the batch's
	// ids first, so nothing but that failure sends the batch round again.
	cp1, fresh2, cp2 := copyOf(a), command(uuid.New(), "reserve", message.Forward), copyOf(a)
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("x"), Value: []byte("not a command")}); err != nil {
		t.Fatal(err)
	}
	send(cp1, fresh2, cp2)
	await(cp1.MessageID, fresh2.MessageID, cp2.MessageID)
	for _, c := range []message.Command{cp1, fresh2, cp2} {
		if r := got[c.MessageID]; r.Outcome != message.Success {
			t.Fatalf("%v was answered %+v, want success", c.MessageID, r)
		}
	}

	// A compensation that overtook its forward: the forward is refused.
	sagaC := uuid.New()
	comp, late := command(sagaC, "reserve", message.Compensate), command(sagaC, "reserve", message.Forward)
	send(comp)
	await(comp.MessageID)
	send(late)
	await(late.MessageID)
	if r := got[late.MessageID]; r.Outcome == message.Success {
		t.Fatalf("the forward after its compensation was answered %+v, want it refused", r)
	}

	// A charge, then copies of it met by a handler answering retry, by one
	// failing permanently, and by one succeeding with a payload beside a
	// fresh charge.
	ch := command(uuid.New(), "charge", message.Forward)
	send(ch)
	await(ch.MessageID)
	first := got[ch.MessageID]
	if first.Outcome != message.Success || len(first.Payload) == 0 {
		t.Fatalf("the charge was answered %+v, want success with a payload", first)
	}
	for _, m := range []int32{1, 2, 0} {
		mode.Store(m)
		cp, fresh := copyOf(ch), command(uuid.New(), "charge", message.Forward)
		send(cp, fresh)
		if m == 2 {
			await(cp.MessageID) // the fresh one is dead-lettered
		} else {
			await(cp.MessageID, fresh.MessageID)
		}
		r := got[cp.MessageID]
		if r.Outcome != message.Success || string(r.Payload) != string(first.Payload) {
			t.Fatalf("mode %d: the copy was answered %+v (payload %s), want the recorded success with payload %s", m, r, r.Payload, first.Payload)
		}
		want := map[int32]message.Outcome{0: message.Success, 1: message.Retry}[m]
		if r := got[fresh.MessageID]; m != 2 && r.Outcome != want {
			t.Fatalf("mode %d: the fresh charge was answered %+v, want %s", m, r, want)
		}
	}
	var charges int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pt.effects WHERE step = 'charge'`).Scan(&charges); err != nil {
		t.Fatal(err)
	}
	if charges != 2 {
		t.Fatalf("%d charge effects, want 2 (the first charge and the last fresh one)", charges)
	}
	var chargeRows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pt.barrier WHERE step = 'charge'`).Scan(&chargeRows); err != nil {
		t.Fatal(err)
	}
	if chargeRows != 2 {
		t.Fatalf("%d charge barrier rows, want 2 (no pending row left by a retry or a dead letter)", chargeRows)
	}

	var effects int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pt.effects WHERE action = 'forward' AND step = 'reserve'`).Scan(&effects); err != nil {
		t.Fatal(err)
	}
	if effects != 3 {
		t.Fatalf("%d forward effects, want 3 (a and the two fresh ones; not the copies, not the overtaken forward)", effects)
	}
	var barrier int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pt.barrier WHERE action = 'forward' AND outcome = 'success' AND step = 'reserve'`).Scan(&barrier); err != nil {
		t.Fatal(err)
	}
	if barrier != 3 {
		t.Fatalf("%d successful forward barrier rows, want 3", barrier)
	}
}
