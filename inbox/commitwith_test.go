package inbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/internal/txhooks"
	"github.com/sagaflow/sagaflow/message"
)

// Writes deferred with CommitWith reach the database with the commit (or
// before the handler's next statement, which sees them), are dropped with
// a failed call (a retried message writes once), and one that fails at
// the commit makes the batch run again at once with nothing deferred: the
// write then fails in the handler's own call (a permanent error here), the
// batch is split, and the message whose write fails is dead-lettered while
// the others are applied once.
func TestCommitWithDefersToTheCommit(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	m := newMetrics(t)
	var mu sync.Mutex
	var problems []string
	failedOnce := map[string]bool{}
	handler := inbox.EachMessage(func(ctx context.Context, tx pgx.Tx, r message.Record) error {
		body := string(r.Value)
		id, err := uuid.Parse(rheader(r, message.HeaderMessageID))
		if err != nil {
			return inbox.Permanent(err)
		}
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO effects (message_id, body) VALUES ($1, $2)`, id, body)
		if body == "poison" {
			b.Queue(`SELECT 1 / (length($1::text) - 6)`, body) // division by zero
		}
		if h, ok := txhooks.Of(tx); !ok || !h.CommitWith(b) {
			// Not deferrable (the batch is being split): send it now.
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
		}
		if body == "read-own" {
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM effects WHERE message_id = $1`, id).Scan(&n); err != nil {
				return err
			}
			if n != 1 {
				mu.Lock()
				problems = append(problems, "read-own: the deferred insert was not visible to the next statement")
				mu.Unlock()
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if body == "fail-once" && !failedOnce[body] {
			failedOnce[body] = true
			return errors.New("transient")
		}
		return nil
	})
	cfg := e.config(m)
	cfg.IsolateAfter = 2
	c, err := inbox.New(e.pool, handler, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	bodies := []string{"plain", "read-own", "fail-once", "poison", "last"}
	var msgs []kafka.Message
	for _, b := range bodies {
		msgs = append(msgs, record(uuid.New(), b))
	}
	e.produce(t, msgs...)
	testkit.Eventually(t, wait, "the good messages applied and the poison dead-lettered", func() (bool, error) {
		var n, dead int
		if err := e.pool.QueryRow(context.Background(), `SELECT count(DISTINCT body) FILTER (WHERE body <> 'poison'), (SELECT count(*) FROM p.dead_letters) FROM effects`).Scan(&n, &dead); err != nil {
			return false, err
		}
		return n == 4 && dead == 1, nil
	})
	rows, err := e.pool.Query(context.Background(), `SELECT body, count(*) FROM effects GROUP BY body`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
		body string
		n    int
	}, error) {
		var v struct {
			body string
			n    int
		}
		return v, r.Scan(&v.body, &v.n)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range got {
		if g.body == "poison" || g.n != 1 {
			t.Fatalf("effects %v: want one row for each good message, none for the poison", got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Fatal(problems)
	}
}
