package participants_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
)

// The SDK's log lines about a command carry the trace id of the record's
// traceparent, next to saga_id.
func TestParticipantLogLinesCarryTheTraceID(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	var logs testkit.Output // safe for the handler's writes and the reads
	p, err := participants.New(pool, &participants.Config{Name: "pt", Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Migrate(t, pool, testkit.MustSets(t)(p.Migrations()))
	if err := p.Handle("reserve", participants.One(func(_ context.Context, _ pgx.Tx, _ message.Command) (participants.Result, error) {
		return participants.Success(nil), nil
	}), nil); err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 30*time.Second)
	cmd := command(uuid.New(), "reserve", message.Forward)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	h := message.Headers(cmd.MessageID, cmd.SagaID)
	h[message.HeaderTraceParent] = "00-" + traceID + "-00f067aa0ba902b7-01"
	m := record(t, cmd, h)
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return p.HandleMessage(ctx, tx, m) }); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, `"msg":"forward executed"`) || !strings.Contains(out, `"trace_id":"`+traceID+`"`) {
		t.Fatalf("log lines lack the trace id:\n%s", out)
	}
}

// The SDK's log lines about a command carry the hash of its id
// (message.IDHash), never the id: a command id is what a reply quotes to
// answer it, and logs are read by more people than the command topics.
func TestParticipantLogLinesCarryTheCommandIDHash(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	var logs testkit.Output
	p, err := participants.New(pool, &participants.Config{Name: "pt", Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Migrate(t, pool, testkit.MustSets(t)(p.Migrations()))
	if err := p.Handle("reserve", participants.One(func(_ context.Context, _ pgx.Tx, _ message.Command) (participants.Result, error) {
		return participants.Success(nil), nil
	}), nil); err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 30*time.Second)
	cmd := command(uuid.New(), "reserve", message.Forward)
	m := record(t, cmd, message.Headers(cmd.MessageID, cmd.SagaID))
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return p.HandleMessage(ctx, tx, m) }); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, `"msg":"forward executed"`) || !strings.Contains(out, `"`+message.AttrMessageIDHash+`":"`+message.IDHash(cmd.MessageID)+`"`) {
		t.Fatalf("log lines lack the command id's hash:\n%s", out)
	}
	if strings.Contains(strings.ToLower(out), cmd.MessageID.String()) {
		t.Fatalf("log lines carry the command id %s:\n%s", cmd.MessageID, out)
	}
}
