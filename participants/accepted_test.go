package participants_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
)

// settle runs Complete (or Fail, with reason) of ref in a transaction of
// its own and returns the reply it enqueued, or the error.
func (f *fixture) settle(t *testing.T, ref participants.Ref, output any, failReason string) (message.Reply, error) {
	t.Helper()
	var last int64
	if err := f.pool.QueryRow(f.ctx, `SELECT coalesce(max(id), 0) FROM pt.outbox`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	err := pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
		if failReason != "" {
			return f.p.Fail(f.ctx, tx, ref, failReason)
		}
		return f.p.Complete(f.ctx, tx, ref, output)
	})
	if err != nil {
		return message.Reply{}, err
	}
	var (
		n     int
		topic string
		value []byte
	)
	if err := f.pool.QueryRow(f.ctx, `SELECT count(*) OVER (), topic, value FROM pt.outbox WHERE id > $1 ORDER BY id LIMIT 1`, last).Scan(&n, &topic, &value); err != nil {
		t.Fatalf("the settled step's reply: %v", err)
	}
	if n != 1 || topic != "saga.replies" {
		t.Fatalf("%d replies enqueued on %q, want one on saga.replies", n, topic)
	}
	r, err := message.DecodeReply(value)
	if err != nil {
		t.Fatalf("the settled step's reply does not decode: %v", err)
	}
	return r, nil
}

// accepting registers step "later" answering res (Accepted or
// AcceptedCancellable) after recording an effect, and a compensation that
// records one too.
func accepting(t *testing.T, f *fixture, res participants.Result, calls *atomic.Int32) {
	t.Helper()
	if err := f.p.Handle("later", effect(res, calls), effect(participants.Success(nil), nil)); err != nil {
		t.Fatal(err)
	}
}

// A forward answered accepted keeps the handler's writes, is answered
// accepted to every copy (never run again) and to a query, and Complete
// records success and replies, in the caller's transaction, to the latest
// copy; from then on the barrier answers done.
func TestAcceptedThenComplete(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var calls atomic.Int32
	accepting(t, f, participants.Accepted(), &calls)
	saga := uuid.New()
	first := command(saga, "later", message.Forward)
	r := f.exec(t, first)
	wantOutcome(t, r, message.Accepted, "")
	if len(r.Payload) != 0 {
		t.Fatalf("accepted reply payload %s, want none (not cancellable)", r.Payload)
	}
	if n := f.effects(t, saga, message.Forward); n != 1 {
		t.Fatalf("%d forward effects after accepted, want 1 (the handler's writes are kept)", n)
	}
	second := command(saga, "later", message.Forward)
	second.Attempt = 2
	wantOutcome(t, f.exec(t, second), message.Accepted, "")
	stale := command(saga, "later", message.Forward) // a slow copy of attempt 1, after attempt 2
	wantOutcome(t, f.exec(t, stale), message.Accepted, "")
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times, want once", calls.Load())
	}
	if a := f.queried(t, saga, "later"); a.State != message.QueryAccepted {
		t.Fatalf("query of an accepted step: %s, want accepted (still pending, not closed)", a.State)
	}
	type out struct {
		Charge string `json:"charge"`
	}
	ref := participants.RefOf(first)
	r, err := f.settle(t, ref, out{"ch-1"}, "")
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if r.InReplyTo != second.MessageID || r.Outcome != message.Success || compact(t, r.Payload) != `{"charge":"ch-1"}` || r.Action != message.Forward {
		t.Fatalf("completion reply %+v (payload %s), want success with the output answering attempt 2 %s", r, r.Payload, second.MessageID)
	}
	if _, err := f.settle(t, ref, nil, ""); !errors.Is(err, participants.ErrSettled) || errors.Is(err, participants.ErrCancelled) {
		t.Fatalf("second Complete: %v, want ErrSettled", err)
	}
	if a := f.queried(t, saga, "later"); a.State != message.QueryDone || compact(t, a.Output) != `{"charge":"ch-1"}` {
		t.Fatalf("query after Complete: %s %s, want done with the output", a.State, a.Output)
	}
	third := command(saga, "later", message.Forward)
	third.Attempt = 3
	if r := f.exec(t, third); r.Outcome != message.Success || compact(t, r.Payload) != `{"charge":"ch-1"}` {
		t.Fatalf("copy after Complete: %s %s, want success from the barrier", r.Outcome, r.Payload)
	}
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times, want once", calls.Load())
	}
}

// Fail settles the accepted step as a business failure; its compensation
// is then empty.
func TestAcceptedThenFail(t *testing.T) {
	t.Parallel()
	f := setup(t)
	accepting(t, f, participants.Accepted(), nil)
	saga := uuid.New()
	cmd := command(saga, "later", message.Forward)
	wantOutcome(t, f.exec(t, cmd), message.Accepted, "")
	r, err := f.settle(t, participants.RefOf(cmd), nil, "card declined")
	if err != nil {
		t.Fatalf("Fail: %v", err)
	}
	if r.InReplyTo != cmd.MessageID || r.Outcome != message.Failure || r.Reason != "card declined" {
		t.Fatalf("failure reply %+v", r)
	}
	wantOutcome(t, f.exec(t, command(saga, "later", message.Compensate)), message.Success, participants.ReasonEmpty)
	if n := f.effects(t, saga, message.Compensate); n != 0 {
		t.Fatalf("%d compensation effects after a failed step, want 0", n)
	}
}

// A compensation that meets an accepted forward not cancellable is held:
// answered retry, nothing recorded; once the step is completed the next
// copy undoes it.
func TestCompensationHeldWhileAccepted(t *testing.T) {
	t.Parallel()
	f := setup(t)
	accepting(t, f, participants.Accepted(), nil)
	saga := uuid.New()
	cmd := command(saga, "later", message.Forward)
	f.exec(t, cmd)
	for range 2 {
		wantOutcome(t, f.exec(t, command(saga, "later", message.Compensate)), message.Retry, participants.ReasonHeld)
	}
	if n := f.effects(t, saga, message.Compensate); n != 0 {
		t.Fatalf("%d compensation effects while held, want 0", n)
	}
	if a := f.queried(t, saga, "later"); a.State != message.QueryAccepted {
		t.Fatalf("query while held: %s, want accepted", a.State)
	}
	if _, err := f.settle(t, participants.RefOf(cmd), nil, ""); err != nil {
		t.Fatalf("Complete while a compensation is held: %v", err)
	}
	wantOutcome(t, f.exec(t, command(saga, "later", message.Compensate)), message.Success, "")
	if n := f.effects(t, saga, message.Compensate); n != 1 {
		t.Fatalf("%d compensation effects after Complete, want 1", n)
	}
	if a := f.queried(t, saga, "later"); a.State != message.QueryCompensated {
		t.Fatalf("query after the compensation: %s, want compensated", a.State)
	}
}

// A compensation that meets a cancellable accepted forward settles it as
// failed (cancelled) and is empty; a late Complete or Fail is refused
// with ErrCancelled and enqueues nothing; copies of the forward are
// refused.
func TestCompensationCancelsCancellableAccepted(t *testing.T) {
	t.Parallel()
	f := setup(t)
	accepting(t, f, participants.AcceptedCancellable(), nil)
	saga := uuid.New()
	cmd := command(saga, "later", message.Forward)
	r := f.exec(t, cmd)
	if a, err := message.DecodeAcceptedAnswer(r.Payload); err != nil || !a.Cancellable || r.Outcome != message.Accepted {
		t.Fatalf("accepted cancellable reply %s %s: %+v %v", r.Outcome, r.Payload, a, err)
	}
	if r := f.exec(t, command(saga, "later", message.Forward)); string(r.Payload) != `{"cancellable":true}` {
		t.Fatalf("copy answered %s %s, want accepted and cancellable again", r.Outcome, r.Payload)
	}
	wantOutcome(t, f.exec(t, command(saga, "later", message.Compensate)), message.Success, participants.ReasonEmpty)
	var before int
	if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pt.outbox`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	for _, fail := range []string{"", "too late"} {
		err := pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
			if fail != "" {
				return f.p.Fail(f.ctx, tx, participants.RefOf(cmd), fail)
			}
			return f.p.Complete(f.ctx, tx, participants.RefOf(cmd), nil)
		})
		if !errors.Is(err, participants.ErrCancelled) || !errors.Is(err, participants.ErrSettled) {
			t.Fatalf("late settle (fail %q) after the compensation: %v, want ErrCancelled", fail, err)
		}
	}
	var after int
	if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pt.outbox`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("a refused settle enqueued %d replies", after-before)
	}
	wantOutcome(t, f.exec(t, command(saga, "later", message.Forward)), message.Failure, participants.ReasonCancelled)
}

// A late completion after a compensation that closed the step before any
// forward arrived is refused too, and so is an unknown reference.
func TestSettleRefusals(t *testing.T) {
	t.Parallel()
	f := setup(t)
	accepting(t, f, participants.Accepted(), nil)
	closed := uuid.New()
	wantOutcome(t, f.exec(t, command(closed, "later", message.Compensate)), message.Success, participants.ReasonEmpty)
	err := pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
		return f.p.Complete(f.ctx, tx, participants.Ref{SagaID: closed, Step: "later"}, nil)
	})
	if !errors.Is(err, participants.ErrCancelled) {
		t.Fatalf("Complete of a step closed by its compensation: %v, want ErrCancelled", err)
	}
	err = pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
		return f.p.Complete(f.ctx, tx, participants.Ref{SagaID: uuid.New(), Step: "later"}, nil)
	})
	if !errors.Is(err, participants.ErrUnknownRef) {
		t.Fatalf("Complete of an unknown reference: %v, want ErrUnknownRef", err)
	}
	err = pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
		return f.p.Complete(f.ctx, tx, participants.Ref{SagaID: closed, Step: "later"}, []int{1})
	})
	if err == nil || errors.Is(err, participants.ErrSettled) {
		t.Fatalf("Complete with an output that is not an object: %v, want an encoding error", err)
	}
}

// Complete commits with the caller's own writes, or not at all.
func TestCompleteIsPartOfTheCallersTransaction(t *testing.T) {
	t.Parallel()
	f := setup(t)
	accepting(t, f, participants.Accepted(), nil)
	saga := uuid.New()
	cmd := command(saga, "later", message.Forward)
	f.exec(t, cmd)
	boom := errors.New("the caller's own write failed")
	err := pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
		if err := f.p.Complete(f.ctx, tx, participants.RefOf(cmd), nil); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if a := f.queried(t, saga, "later"); a.State != message.QueryAccepted {
		t.Fatalf("after a rolled back Complete: %s, want still accepted", a.State)
	}
	if _, err := f.settle(t, participants.RefOf(cmd), nil, ""); err != nil {
		t.Fatalf("Complete after the rollback: %v", err)
	}
}

func TestRefStringRoundTrip(t *testing.T) {
	t.Parallel()
	ref := participants.Ref{SagaID: uuid.New(), Step: "charge-payment"}
	got, err := participants.ParseRef(ref.String())
	if err != nil || got != ref {
		t.Fatalf("ParseRef(%q) = %+v, %v", ref.String(), got, err)
	}
	for _, bad := range []string{"", "no-slash", uuid.NewString() + "/", "not-a-uuid/step"} {
		if _, err := participants.ParseRef(bad); err == nil {
			t.Errorf("ParseRef(%q) accepted", bad)
		}
	}
}

func compact(t *testing.T, raw []byte) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	return b.String()
}

// The accepted-query hook is called in the query's transaction for an
// accepted forward only; it needs a registered step.
func TestOnAcceptedQuery(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if err := f.p.OnAcceptedQuery("later", func(context.Context, pgx.Tx, participants.Ref) error { return nil }); err == nil {
		t.Fatal("hook registered for a step not handled")
	}
	accepting(t, f, participants.Accepted(), nil)
	var asked []participants.Ref
	if err := f.p.OnAcceptedQuery("later", func(ctx context.Context, tx pgx.Tx, ref participants.Ref) error {
		asked = append(asked, ref)
		_, err := tx.Exec(ctx, `INSERT INTO pt.effects VALUES ($1, $2, 'looked-up')`, ref.SagaID, ref.Step)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.p.OnAcceptedQuery("later", func(context.Context, pgx.Tx, participants.Ref) error { return nil }); err == nil {
		t.Fatal("a second hook registered")
	}
	saga := uuid.New()
	f.queried(t, saga, "later") // nothing recorded: closed, no hook
	accepted := uuid.New()
	f.exec(t, command(accepted, "later", message.Forward))
	if a := f.queried(t, accepted, "later"); a.State != message.QueryAccepted {
		t.Fatalf("query: %s", a.State)
	}
	if len(asked) != 1 || asked[0] != (participants.Ref{SagaID: accepted, Step: "later"}) || f.effects(t, accepted, "looked-up") != 1 {
		t.Fatalf("hook calls %v, want one for the accepted step, its write committed with the query", asked)
	}
}
