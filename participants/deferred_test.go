package participants_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
)

// In a running participant a batch of forwards sends its barrier claim
// with the handlers' first statement, the handlers running in a savepoint
// as if every forward were claimed. When one was not (a copy under a new
// message id of an executed forward; a forward its compensation
// overtook), what the handlers wrote is rolled back and only the claimed
// forwards run again: the copy is answered from the barrier, the
// overtaken forward is refused, and the fresh forward of the same batch is
// applied once.
func TestClaimWithTheHandlersUndoesWhatACopyWrote(t *testing.T) {
	t.Parallel()
	k := newKafkaParticipant(t, "ptd", 1)
	p, pool, brokers, replyTopic, ctx := k.p, k.pool, k.brokers, k.replies, k.ctx
	var forwards atomic.Int32
	if err := p.Handle("reserve", effect(participants.Success(nil), &forwards), effect(participants.Success(nil), nil)); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- p.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

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

	var effects int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pt.effects WHERE action = 'forward'`).Scan(&effects); err != nil {
		t.Fatal(err)
	}
	if effects != 2 {
		t.Fatalf("%d forward effects, want 2 (a and the fresh one; not the copy, not the overtaken forward)", effects)
	}
	var barrier int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pt.barrier WHERE action = 'forward' AND outcome = 'success'`).Scan(&barrier); err != nil {
		t.Fatal(err)
	}
	if barrier != 2 {
		t.Fatalf("%d successful forward barrier rows, want 2", barrier)
	}
}
