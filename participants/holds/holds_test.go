package holds_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/participants/holds"
)

const schema = "shop"

func setup(t *testing.T) (*pgxpool.Pool, holds.Table) {
	t.Helper()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Participant(schema)))
	return pool, holds.For(schema)
}

// inTx runs fn in one transaction on pool and commits it.
func inTx(t *testing.T, pool *pgxpool.Pool, fn func(ctx context.Context, tx pgx.Tx) error) {
	t.Helper()
	ctx := testkit.Context(t, 30*time.Second)
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fn(ctx, tx) }); err != nil {
		t.Fatal(err)
	}
}

func TestTakeIsIdempotent(t *testing.T) {
	t.Parallel()
	pool, h := setup(t)
	saga := uuid.New()
	var first holds.Hold
	inTx(t, pool, func(ctx context.Context, tx pgx.Tx) error {
		got, taken, err := h.Take(ctx, tx, saga, "reserve", "sku-a", 3)
		if err != nil || !taken || got.State != holds.Held || got.Quantity != 3 || got.Settled != nil || got.Since.IsZero() {
			t.Fatalf("first take = %+v taken=%v err=%v; want a new held hold of 3", got, taken, err)
		}
		first = got
		// A redelivery in the same transaction (a batch run again).
		again, taken, err := h.Take(ctx, tx, saga, "reserve", "sku-a", 3)
		if err != nil || taken || again != first {
			t.Fatalf("second take in the same tx = %+v taken=%v err=%v; want the first hold, not taken", again, taken, err)
		}
		return nil
	})
	inTx(t, pool, func(ctx context.Context, tx pgx.Tx) error {
		again, taken, err := h.Take(ctx, tx, saga, "reserve", "sku-a", 5)
		if err != nil || taken || again.Quantity != 3 || !again.Since.Equal(first.Since) {
			t.Fatalf("take in a later tx = %+v taken=%v err=%v; want the first hold of 3 unchanged", again, taken, err)
		}
		return nil
	})
}

func TestTakeRefusesBadRequests(t *testing.T) {
	t.Parallel()
	pool, h := setup(t)
	cases := []struct {
		name, step, resource string
		qty                  int64
		want                 string
	}{
		{"no step", "", "sku", 1, "step"},
		{"no resource", "reserve", "", 1, "resource"},
		{"zero quantity", "reserve", "sku", 0, "quantity"},
		{"negative quantity", "reserve", "sku", -2, "quantity"},
	}
	ctx := testkit.Context(t, 30*time.Second)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, _, err := h.Take(ctx, pool, uuid.New(), c.step, c.resource, c.qty); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Take = %v, want an error naming %s", err, c.want)
			}
			if _, err := h.TakeMany(ctx, pool, []holds.Request{{SagaID: uuid.New(), Step: c.step, Resource: c.resource, Quantity: c.qty}}); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("TakeMany = %v, want an error naming %s", err, c.want)
			}
		})
	}
	if all, err := h.List(ctx, pool, holds.Filter{}); err != nil || len(all) != 0 {
		t.Fatalf("holds after refused takes = %+v (%v), want none", all, err)
	}
}

func TestConfirmAndReleaseSettleOnce(t *testing.T) {
	t.Parallel()
	pool, h := setup(t)
	ctx := testkit.Context(t, 30*time.Second)
	sold, undone := uuid.New(), uuid.New()
	for _, s := range []uuid.UUID{sold, undone} {
		if _, _, err := h.Take(ctx, pool, s, "reserve", "sku-a", 2); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name   string
		settle func(context.Context, pgx.Tx, uuid.UUID, string) ([]holds.Hold, error)
		saga   uuid.UUID
		n      int
		state  string
	}{
		{"confirm", func(ctx context.Context, tx pgx.Tx, s uuid.UUID, step string) ([]holds.Hold, error) {
			return h.Confirm(ctx, tx, s, step)
		}, sold, 1, holds.Confirmed},
		{"confirm again", func(ctx context.Context, tx pgx.Tx, s uuid.UUID, step string) ([]holds.Hold, error) {
			return h.Confirm(ctx, tx, s, step)
		}, sold, 0, holds.Confirmed},
		{"release a confirmed hold", func(ctx context.Context, tx pgx.Tx, s uuid.UUID, step string) ([]holds.Hold, error) {
			return h.Release(ctx, tx, s, step)
		}, sold, 0, holds.Confirmed},
		{"release", func(ctx context.Context, tx pgx.Tx, s uuid.UUID, step string) ([]holds.Hold, error) {
			return h.Release(ctx, tx, s, step)
		}, undone, 1, holds.Released},
		{"release again", func(ctx context.Context, tx pgx.Tx, s uuid.UUID, step string) ([]holds.Hold, error) {
			return h.Release(ctx, tx, s, step)
		}, undone, 0, holds.Released},
		{"confirm a released hold", func(ctx context.Context, tx pgx.Tx, s uuid.UUID, step string) ([]holds.Hold, error) {
			return h.Confirm(ctx, tx, s, step)
		}, undone, 0, holds.Released},
	}
	for _, c := range cases {
		inTx(t, pool, func(ctx context.Context, tx pgx.Tx) error {
			got, err := c.settle(ctx, tx, c.saga, "reserve")
			if err != nil || len(got) != c.n {
				t.Fatalf("%s: settled %+v (%v), want %d hold(s)", c.name, got, err, c.n)
			}
			if c.n == 1 && (got[0].State != c.state || got[0].Settled == nil || got[0].Quantity != 2) {
				t.Fatalf("%s: settled %+v, want state %s with settled_at", c.name, got[0], c.state)
			}
			return nil
		})
		all, err := h.BySaga(ctx, pool, c.saga)
		if err != nil || len(all) != 1 || all[0].State != c.state {
			t.Fatalf("%s: holds of the saga = %+v (%v), want one %s", c.name, all, err, c.state)
		}
	}
}

func TestSettleRollsBackWithTheTransaction(t *testing.T) {
	t.Parallel()
	pool, h := setup(t)
	ctx := testkit.Context(t, 30*time.Second)
	saga := uuid.New()
	if _, _, err := h.Take(ctx, pool, saga, "reserve", "sku-a", 1); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := h.Confirm(ctx, tx, saga, "reserve"); err != nil || len(got) != 1 {
		t.Fatalf("confirm = %+v (%v)", got, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if all, err := h.BySaga(ctx, pool, saga); err != nil || len(all) != 1 || all[0].State != holds.Held {
		t.Fatalf("after a rolled-back confirm: %+v (%v), want still held", all, err)
	}
}

func TestListFilters(t *testing.T) {
	t.Parallel()
	pool, h := setup(t)
	ctx := testkit.Context(t, 30*time.Second)
	s1, s2, s3 := uuid.New(), uuid.New(), uuid.New()
	taken, err := h.TakeMany(ctx, pool, []holds.Request{
		{SagaID: s1, Step: "reserve", Resource: "sku-a", Quantity: 1},
		{SagaID: s1, Step: "reserve", Resource: "sku-b", Quantity: 2},
		{SagaID: s2, Step: "reserve", Resource: "sku-a", Quantity: 3},
		{SagaID: s3, Step: "reserve", Resource: "sku-b", Quantity: 4},
	})
	if err != nil || len(taken) != 4 {
		t.Fatalf("TakeMany = %d holds (%v), want 4", len(taken), err)
	}
	// A redelivered batch takes nothing new.
	again, err := h.TakeMany(ctx, pool, []holds.Request{{SagaID: s2, Step: "reserve", Resource: "sku-a", Quantity: 3}})
	if err != nil || len(again) != 0 {
		t.Fatalf("TakeMany again = %+v (%v), want none taken", again, err)
	}
	if _, err := h.Release(ctx, pool, s3, "reserve"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		f    holds.Filter
		want int
	}{
		{"all", holds.Filter{}, 4},
		{"by saga", holds.Filter{Saga: s1}, 2},
		{"by resource", holds.Filter{Resource: "sku-b"}, 2},
		{"by saga and resource", holds.Filter{Saga: s1, Resource: "sku-a"}, 1},
		{"held", holds.Filter{State: holds.Held}, 3},
		{"released of sku-b", holds.Filter{Resource: "sku-b", State: holds.Released}, 1},
		{"limit", holds.Filter{Limit: 2}, 2},
		{"unknown resource", holds.Filter{Resource: "sku-z"}, 0},
	}
	for _, c := range cases {
		got, err := h.List(ctx, pool, c.f)
		if err != nil || len(got) != c.want {
			t.Fatalf("%s: %d holds (%v), want %d", c.name, len(got), err, c.want)
		}
	}
	if got, err := h.ByResource(ctx, pool, "sku-a"); err != nil || len(got) != 2 || got[0].Resource != "sku-a" {
		t.Fatalf("ByResource(sku-a) = %+v (%v), want 2 holds of sku-a", got, err)
	}
	if _, err := h.List(ctx, pool, holds.Filter{State: "lost"}); err == nil || !strings.Contains(err.Error(), `"lost"`) {
		t.Fatalf("List with a bad state = %v, want an error naming it", err)
	}
}

// Two copies of one take racing in two transactions: one takes the hold,
// the other waits for it and gets it back, never two holds.
func TestConcurrentTakesHoldOnce(t *testing.T) {
	t.Parallel()
	pool, h := setup(t)
	saga := uuid.New()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		taken int
	)
	start := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ctx := testkit.Context(t, 30*time.Second)
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				got, now, err := h.Take(ctx, tx, saga, "reserve", "sku-a", 1)
				if err == nil && got.Quantity != 1 {
					t.Errorf("take returned %+v", got)
				}
				if now {
					mu.Lock()
					taken++
					mu.Unlock()
				}
				return err
			})
			if err != nil {
				t.Errorf("concurrent take: %v", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if taken != 1 {
		t.Fatalf("%d takes reported taking the hold, want 1", taken)
	}
}
