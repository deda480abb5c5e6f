package participanttest

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/participants"
)

// Kit is one participant on a throwaway database.
type Kit struct {
	// Pool is the database's pool, for the test's own reads.
	Pool *pgxpool.Pool
	// P is the participant under test.
	P *participants.Participant
	t testing.TB
	// sent is the last outbox id Send has read.
	sent int64
}

// New makes a throwaway database and in it participant name (schema name)
// with the steps register gives it, and applies the SDK sets and the
// business sets returned by business (nil: none) in schema name. It fails
// the test on an error.
func New(t testing.TB, name string, business func(schema string) ([]migrations.Set, error), register func(*participants.Participant) error) *Kit {
	t.Helper()
	pool := testkit.Pool(t)
	p, err := participants.New(pool, &participants.Config{Name: name})
	if err != nil {
		t.Fatalf("participanttest: %v", err)
	}
	if err := register(p); err != nil {
		t.Fatalf("participanttest: register %s: %v", name, err)
	}
	must := testkit.MustSets(t)
	sets := [][]migrations.Set{must(p.Migrations())}
	if business != nil {
		sets = append(sets, must(business(name)))
	}
	testkit.Migrate(t, pool, sets...)
	return &Kit{Pool: pool, P: p, t: t}
}

// Schema is the participant's schema (its name).
func (k *Kit) Schema() string { return k.P.Schema() }

// Answer is what the participant did with one command.
type Answer struct {
	// Reply is the reply enqueued for it (zero when dead-lettered).
	Reply message.Reply
	// DeadLetter is why it would be dead-lettered ("" when answered).
	DeadLetter string
}

// Send runs cmds as one consumed batch, as the participant's inbox does:
// HandleCommands in one transaction, committed, with each command's record
// carrying the wire headers. It returns an Answer per command, in order,
// and fails the test on an error (the inbox would roll the batch back).
func (k *Kit) Send(cmds ...message.Command) []Answer {
	k.t.Helper()
	ctx := testkit.Context(k.t, 30*time.Second)
	ms := make([]message.Record, len(cmds))
	for i, cmd := range cmds {
		v, err := message.EncodeCommand(cmd)
		if err != nil {
			k.t.Fatalf("participanttest: encode command %d: %v", i, err)
		}
		ms[i] = message.Record{Topic: message.CommandTopic("", k.P.Name()), Offset: int64(i), Key: []byte(cmd.AggregateID), Value: v}
		for key, h := range message.Headers(cmd.MessageID, cmd.SagaID) {
			ms[i].Headers = append(ms[i].Headers, message.Header{Key: key, Value: []byte(h)})
		}
	}
	var res []inbox.Result
	err := pgx.BeginFunc(ctx, k.Pool, func(tx pgx.Tx) error {
		var err error
		res, err = k.P.HandleCommands(ctx, tx, ms)
		return err
	})
	if err != nil {
		k.t.Fatalf("participanttest: handle %d commands: %v", len(cmds), err)
	}
	replies := k.replies(ctx)
	out := make([]Answer, len(cmds))
	for i, cmd := range cmds {
		if res[i].Outcome == inbox.DeadLetter {
			out[i].DeadLetter = res[i].Reason
			continue
		}
		r, ok := replies[cmd.MessageID]
		if !ok {
			k.t.Fatalf("participanttest: command %d (step %q %s) was neither answered nor dead-lettered", i, cmd.Step, cmd.Action)
		}
		out[i].Reply = r
	}
	return out
}

// replies reads the replies enqueued since the last call, by the command
// they answer.
func (k *Kit) replies(ctx context.Context) map[uuid.UUID]message.Reply {
	k.t.Helper()
	rows, err := k.Pool.Query(ctx, `SELECT id, value FROM `+pgx.Identifier{k.Schema(), "outbox"}.Sanitize()+` WHERE id > $1 ORDER BY id`, k.sent)
	if err != nil {
		k.t.Fatalf("participanttest: read replies: %v", err)
	}
	out := map[uuid.UUID]message.Reply{}
	var (
		id    int64
		value []byte
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &value}, func() error {
		r, err := message.DecodeReply(value)
		if err != nil {
			return err
		}
		out[r.InReplyTo] = r
		k.sent = id
		return nil
	}); err != nil {
		k.t.Fatalf("participanttest: read replies: %v", err)
	}
	return out
}

// WantReply fails the test unless a is a reply with outcome and reason.
func WantReply(t testing.TB, a Answer, outcome message.Outcome, reason string) {
	t.Helper()
	switch {
	case a.DeadLetter != "":
		t.Fatalf("dead-lettered (%s), want a reply %s (reason %q)", a.DeadLetter, outcome, reason)
	case a.Reply.Outcome != outcome || a.Reply.Reason != reason:
		t.Fatalf("reply %s (reason %q), want %s (reason %q)", a.Reply.Outcome, a.Reply.Reason, outcome, reason)
	}
}

// Attach is a Kit over participant p on pool, built and migrated by the
// test itself (a participant whose registration needs the pool, say).
func Attach(t testing.TB, pool *pgxpool.Pool, p *participants.Participant) *Kit {
	return &Kit{Pool: pool, P: p, t: t}
}
