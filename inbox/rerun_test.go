package inbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/internal/txhooks"
	"github.com/sagaflow/sagaflow/message"
)

// A handler that wrote ahead of a check may ask for its call to be made
// again with nothing deferred (txhooks.ErrRerun), and a deferred write that
// fails when a later statement of the call sends it asks the same, in a
// batch that records its ids first (here: one holding a malformed record)
// as in a lazy one: the call's writes are undone and it runs again at once,
// once, with CanDefer false, and neither message is dead-lettered for what
// the careful run does not do.
func TestRerunRunsTheCallAgainWithNothingDeferred(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	if err := kafkaclient.EnsureTopics(testkit.Context(t, wait), e.brokers, 1, 1, e.topic+inbox.DLQSuffixDefault); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(context.Background(), `CREATE TABLE rerun_marks (k text PRIMARY KEY); INSERT INTO rerun_marks VALUES ('taken')`); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	deferring := map[string]int{}
	handler := inbox.EachMessage(func(ctx context.Context, tx pgx.Tx, r message.Record) error {
		body := string(r.Value)
		h, ok := txhooks.Of(tx)
		canDefer := ok && h.CanDefer()
		if canDefer {
			mu.Lock()
			deferring[body]++
			mu.Unlock()
		}
		id, err := uuid.Parse(rheader(r, message.HeaderMessageID))
		if err != nil {
			return inbox.Permanent(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO effects (message_id, body) VALUES ($1, $2)`, id, body); err != nil {
			return err
		}
		switch {
		case body == "ask" && canDefer:
			return fmt.Errorf("a check after the write failed: %w", txhooks.ErrRerun)
		case body == "taken" && canDefer:
			b := &pgx.Batch{}
			b.Queue(`INSERT INTO rerun_marks VALUES ('taken')`) // fails: the key is there
			if !h.CommitWith(b) {
				return fmt.Errorf("CommitWith refused in a batch that may defer")
			}
			_, err := tx.Exec(ctx, `SELECT 1`) // sends it, and fails
			return err
		case body == "taken":
			_, err := tx.Exec(ctx, `INSERT INTO rerun_marks VALUES ('taken') ON CONFLICT DO NOTHING`)
			return err
		}
		return nil
	})
	c, err := inbox.New(e.pool, handler, e.config(newMetrics(t)))
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	bad := kafka.Message{Key: []byte("bad"), Value: []byte("no message id")}
	// Two batches, so that each message meets a batch that may defer.
	for i, msgs := range [][]kafka.Message{
		{record(uuid.New(), "plain"), bad, record(uuid.New(), "ask")},
		{bad, record(uuid.New(), "taken")},
	} {
		e.produce(t, msgs...)
		testkit.Eventually(t, wait, "the batch applied and its malformed record dead-lettered", func() (bool, error) {
			var n, dead int
			if err := e.pool.QueryRow(context.Background(), `SELECT count(*), (SELECT count(*) FROM p.dead_letters) FROM effects`).Scan(&n, &dead); err != nil {
				return false, err
			}
			return n >= 2+i && dead >= i+1, nil
		})
	}
	var n, distinct, dead int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT body), (SELECT count(*) FROM p.dead_letters) FROM effects`).Scan(&n, &distinct, &dead); err != nil {
		t.Fatal(err)
	}
	if n != 3 || distinct != 3 || dead != 2 {
		t.Fatalf("%d effects (%d bodies) and %d dead letters, want 3 effects of 3 bodies and 2 dead letters (the malformed records)", n, distinct, dead)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, body := range []string{"ask", "taken"} {
		if deferring[body] != 1 {
			t.Errorf("%q was handled %d times with writes deferrable, want once (then again at once with nothing deferred)", body, deferring[body])
		}
	}
}
