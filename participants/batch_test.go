package participants_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
)

// inBatchTx runs HandleBatch in a transaction that commits on success and
// rolls back on error, as the inbox's batch savepoint does.
func inBatchTx(f *fixture, ms []kafka.Message) error {
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
	if err := inBatchTx(f, []kafka.Message{record(t, a, nil), record(t, b, nil)}); err != nil {
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
	for name, ms := range map[string][]kafka.Message{
		"a copy of an executed forward": {record(t, command(uuid.New(), "reserve", message.Forward), nil), record(t, copyOf(a), nil)},
		"a compensation":                {record(t, command(uuid.New(), "reserve", message.Compensate), nil)},
		"a handler failure":             {record(t, command(uuid.New(), "decline", message.Forward), nil)},
		"an unknown step":               {record(t, command(uuid.New(), "nope", message.Forward), nil)},
		"two copies in one batch":       {record(t, command(a.SagaID, "other", message.Forward), nil)},
	} {
		if name == "two copies in one batch" {
			c := command(uuid.New(), "reserve", message.Forward)
			ms = []kafka.Message{record(t, c, nil), record(t, copyOf(c), nil)}
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
