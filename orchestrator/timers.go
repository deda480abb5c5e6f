package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/backoff"
	"github.com/sagaflow/sagaflow/saga"
)

// FireDue applies a timer event to up to limit sagas whose wake-up time has
// come, in one transaction (rows claimed with FOR UPDATE SKIP LOCKED, so
// replicas share the work). It returns how many it looked at.
func (e *Engine) FireDue(ctx context.Context, limit int) (int, error) {
	n := 0
	var pc *postCommit
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		pc = &postCommit{}
		now := e.cfg.Now()
		ids, err := e.st.due(ctx, tx, now, limit)
		if err != nil {
			return err
		}
		n = len(ids)
		for _, id := range ids {
			in, _, err := e.apply(ctx, tx, id, func() saga.Event { return saga.Event{Kind: saga.EventTimer, At: now} }, pc)
			if err != nil {
				return fmt.Errorf("timer for saga %s: %w", id, err)
			}
			// The timer may have fired early (writes only move timers
			// earlier): set it to the saga's real next wake-up.
			if err := e.st.resyncTimer(ctx, tx, id, in.NextWakeup()); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		e.flush(pc)
	}
	return n, err
}

// RunTimers fires due timers until ctx is cancelled, and refreshes the
// in-flight gauge. Errors are logged and retried with backoff.
func (e *Engine) RunTimers(ctx context.Context) error {
	tick := time.NewTicker(e.cfg.TimerInterval)
	defer tick.Stop()
	lastGauge := time.Time{}
	failures := 0 // in a row
	for {
		n, err := e.FireDue(ctx, e.cfg.TimerBatch)
		if ctx.Err() != nil {
			return nil
		}
		wait := e.cfg.TimerInterval
		if err != nil {
			e.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "timer batch failed; retrying", slog.String("error", err.Error()))
			failures++
			wait = backoff.Exponential(e.cfg.TimerInterval, 10*time.Second, failures+1)
		} else {
			failures = 0
			if n >= e.cfg.TimerBatch {
				wait = 0
			}
		}
		if e.cfg.Metrics != nil && time.Since(lastGauge) >= e.cfg.GaugeInterval {
			lastGauge = time.Now()
			if err := e.refreshGauges(ctx); err != nil && ctx.Err() == nil {
				e.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "refresh saga gauges", slog.String("error", err.Error()))
			}
		}
		if wait == 0 {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func (e *Engine) refreshGauges(ctx context.Context) error {
	counts, err := e.InFlight(ctx)
	if err != nil {
		return err
	}
	for _, s := range []saga.State{saga.Running, saga.Compensating} {
		e.cfg.Metrics.inFlight.WithLabelValues(string(s)).Set(float64(counts[s]))
	}
	return e.refreshBacklog(ctx)
}
