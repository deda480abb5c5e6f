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
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/internal/txhooks"
	"github.com/sagaflow/sagaflow/message"
)

// Prefetch's statements run in the batch transaction itself (the handler
// sees the same transaction id), before the handler, and its value reaches
// the handler; a record dead-lettered before the handler (no message-id)
// is not offered to Prefetch.
func TestPrefetchRunsInTheBatchTransaction(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	m := newMetrics(t)
	type pre struct {
		xid int64
	}
	var mu sync.Mutex
	var problems []string
	handled := map[string]bool{}
	offered := map[string]bool{}
	handler := inbox.EachMessage(func(ctx context.Context, tx pgx.Tx, r message.Record) error {
		h, _ := txhooks.Of(tx)
		p, ok := h.Prefetched().(*pre)
		var xid int64
		if err := tx.QueryRow(ctx, `SELECT txid_current()`).Scan(&xid); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case !ok:
			problems = append(problems, string(r.Value)+": no prefetched value")
		case p.xid != xid:
			problems = append(problems, fmt.Sprintf("%s: prefetched in transaction %d, handled in %d", r.Value, p.xid, xid))
		}
		handled[string(r.Value)] = true
		return writeEffect(ctx, tx, r)
	})
	cfg := e.config(m)
	txhooks.SetPrefetch(cfg, func(b *pgx.Batch, recs []message.Record) any {
		p := &pre{}
		mu.Lock()
		for _, r := range recs {
			offered[string(r.Value)] = true
		}
		mu.Unlock()
		b.Queue(`SELECT txid_current()`).QueryRow(func(row pgx.Row) error { return row.Scan(&p.xid) })
		return p
	})
	c, err := inbox.New(e.pool, handler, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	bad := kafka.Message{Key: []byte("bad"), Value: []byte("no-id")}
	e.produce(t, record(uuid.New(), "one"), bad, record(uuid.New(), "two"))
	testkit.Eventually(t, wait, "both good records handled", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return handled["one"] && handled["two"], nil
	})
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	if offered["no-id"] || !offered["one"] || !offered["two"] {
		t.Fatalf("offered to Prefetch: %v, want one and two only", offered)
	}
}
