package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/saga"
)

// EventResult is what SendEvent did with an event.
type EventResult struct {
	// Saga is the saga after the event (as it was, for a duplicate).
	Saga saga.Instance
	// Duplicate: the saga had recorded an event with this id already;
	// nothing changed (the same event_id again is a no-op).
	Duplicate bool
	// Taken: the saga was waiting for the event and took it (merged it
	// and moved on, or refused it and turned back) in this transaction;
	// false for an event kept until the saga reaches its wait.
	Taken bool
}

// SendEvent records the external event name, with the sender's eventID and
// data (a JSON object; empty means {}), for saga sagaID in a transaction of
// its own, and dispatches what it sends after the commit. It is the one
// door of every external event: the HTTP API (POST /sagas/{id}/events) and
// any consumer of an event topic call it (SendEventTx inside their own
// transaction, e.g. an inbox's).
//
// Contract:
//   - The event goes through saga.Decide (EventExternal) and is recorded on
//     the wait step of the definition that waits for name and has not
//     finished (the first such in step order), in the same transaction as
//     the transition, journal ("event received", then "event taken" or
//     "event refused") and commands. If that step is waiting now, the
//     event is taken at once: its OnEvent merges it (the saga moves on) or
//     refuses it (before the pivot the saga compensates; after, it fails).
//     If the saga has not reached it yet, the event is kept and taken when
//     it does, so an early event is never lost.
//   - Idempotent by eventID within the saga: an id recorded before (kept,
//     taken or refused) returns Duplicate and changes nothing, whatever the
//     name and data, even once the saga has finished.
//   - Errors, nothing written: an error wrapping saga.ErrNotFound for an
//     unknown saga; a *saga.EventError wrapping saga.ErrEventInvalid
//     (name not a step-like name, eventID empty, longer than
//     saga.MaxEventIDLen or with control characters, data not a JSON
//     object or over saga.MaxEventDataLen), saga.ErrEventFinished (the
//     saga is completed, compensated or failed), saga.ErrEventUnknown (its
//     definition never waits for name) or saga.ErrEventNotAwaited (its
//     waits for name are past, it is compensating, or the wait keeps
//     saga.MaxKeptEvents already). Any other error is the database's; the
//     call may be repeated with the same eventID.
//
// A consumer maps the errors as the API does: invalid, unknown and
// not-found events are poison (dead-lettered with the error as reason),
// finished and not-awaited ones are refused for good (the API's 409).
func (e *Engine) SendEvent(ctx context.Context, sagaID uuid.UUID, name, eventID string, data json.RawMessage) (EventResult, error) {
	var out EventResult
	var pc *postCommit
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		pc = &postCommit{}
		var err error
		out, err = e.sendEvent(ctx, tx, sagaID, name, eventID, data, pc)
		return err
	})
	if err != nil {
		e.countEvent(sagaID, err)
		return EventResult{}, err
	}
	e.flush(pc)
	e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "event received", slog.String("saga_id", sagaID.String()),
		slog.String("event", name), slog.Bool("duplicate", out.Duplicate), slog.Bool("taken", out.Taken), traceAttr(&out.Saga))
	return out, nil
}

// SendEventTx is SendEvent inside tx, the caller's transaction (an inbox
// batch): the commands it sends are written to the outbox and published
// by the relay once tx commits. Any error means tx must be rolled back
// (or the savepoint around the call released) by the caller.
func (e *Engine) SendEventTx(ctx context.Context, tx pgx.Tx, sagaID uuid.UUID, name, eventID string, data json.RawMessage) (EventResult, error) {
	return e.sendEventTx(ctx, tx, sagaID, name, eventID, data, nil)
}

// sendEventTx is SendEventTx collecting into pc (nil: none) what must run
// after tx commits; the intake consumer hands pc to the inbox.
func (e *Engine) sendEventTx(ctx context.Context, tx pgx.Tx, sagaID uuid.UUID, name, eventID string, data json.RawMessage, pc *postCommit) (EventResult, error) {
	out, err := e.sendEvent(ctx, tx, sagaID, name, eventID, data, pc)
	if err != nil {
		e.countEvent(sagaID, err)
	}
	return out, err
}

func (e *Engine) sendEvent(ctx context.Context, tx pgx.Tx, sagaID uuid.UUID, name, eventID string, data json.RawMessage, pc *postCommit) (EventResult, error) {
	x := saga.External{Name: name, ID: eventID, Data: data}
	in, d, err := e.apply(ctx, tx, sagaID, func() saga.Event {
		return saga.Event{Kind: saga.EventExternal, At: e.cfg.Now(), External: &x}
	}, pc)
	if err != nil {
		return EventResult{}, err
	}
	taken := false
	for _, j := range d.Journal {
		taken = taken || j.Event == saga.JournalEventTaken || j.Event == saga.JournalEventRefused
	}
	return EventResult{Saga: in, Duplicate: d.Duplicate, Taken: taken}, nil
}

// countEvent counts a refused event by its saga's type (unknown when the
// saga is not found).
func (e *Engine) countEvent(sagaID uuid.UUID, err error) {
	if e.cfg.Metrics == nil {
		return
	}
	var ee *saga.EventError
	if !errors.As(err, &ee) {
		return
	}
	sagaType := "unknown"
	if in, lerr := e.st.load(context.Background(), e.pool, sagaID); lerr == nil {
		sagaType = in.Type
	}
	e.cfg.Metrics.events.WithLabelValues(sagaType, "refused").Inc()
}

// Cancel applies the client's cancel of saga id (actor: who asks, reason:
// why) in its own transaction: before the pivot was sent the saga
// compensates what took effect, once the steps still in flight have
// settled (their answer, or timeouts, re-sends and queries as usual);
// journaled "cancelled" with its actor and reason. From the pivot on, or
// for a saga compensating or finished already, it returns a
// *saga.RefusedError (action cancel) and changes nothing; an unknown saga
// an error wrapping saga.ErrNotFound.
func (e *Engine) Cancel(ctx context.Context, id uuid.UUID, actor, reason string) (saga.Instance, error) {
	var out saga.Instance
	var pc *postCommit
	c := saga.Cancel{Actor: actor, Reason: reason}
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		pc = &postCommit{}
		in, _, err := e.apply(ctx, tx, id, func() saga.Event {
			return saga.Event{Kind: saga.EventCancel, At: e.cfg.Now(), Cancel: &c}
		}, pc)
		out = in
		return err
	})
	if e.cfg.Metrics != nil && out.Type != "" {
		result := "accepted"
		if err != nil {
			result = "refused"
		}
		if err == nil || errors.Is(err, saga.ErrRefused) {
			e.cfg.Metrics.cancels.WithLabelValues(out.Type, result).Inc()
		}
	}
	if err != nil {
		return out, err
	}
	e.flush(pc)
	e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "saga cancelled", slog.String("saga_id", id.String()),
		slog.String("actor", actor), slog.String("reason", reason), traceAttr(&out))
	return out, nil
}
