package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/outbox"
	"github.com/sagaflow/sagaflow/relay"
)

// shopService is a service with its own database schema (its orders table
// and its outbox) that starts a place-order saga for each order it takes.
type shopService struct {
	pool   *pgxpool.Pool
	schema string
	outbox *outbox.Outbox
}

// newShop creates the shop's schema: the messaging migrations (outbox,
// inbox) and its orders table.
func newShop(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string) *shopService {
	t.Helper()
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Participant(schema)))
	if _, err := pool.Exec(ctx, `CREATE TABLE `+schema+`.orders (id text PRIMARY KEY, amount_cents bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(schema)
	if err != nil {
		t.Fatal(err)
	}
	return &shopService{pool: pool, schema: schema, outbox: ob}
}

// placeOrder writes the order and, in the same transaction, the start of
// its saga to the shop's outbox; commit false rolls both back (as a
// business rule refusing the order would).
func (s *shopService) placeOrder(ctx context.Context, startTopic, orderID string, commit bool) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO `+s.schema+`.orders (id, amount_cents) VALUES ($1, 1000)`, orderID); err != nil {
		return err
	}
	if err := enqueueStart(ctx, s.outbox, tx, startTopic, orderID); err != nil {
		return err
	}
	if !commit {
		return tx.Rollback(ctx)
	}
	return tx.Commit(ctx)
}

// enqueueStart puts the start of order's place-order saga in ob inside tx:
// the body of POST /sagas, keyed by the aggregate id, with a message id.
func enqueueStart(ctx context.Context, ob *outbox.Outbox, tx pgx.Tx, startTopic, orderID string) error {
	body, err := json.Marshal(message.StartRecord{
		Type: "place-order", IdempotencyKey: orderID, AggregateID: orderID,
		Data: json.RawMessage(fmt.Sprintf(`{"order_id":%q,"customer":"c","sku":"sku-apple","qty":1,"amount_cents":1000}`, orderID)),
	})
	if err != nil {
		return err
	}
	return ob.Enqueue(ctx, tx, outbox.Message{
		Topic: startTopic, Key: orderID, Value: body,
		Headers: map[string]string{message.HeaderMessageID: uuid.NewString()},
	})
}

// A service starts a saga atomically with its own write: the start record
// goes to its own outbox in the same transaction, its relay publishes it
// to saga.starts once the transaction commits, and the orchestrator starts
// the saga from there (once per type and idempotency key, however often
// the record is delivered). The outcome arrives on saga.outcomes.
func Example_startFromOutbox() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/shop")
	if err != nil {
		panic(err)
	}
	ob, err := outbox.New("shop") // a schema the "messaging" migrations created
	if err != nil {
		panic(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO shop.orders (id, amount_cents) VALUES ('order-1001', 1000)`); err != nil {
			return err
		}
		return enqueueStart(ctx, ob, tx, message.StartTopicDefault, "order-1001")
	})
	if err != nil {
		panic(err)
	}
	rl, err := relay.New(pool, ob, &relay.Config{Brokers: []string{"127.0.0.1:9092"}})
	if err != nil {
		panic(err)
	}
	_ = rl.Run(ctx)
}
