package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// Many concurrent starts share transactions, yet each keeps the meaning of
// its own Start: one saga per idempotency key (the first start is told it
// created it, every other gets that saga), one journal row and one first
// command per saga, and fewer transactions than starts.
func TestConcurrentStartsAreBatchedAndKeepTheirMeaning(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	const keys, copies = 120, 3
	type result struct {
		key     int
		id      uuid.UUID
		created bool
		err     error
	}
	results := make(chan result, keys*copies)
	var wg sync.WaitGroup
	for k := range keys {
		for range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("o-%d", k)
				in, created, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: key, AggregateID: key, Data: order(key)})
				results <- result{key: k, id: in.ID, created: created, err: err}
			}()
		}
	}
	wg.Wait()
	close(results)
	ids := map[int]uuid.UUID{}
	createdN := map[int]int{}
	for r := range results {
		if r.err != nil {
			t.Fatalf("start of key %d: %v", r.key, r.err)
		}
		if r.id == uuid.Nil {
			t.Fatalf("start of key %d returned no saga", r.key)
		}
		if id, ok := ids[r.key]; ok && id != r.id {
			t.Fatalf("key %d: starts returned sagas %s and %s", r.key, id, r.id)
		}
		ids[r.key] = r.id
		if r.created {
			createdN[r.key]++
		}
	}
	for k := range keys {
		if createdN[k] != 1 {
			t.Fatalf("key %d: %d starts were told they created the saga, want 1", k, createdN[k])
		}
	}
	if n := countRows(t, env, `SELECT count(*) FROM orch.sagas`); n != keys {
		t.Fatalf("%d sagas, want %d", n, keys)
	}
	if n := countRows(t, env, `SELECT count(*) FROM orch.journal`); n != keys {
		t.Fatalf("%d journal rows, want %d (one start each)", n, keys)
	}
	if n := countRows(t, env, `SELECT count(DISTINCT convert_from(value, 'UTF8')::jsonb->>'saga_id') FROM orch.outbox`); n != keys {
		t.Fatalf("first commands for %d sagas, want %d", n, keys)
	}
	if n := countRows(t, env, `SELECT count(*) FROM orch.outbox`); n != keys {
		t.Fatalf("%d outbox rows, want %d", n, keys)
	}
	if got := startedTotal(t, env, orderapi.SagaType); got != keys {
		t.Fatalf("started counter %v, want %d", got, keys)
	}
	// xmin is the inserting transaction of each row.
	xacts := countRows(t, env, `SELECT count(DISTINCT xmin::text)::int FROM orch.sagas`)
	t.Logf("%d starts (%d sagas) committed in %d transactions", keys*copies, keys, xacts)
	if xacts >= keys {
		t.Fatalf("%d transactions for %d starts: starts were not batched", xacts, keys*copies)
	}
}

// A start that cannot be written (its id is taken by another saga) fails
// alone: the batch it was in is retried one start at a time.
func TestBadStartDoesNotFailItsBatch(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	taken, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "first", AggregateID: "first", Data: order("first")})
	if err != nil {
		t.Fatal(err)
	}
	const n = 60
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("k-%d", i)
			req := orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: key, AggregateID: key, Data: order(key)}
			if i == n/2 {
				req.ID = taken.ID // primary key violation
			}
			_, _, errs[i] = env.eng.Start(ctx, req)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i == n/2 {
			if err == nil {
				t.Fatal("the start reusing another saga's id succeeded")
			}
			continue
		}
		if err != nil {
			t.Fatalf("start %d failed with its bad neighbour: %v", i, err)
		}
	}
	if got := countRows(t, env, `SELECT count(*) FROM orch.sagas`); got != n {
		t.Fatalf("%d sagas, want %d (the first and %d good ones)", got, n, n-1)
	}
}

// A caller whose context ends before its start was taken into a transaction
// gets the context's error and nothing is written for it.
func TestStartWithDoneContextWritesNothing(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "x", AggregateID: "x", Data: order("x")})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with a cancelled context returned %v, want context.Canceled", err)
	}
	if n := countRows(t, env, `SELECT count(*) FROM orch.sagas`); n != 0 {
		t.Fatalf("%d sagas written for a cancelled start", n)
	}
}

func startedTotal(t *testing.T, env *engineEnv, typ string) float64 {
	t.Helper()
	mfs, err := env.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sagaflow_sagas_started_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "type" && l.GetValue() == typ {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
