package participants_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/participants"
)

// Example_hotel is a whole participant service: it books hotel rooms for
// a saga's "book-room" step and cancels them on compensation. The SDK runs
// each handler behind the barrier in the service's own transaction and
// sends the reply through the service's outbox. (Compiled, not run: it
// needs Postgres and Kafka.)
func Example_hotel() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/hotel")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	p, err := participants.New(pool, &participants.Config{
		Name:    "hotel", // consumes hotel.commands; SDK tables in schema "hotel"
		Brokers: []string{"127.0.0.1:9092"},
	})
	if err != nil {
		log.Fatal(err)
	}
	type booking struct {
		OrderID string `json:"order_id"`
		Room    string `json:"room"`
	}
	book := func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
		b, err := participants.Decode[booking](cmd) // a bad payload: failure "invalid_payload"
		if err != nil {
			return participants.Result{}, err
		}
		tag, err := tx.Exec(ctx, `UPDATE hotel.rooms SET held_by = $1 WHERE room = $2 AND held_by IS NULL`, cmd.SagaID, b.Room)
		if err != nil {
			return participants.Result{}, err // infrastructure: rolled back, retried
		}
		if tag.RowsAffected() == 0 {
			return participants.Fail("room_taken"), nil // business "no": saga compensates
		}
		return participants.Success(map[string]string{"room": b.Room}), nil // merged into saga data
	}
	cancel := func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
		// Runs only if the forward succeeded (the barrier answers the rest).
		_, err := tx.Exec(ctx, `UPDATE hotel.rooms SET held_by = NULL WHERE held_by = $1`, cmd.SagaID)
		return participants.Success(nil), err
	}
	// Optional: the same forward for a whole batch of first-time bookings,
	// one statement instead of one per command. Only the plain case: a
	// command it does not answer Success (a room taken) sends the batch
	// back to book, one command at a time.
	bookMany := func(ctx context.Context, tx pgx.Tx, cmds []message.Command) ([]participants.Result, error) {
		sagas, rooms := make([]uuid.UUID, len(cmds)), make([]string, len(cmds))
		for i, cmd := range cmds {
			b, err := participants.Decode[booking](cmd)
			if err != nil {
				return nil, err
			}
			sagas[i], rooms[i] = cmd.SagaID, b.Room
		}
		held, err := participants.QueryMap[uuid.UUID, string](ctx, tx, `UPDATE hotel.rooms AS r SET held_by = u.saga
FROM unnest($1::uuid[], $2::text[]) AS u(saga, room)
WHERE r.room = u.room AND r.held_by IS NULL RETURNING u.saga, r.room`, sagas, rooms)
		if err != nil {
			return nil, err
		}
		// Success for the sagas that got their room; the rest go one by one.
		return participants.AnswerBatch(cmds, held, func(room string) any { return map[string]string{"room": room} }), nil
	}
	// A handler takes a batch; One adapts a function of one command, and
	// WithBatch pairs one with its set-based form.
	if err := p.Handle("book-room", participants.WithBatch(book, bookMany), participants.One(cancel)); err != nil {
		log.Fatal(err)
	}
	sets, err := p.Migrations() // outbox, inbox, barrier; add your own business sets
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrations.Migrate(ctx, pool, sets...); err != nil {
		log.Fatal(err)
	}
	if err := p.Run(ctx); err != nil { // until SIGTERM, then drains
		log.Fatal(err)
	}
}
