package inbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/testkit"
)

// detachedCtx is a cancellable context that is not one of the context
// package's own types: contexts derived from it learn of its cancellation
// through one goroutine each, in no fixed order. That widens the window in
// which the fetcher's context is already cancelled and a lane's is not yet,
// which is the shutdown race this test guards.
type detachedCtx struct {
	context.Context // for Deadline and Value only
	done            chan struct{}
	once            sync.Once
}

func newDetachedCtx() *detachedCtx {
	return &detachedCtx{Context: context.Background(), done: make(chan struct{})}
}

func (c *detachedCtx) Done() <-chan struct{} { return c.done }

func (c *detachedCtx) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

func (c *detachedCtx) cancel() { c.once.Do(func() { close(c.done) }) }

// A cancel always makes Run return nil, however the cancellation reaches
// the fetcher and the lanes: 30 runs of a consumer with 8 lanes, each
// cancelled while messages flow.
func TestCancelWithManyLanesAlwaysReturnsNil(t *testing.T) {
	t.Parallel()
	const runs = 30
	e := setup(t, 8)
	cfg := e.config(newMetrics(t))
	cfg.Lanes = 8
	c, err := inbox.New(e.pool, inbox.EachMessage(writeEffect), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uuid.UUID
	for i := range runs {
		ctx := newDetachedCtx()
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		// Messages for every partition, and wait until this run handled
		// them, so the fetcher and the lanes are all busy when cancelled.
		var batch []uuid.UUID
		for k := range 16 {
			id := uuid.New()
			batch = append(batch, id)
			e.produce(t, record(id, uuid.NewString()[:8]+string(rune('a'+k))))
		}
		ids = append(ids, batch...)
		testkit.Eventually(t, wait, "this run's messages handled", func() (bool, error) {
			return count(t, e.pool, `SELECT count(*) FROM effects WHERE message_id = ANY($1)`, batch) == len(batch), nil
		})
		// More records still in flight while the cancel lands.
		id := uuid.New()
		ids = append(ids, id)
		e.produce(t, record(id, "tail"))
		ctx.cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run %d: Run = %v after a clean cancel, want nil", i, err)
			}
		case <-time.After(wait):
			t.Fatalf("run %d: Run did not return within %s of cancel", i, wait)
		}
	}
	// Whatever was cut short by a cancel is handled by the next run, once.
	stop := run(t, c)
	testkit.Eventually(t, wait, "every message handled", func() (bool, error) {
		return count(t, e.pool, `SELECT count(*) FROM effects`) >= len(ids), nil
	})
	stop()
	effectsOncePerID(t, e.pool, ids)
}
