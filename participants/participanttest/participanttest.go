package participanttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// Setup returns a pool on a fresh database where the participant SDK sets
// (migrations.Participant) and the business sets returned by business are
// applied in schema.
func Setup(t testing.TB, schema string, business func(schema string) ([]migrations.Set, error)) *pgxpool.Pool {
	t.Helper()
	pool := testkit.Pool(t)
	must := testkit.MustSets(t)
	testkit.Migrate(t, pool, must(migrations.Participant(schema)), must(business(schema)))
	return pool
}

// Fixture is a database prepared by Setup and the handlers under test.
type Fixture[H any] struct {
	Pool *pgxpool.Pool
	H    H
}

// NewFixture runs Setup for schema and business, then builds the handlers
// with newH for schema, failing the test on an error.
func NewFixture[H any](t testing.TB, schema string, business func(schema string) ([]migrations.Set, error), newH func(schema string) (H, error)) Fixture[H] {
	t.Helper()
	h, err := newH(schema)
	if err != nil {
		t.Fatalf("participanttest: new handlers for schema %q: %v", schema, err)
	}
	return Fixture[H]{Pool: Setup(t, schema, business), H: h}
}

// Read calls read (a participant's query helper such as shipping.Shipments)
// on pool for schema with a 30-second deadline, failing the test on an
// error.
func Read[T any](t testing.TB, pool *pgxpool.Pool, schema string, read func(ctx context.Context, db participants.DB, schema string) (T, error)) T {
	t.Helper()
	v, err := read(testkit.Context(t, 30*time.Second), pool, schema)
	if err != nil {
		t.Fatalf("participanttest: read schema %q: %v", schema, err)
	}
	return v
}

// Command builds a valid command of the place-order saga for step and
// action with payload encoded as JSON. A []byte or json.RawMessage payload
// is used as is, so tests can send malformed JSON.
func Command(t testing.TB, sagaID uuid.UUID, step string, action message.Action, attempt int, payload any) message.Command {
	t.Helper()
	var raw json.RawMessage
	switch p := payload.(type) {
	case nil:
	case json.RawMessage:
		raw = p
	case []byte:
		raw = p
	default:
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("participanttest: encode payload: %v", err)
		}
		raw = b
	}
	return message.Command{
		MessageID:   uuid.New(),
		SagaID:      sagaID,
		SagaType:    orderapi.SagaType,
		AggregateID: "order-" + sagaID.String()[:8],
		Step:        step,
		Action:      action,
		Attempt:     attempt,
		ReplyTo:     message.ReplyTopicDefault,
		SentAt:      time.Now().UTC(),
		Payload:     raw,
	}
}

// OneFunc is a step handler of one command (see participants.One).
type OneFunc = func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error)

// Exec runs fn for cmd in its own transaction on pool. The transaction is
// committed when fn returns a success result and rolled back otherwise
// (failure, retry, or error), which is what the SDK guarantees handlers.
func Exec(ctx context.Context, pool *pgxpool.Pool, fn OneFunc, cmd message.Command) (participants.Result, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return participants.Result{}, fmt.Errorf("participanttest: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	res, err := fn(ctx, tx, cmd)
	if err != nil {
		return res, err
	}
	if res.Outcome != message.Success {
		return res, nil
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("participanttest: commit: %w", err)
	}
	return res, nil
}

// ExecBatch runs fn for cmds in one transaction on pool, committed only when
// every result is a success (otherwise the SDK rolls the batch back and
// handles its commands one by one), and returns the results.
func ExecBatch(t testing.TB, pool *pgxpool.Pool, fn participants.Handler, cmds ...message.Command) []participants.Result {
	t.Helper()
	ctx := testkit.Context(t, 30*time.Second)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatalf("participanttest: begin: %v", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	res, err := fn(ctx, tx, cmds)
	if err != nil {
		t.Fatalf("participanttest: batch of %d: unexpected error: %v", len(cmds), err)
	}
	if len(res) != len(cmds) {
		t.Fatalf("participanttest: batch of %d: %d results", len(cmds), len(res))
	}
	for _, r := range res {
		if r.Outcome != message.Success {
			return res
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("participanttest: commit: %v", err)
	}
	return res
}

// MustExec is Exec failing the test on an error.
func MustExec(t testing.TB, pool *pgxpool.Pool, fn OneFunc, cmd message.Command) participants.Result {
	t.Helper()
	res, err := Exec(testkit.Context(t, 30*time.Second), pool, fn, cmd)
	if err != nil {
		t.Fatalf("participanttest: step %q %s saga %s: unexpected error: %v", cmd.Step, cmd.Action, cmd.SagaID, err)
	}
	return res
}

// WantOutcome fails the test unless res has outcome and reason.
func WantOutcome(t testing.TB, res participants.Result, outcome message.Outcome, reason string) {
	t.Helper()
	if res.Outcome != outcome || res.Reason != reason {
		t.Fatalf("result = %s (reason %q), want %s (reason %q)", res.Outcome, res.Reason, outcome, reason)
	}
}

// WantInvalid runs fn for cmd and fails the test unless it returns an error
// wrapping message.ErrInvalid whose text mentions field.
func WantInvalid(t testing.TB, pool *pgxpool.Pool, fn OneFunc, cmd message.Command, field string) {
	t.Helper()
	_, err := Exec(testkit.Context(t, 30*time.Second), pool, fn, cmd)
	if !errors.Is(err, message.ErrInvalid) {
		t.Fatalf("step %q %s payload %s: err = %v, want message.ErrInvalid", cmd.Step, cmd.Action, cmd.Payload, err)
	}
	if field != "" && !containsFold(err.Error(), field) {
		t.Fatalf("step %q %s payload %s: error %q does not name field %q", cmd.Step, cmd.Action, cmd.Payload, err, field)
	}
}

// Payload decodes res.Payload (a value or pointer handlers return) into T.
func Payload[T any](t testing.TB, res participants.Result) T {
	t.Helper()
	var v T
	b, err := json.Marshal(res.Payload)
	if err != nil {
		t.Fatalf("participanttest: encode result payload: %v", err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("participanttest: result payload %s does not fit %T: %v", b, v, err)
	}
	return v
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}
