package outbox

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/outboxdb"
)

// Message is one record to publish: Topic (required), Key (the partition
// key: a key's messages are published in enqueue order), Value, Headers
// (text; at most message.MaxSendHeadersBytes in all), and AvailableAt,
// which delays publication until then (zero: now).
type Message = outboxdb.Message

// ErrEmptyTopic is returned by Enqueue for a message without a topic.
var ErrEmptyTopic = outboxdb.ErrEmptyTopic

// DB is what Enqueue needs: a transaction (pgx.Tx), or a connection or
// pool for a message that announces no other write.
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Outbox is the outbox table of one schema. It is safe for concurrent use.
type Outbox struct {
	t *outboxdb.Table
}

// New returns the outbox stored in schema (created by the migrations'
// messaging set).
func New(schema string) (*Outbox, error) {
	if _, err := outboxdb.New(schema); err != nil {
		return nil, err
	}
	return &Outbox{t: outboxdb.For(schema)}, nil
}

// Schema is the schema the table lives in.
func (o *Outbox) Schema() string { return o.t.Schema() }

// Enqueue inserts msgs inside the caller's transaction tx; they are
// published once it commits, and never if it rolls back. A message whose
// headers a consumer would refuse is refused here (message.ErrInvalid),
// and nothing is written.
func (o *Outbox) Enqueue(ctx context.Context, tx DB, msgs ...Message) error {
	return o.t.Enqueue(ctx, tx, msgs...)
}
