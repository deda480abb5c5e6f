package participants_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/txhooks"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
)

// ExecLater's write goes with the batch's commit inside a running
// participant (the call defers it) and is committed with the reply. A handler that
// answers a failure after it has its write undone with the call. A write
// that fails at the commit (here a unique violation) keeps nothing of the
// batch: the batch runs again with nothing deferred, the write runs in the
// handler's call, and the handler gets the error there and answers from it.
func TestExecLaterGoesWithTheCommit(t *testing.T) {
	t.Parallel()
	k := newKafkaParticipant(t, "ptl", 1)
	p, pool, brokers, ctx := k.p, k.pool, k.brokers, k.ctx
	if _, err := pool.Exec(ctx, `CREATE TABLE pt.once (saga_id uuid PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	deferredCalls := map[uuid.UUID][]bool{} // per saga, per call that got past its write: was it deferred
	handler := func(fail bool) participants.Handler {
		return participants.One(func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
			if err := participants.ExecLater(ctx, tx, `INSERT INTO pt.once (saga_id) VALUES ($1)`, cmd.SagaID); err != nil {
				return participants.Fail("already booked: " + err.Error()), nil
			}
			deferred := false
			if h, ok := txhooks.Of(tx); ok {
				deferred = h.CanDefer()
			}
			mu.Lock()
			deferredCalls[cmd.SagaID] = append(deferredCalls[cmd.SagaID], deferred)
			mu.Unlock()
			if fail {
				return participants.Fail("no room"), nil
			}
			return participants.Success(nil), nil
		})
	}
	if err := p.Handle("book", handler(false), nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Handle("rebook", handler(false), nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Handle("full", handler(true), nil); err != nil {
		t.Fatal(err)
	}
	k.run(t)
	w := k.writer(t)
	replies := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: k.replies, Partition: 0, MaxWait: 50 * time.Millisecond})
	defer replies.Close()
	got := map[uuid.UUID]message.Reply{}
	ask := func(c message.Command) message.Reply {
		t.Helper()
		c.ReplyTo = k.replies
		if err := w.WriteMessages(ctx, toKafka(t, c)); err != nil {
			t.Fatal(err)
		}
		for {
			if r, ok := got[c.MessageID]; ok {
				return r
			}
			m, err := replies.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("waiting for the reply to %s: %v", c.Step, err)
			}
			r, err := message.DecodeReply(m.Value)
			if err != nil {
				t.Fatal(err)
			}
			got[r.InReplyTo] = r
		}
	}
	rows := func(id uuid.UUID) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pt.once WHERE saga_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	s := uuid.New()
	if r := ask(command(s, "book", message.Forward)); r.Outcome != message.Success || rows(s) != 1 {
		t.Fatalf("book: %s, %d rows; want success and the row", r.Outcome, rows(s))
	}
	mu.Lock()
	if calls := deferredCalls[s]; len(calls) != 1 || !calls[0] {
		t.Fatalf("book's calls deferred %v, want one call whose write went with the commit", calls)
	}
	mu.Unlock()

	// The same row again: the deferred insert fails the commit, the batch
	// runs again with nothing deferred, the handler sees the violation.
	r := ask(command(s, "rebook", message.Forward))
	if r.Outcome != message.Failure || rows(s) != 1 {
		t.Fatalf("rebook: %s (%s), %d rows; want a failure from the handler's own error, one row", r.Outcome, r.Reason, rows(s))
	}
	mu.Lock()
	if calls := deferredCalls[s]; len(calls) != 2 || !calls[1] {
		// The second call, with nothing deferred, answered from the error
		// before recording.
		t.Fatalf("calls deferred %v, want book's and rebook's first (deferring) call recorded", calls)
	}
	mu.Unlock()

	// A failure answered after the write: the write is undone.
	f := uuid.New()
	if r := ask(command(f, "full", message.Forward)); r.Outcome != message.Failure || rows(f) != 0 {
		t.Fatalf("full: %s, %d rows; want the failure and no row", r.Outcome, rows(f))
	}
}
