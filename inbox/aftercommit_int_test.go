package inbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
)

// Through a real consumer: a hook runs once its message's effect is
// committed (another connection sees it), and the hooks of a message
// dead-lettered by its handler, or of a call that fails and is retried,
// never run.
func TestAfterCommitRunsAfterTheCommitOnly(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	m := newMetrics(t)
	var mu sync.Mutex
	ran := map[string]int{}
	var seenErr error
	failedOnce := map[string]bool{}
	handler := inbox.EachMessage(func(ctx context.Context, tx pgx.Tx, r message.Record) error {
		if err := writeEffect(ctx, tx, r); err != nil {
			return err
		}
		body := string(r.Value)
		id := rheader(r, message.HeaderMessageID)
		if !inbox.AfterCommit(tx, func() {
			// Committed: visible from another connection.
			var n int
			err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM effects WHERE message_id = $1`, id).Scan(&n)
			mu.Lock()
			defer mu.Unlock()
			if err == nil && n != 1 {
				err = errors.New(body + ": hook ran before its effect was committed")
			}
			if err != nil && seenErr == nil {
				seenErr = err
			}
			ran[body]++
		}) {
			return errors.New("AfterCommit declined inside a handler")
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case strings.HasPrefix(body, "poison"):
			return inbox.Permanent(errors.New("refused"))
		case strings.HasPrefix(body, "flaky") && !failedOnce[body]:
			failedOnce[body] = true
			return errors.New("transient")
		}
		return nil
	})
	c, err := inbox.New(e.pool, handler, e.config(m))
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	var msgs []kafka.Message
	for _, b := range []string{"ok-1", "poison-1", "flaky-1", "ok-2"} {
		msgs = append(msgs, record(uuid.New(), b))
	}
	e.produce(t, msgs...)
	testkit.Eventually(t, wait, "the good messages' hooks ran", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return ran["ok-1"] > 0 && ran["flaky-1"] > 0 && ran["ok-2"] > 0, nil
	})
	mu.Lock()
	defer mu.Unlock()
	if seenErr != nil {
		t.Fatal(seenErr)
	}
	if ran["poison-1"] != 0 || ran["ok-1"] != 1 || ran["flaky-1"] != 1 || ran["ok-2"] != 1 {
		t.Fatalf("hooks ran %v; want once for each committed message and never for the dead-lettered one", ran)
	}
}
