package external

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
)

// Run makes the due calls until ctx is cancelled (then it returns nil,
// leaving the calls in flight leased: they are taken again once their
// lease expires). Errors of the database are logged and retried.
func (c *Caller) Run(ctx context.Context) error {
	for {
		n, err := c.RunOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			c.cfg.Logger.WarnContext(ctx, "external calls: a round failed; retrying", slog.String("step", c.cfg.Step), slog.String("error", err.Error()))
		}
		if err == nil && n >= c.cfg.MaxInFlight {
			continue // more may be due
		}
		t := time.NewTimer(c.cfg.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// RunOnce claims the calls due now (at most MaxInFlight, none while the
// circuit is open), makes them at once and records their outcomes; it
// returns how many it made.
func (c *Caller) RunOnce(ctx context.Context) (int, error) {
	now := c.cfg.Now()
	want, probe := c.circuit.allow(now, c.cfg.MaxInFlight)
	if want == 0 {
		return 0, nil
	}
	calls, err := c.claim(ctx, now, want)
	if len(calls) == 0 && probe {
		c.circuit.unused()
	}
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(calls))
	for i, call := range calls {
		wg.Go(func() { errs[i] = c.make(ctx, call) })
	}
	wg.Wait()
	return len(calls), errors.Join(errs...)
}

// claim leases up to n due calls.
func (c *Caller) claim(ctx context.Context, now time.Time, n int) ([]Call, error) {
	rows, err := c.pool.Query(ctx, c.sql.claim, now, now.Add(c.cfg.Lease), n, c.cfg.Step)
	if err != nil {
		return nil, fmt.Errorf("external: step %q: claim due calls: %w", c.cfg.Step, err)
	}
	var (
		out  []Call
		id   pgtype.UUID
		step string
		key  string
		req  string
		att  int
		look bool
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &step, &key, &req, &att, &look}, func() error {
		out = append(out, Call{Ref: participants.Ref{SagaID: id.Bytes, Step: step}, IdempotencyKey: key, Request: json.RawMessage(req), Attempt: att,
			Lookup: look && c.cfg.Lookup != nil})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("external: step %q: claim due calls: %w", c.cfg.Step, err)
	}
	return out, nil
}

// make makes one call and records what came of it.
func (c *Caller) make(ctx context.Context, call Call) error {
	cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	out, err := c.invoke(cctx, call)
	cancel()
	if ctx.Err() != nil {
		return nil // stopping (or the process dies): the lease runs out, the call is made again
	}
	now := c.cfg.Now()
	c.circuit.result(now, err == nil)
	if err != nil {
		next := now.Add(c.backoff(call.Attempt))
		c.cfg.Logger.InfoContext(ctx, "external call failed; it will be made again", slog.String("step", call.Ref.Step),
			slog.String("saga_id", call.Ref.SagaID.String()), slog.Int("attempt", call.Attempt), slog.String("error", err.Error()))
		if _, rerr := c.pool.Exec(ctx, c.sql.retry, call.Ref.SagaID, call.Ref.Step, call.Attempt, next, message.Truncate(err.Error(), 1000)); rerr != nil {
			return fmt.Errorf("external: %s: schedule attempt %d: %w", call.Ref, call.Attempt+1, rerr)
		}
		return nil
	}
	return c.settle(ctx, call, out)
}

// invoke runs the CallFunc, or for a lookup the LookupFunc (not found:
// declined with ReasonNotCalled), a panic made a transient error.
func (c *Caller) invoke(ctx context.Context, call Call) (out Outcome, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("call panicked: %v", v)
		}
	}()
	if !call.Lookup {
		return c.cfg.Call(ctx, call)
	}
	out, found, err := c.cfg.Lookup(ctx, call)
	if err == nil && !found {
		out = Declined(ReasonNotCalled)
	}
	return out, err
}

// backoff is the wait after the attempt-th attempt failed.
func (c *Caller) backoff(attempt int) time.Duration {
	d := c.cfg.BackoffInitial
	for range max(attempt-1, 0) {
		if d >= c.cfg.BackoffMax/2 {
			return c.cfg.BackoffMax
		}
		d *= 2
	}
	return min(d, c.cfg.BackoffMax)
}

// settle reports the provider's definite answer to the saga and records
// it, in one transaction: the step completed or failed, or, when it is no
// longer accepted (cancelled, settled by another worker), the call marked
// abandoned.
func (c *Caller) settle(ctx context.Context, call Call, out Outcome) error {
	var output *string
	if out.Done && out.Output != nil {
		b, err := json.Marshal(out.Output)
		if err != nil {
			return fmt.Errorf("external: %s: encode the output: %w", call.Ref, err)
		}
		s := string(b)
		output = &s
	}
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		state, note := "done", ""
		if !out.Done {
			state = "failed"
		}
		// In a savepoint: a step no longer accepted takes the Settled
		// hook's writes back, and only the call's state is recorded.
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if c.cfg.Settled != nil {
			if err := c.cfg.Settled(ctx, sp, call, out); err != nil {
				return fmt.Errorf("the Settled hook: %w", err)
			}
		}
		if out.Done {
			err = c.p.Complete(ctx, sp, call.Ref, out.Output)
		} else {
			err = c.p.Fail(ctx, sp, call.Ref, out.Reason)
		}
		switch {
		case errors.Is(err, participants.ErrSettled) || errors.Is(err, participants.ErrUnknownRef):
			state, note = "abandoned", err.Error()
			c.cfg.Logger.WarnContext(ctx, "external call answered, but its step is no longer accepted", slog.String("step", call.Ref.Step),
				slog.String("saga_id", call.Ref.SagaID.String()), slog.Bool("done", out.Done), slog.String("error", note))
			err = sp.Rollback(ctx)
		case err == nil:
			err = sp.Commit(ctx)
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, c.sql.settle, call.Ref.SagaID, call.Ref.Step, state, output, message.Truncate(note, 1000))
		return err
	})
	if err != nil {
		return fmt.Errorf("external: %s: record the answer: %w", call.Ref, err)
	}
	return nil
}

// State is a recorded call's state ("pending", "done", "failed",
// "abandoned"), its attempts and last error; found false when none.
func (c *Caller) State(ctx context.Context, ref participants.Ref) (state string, attempts int, lastError string, found bool, err error) {
	err = c.pool.QueryRow(ctx, c.sql.state, ref.SagaID, ref.Step).Scan(&state, &attempts, &lastError)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, "", false, nil
	}
	return state, attempts, lastError, err == nil, err
}
