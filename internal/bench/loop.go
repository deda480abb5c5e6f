package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// work builds the start request of saga number i.
type work interface {
	request(i int) (orchestrator.StartRequest, error)
}

type genericWork struct{ seed int64 }

func (g genericWork) request(i int) (orchestrator.StartRequest, error) {
	key := fmt.Sprintf("bench-%d-%07d", g.seed, i)
	return orchestrator.StartRequest{Type: GenericType, IdempotencyKey: key, AggregateID: key, Data: GenericData{ID: key}}, nil
}

type orderWork struct{ orders []steps.Order }

func (o orderWork) request(i int) (orchestrator.StartRequest, error) {
	if i >= len(o.orders) {
		return orchestrator.StartRequest{}, fmt.Errorf("place-order plan has %d orders, saga %d asked", len(o.orders), i)
	}
	ord := o.orders[i]
	return orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: ord.OrderID, AggregateID: ord.OrderID, Data: ord}, nil
}

// closedLoop keeps conc sagas in flight: each worker starts a saga and
// waits for it to end, until limit sagas were started or dur passed.
func closedLoop(ctx context.Context, eng *orchestrator.Engine, tr *tracker, w work, first, limit int, dur time.Duration, conc int) ([]uuid.UUID, time.Time, error) {
	t0 := time.Now()
	var deadline time.Time
	if dur > 0 {
		deadline = t0.Add(dur)
	}
	var (
		mu       sync.Mutex
		ids      []uuid.UUID
		firstErr error
		next     atomic.Int64
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	for range conc {
		wg.Go(func() {
			for ctx.Err() == nil {
				k := int(next.Add(1)) - 1
				if k >= limit || (!deadline.IsZero() && time.Now().After(deadline)) {
					return
				}
				done := make(chan struct{})
				req, err := w.request(first + k)
				if err != nil {
					if dur > 0 {
						return // a --duration run ran past its plan
					}
					fail(err)
					return
				}
				req.ID = uuid.New()
				tr.watch(req.ID, done)
				if _, _, err := eng.Start(ctx, req); err != nil {
					tr.forget(req.ID)
					fail(fmt.Errorf("start saga %d (%s): %w", first+k, req.IdempotencyKey, err))
					return
				}
				mu.Lock()
				ids = append(ids, req.ID)
				mu.Unlock()
				select {
				case <-done:
				case <-ctx.Done():
					fail(fmt.Errorf("saga %s did not end: %w", req.ID, ctx.Err()))
					return
				}
			}
		})
	}
	wg.Wait()
	return ids, t0, firstErr
}

// openLoop starts rate sagas per second on a fixed schedule (starters run
// on conc goroutines) until limit sagas or dur, then waits for all.
func openLoop(ctx context.Context, eng *orchestrator.Engine, tr *tracker, w work, first, limit int, dur time.Duration, rate float64, conc int) ([]uuid.UUID, time.Time, error) {
	t0 := time.Now()
	jobs := make(chan int, conc)
	var (
		mu       sync.Mutex
		ids      []uuid.UUID
		firstErr error
		wg       sync.WaitGroup
	)
	for range conc {
		wg.Go(func() {
			for k := range jobs {
				req, err := w.request(first + k)
				if err == nil {
					req.ID = uuid.New()
					if _, _, err = eng.Start(ctx, req); err == nil {
						mu.Lock()
						ids = append(ids, req.ID)
						mu.Unlock()
						continue
					}
				}
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	interval := time.Duration(float64(time.Second) / rate)
	timer := time.NewTimer(0)
	defer timer.Stop()
loop:
	for k := 0; k < limit; k++ {
		at := t0.Add(time.Duration(k) * interval)
		if dur > 0 && at.Sub(t0) >= dur {
			break
		}
		if d := time.Until(at); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				break loop
			case <-timer.C:
			}
		}
		select {
		case jobs <- k:
		case <-ctx.Done():
			break loop
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return ids, t0, firstErr
	}
	// Only now does the tracker look for the ends: the schedule does not
	// wait for them, the latencies come from the saga rows, and polls
	// during the run only take Postgres's time from the workload (measured:
	// docs/perf/figures.md#bench-open-loop-tracking).
	dones := make([]chan struct{}, len(ids))
	for i, id := range ids {
		dones[i] = make(chan struct{})
		tr.watch(id, dones[i])
	}
	for i, d := range dones {
		select {
		case <-d:
		case <-ctx.Done():
			return ids, t0, fmt.Errorf("saga %s did not end: %w", ids[i], ctx.Err())
		}
	}
	return ids, t0, nil
}
