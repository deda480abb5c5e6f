package participants_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
)

// queried sends a query for step of saga and returns the decoded answer.
func (f *fixture) queried(t *testing.T, saga uuid.UUID, step string) message.QueryAnswer {
	t.Helper()
	r := f.exec(t, command(saga, step, message.Query))
	wantOutcome(t, r, message.Success, "")
	a, err := message.DecodeQueryAnswer(r.Payload)
	if err != nil {
		t.Fatalf("query answer %s: %v", r.Payload, err)
	}
	return a
}

// Every barrier history answers with its state; answers repeat (idempotent).
func TestQueryAnswersWhatTheBarrierRecorded(t *testing.T) {
	t.Parallel()
	f := setup(t)
	type out struct {
		Reservation string `json:"reservation"`
	}
	if err := f.p.Handle("ok", effect(participants.Success(out{"r-9"}), nil), effect(participants.Success(nil), nil)); err != nil {
		t.Fatal(err)
	}
	if err := f.p.Handle("no", effect(participants.Fail("out_of_stock"), nil), effect(participants.Success(nil), nil)); err != nil {
		t.Fatal(err)
	}
	if err := f.p.Handle("pivot", effect(participants.Success(nil), nil), nil); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, step string
		before     []message.Action
		want       message.QueryState
		output     string
	}{
		{"done", "ok", []message.Action{message.Forward}, message.QueryDone, `{"reservation":"r-9"}`},
		{"done without output", "pivot", []message.Action{message.Forward}, message.QueryDone, ""},
		{"failed", "no", []message.Action{message.Forward}, message.QueryFailed, ""},
		{"compensated", "ok", []message.Action{message.Forward, message.Compensate}, message.QueryCompensated, ""},
		{"empty compensation closed it", "ok", []message.Action{message.Compensate}, message.QueryClosed, ""},
		{"failed then compensated", "no", []message.Action{message.Forward, message.Compensate}, message.QueryFailed, ""},
		{"nothing recorded", "ok", nil, message.QueryClosed, ""},
		{"nothing recorded at a step without compensation", "pivot", nil, message.QueryClosed, ""},
	}
	for _, c := range cases {
		saga := uuid.New()
		for _, a := range c.before {
			f.exec(t, command(saga, c.step, a))
		}
		for k := range 2 {
			got := f.queried(t, saga, c.step)
			if got.State != c.want || string(got.Output) != c.output {
				t.Fatalf("%s (query %d): %s %s, want %s %s", c.name, k+1, got.State, got.Output, c.want, c.output)
			}
		}
	}
}

// A query that finds nothing closes the barrier: the late forward is
// refused and never executed, and later queries keep answering closed.
func TestQueryClosesTheBarrierAgainstALateForward(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if err := f.p.Handle("charge", effect(participants.Success(nil), nil), nil); err != nil {
		t.Fatal(err)
	}
	saga := uuid.New()
	if a := f.queried(t, saga, "charge"); a.State != message.QueryClosed {
		t.Fatalf("first query: %s, want closed", a.State)
	}
	late := f.exec(t, command(saga, "charge", message.Forward))
	wantOutcome(t, late, message.Failure, participants.ReasonClosedByQuery)
	if n := f.effects(t, saga, message.Forward); n != 0 {
		t.Fatalf("%d forward effects after the query closed the barrier, want 0", n)
	}
	if a := f.queried(t, saga, "charge"); a.State != message.QueryClosed {
		t.Fatalf("query after the refused forward: %s, want closed", a.State)
	}
}

// A query for a step the participant does not know is invalid (dead-lettered).
func TestQueryOfUnknownStepIsInvalid(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.execErr(command(uuid.New(), "nope", message.Query))
	if err == nil {
		t.Fatal("query of an unknown step was answered")
	}
}

// Forwards racing queries: either the forward committed first (done, one
// effect) or the query closed it (closed, no effect, forward refused).
func TestForwardRacingQuery(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if err := f.p.Handle("reserve", effect(participants.Success(nil), nil), effect(participants.Success(nil), nil)); err != nil {
		t.Fatal(err)
	}
	ids, fwd, qry := f.race(t, 40, message.Forward, message.Query)
	var done, closed int
	for i, id := range ids {
		a, err := message.DecodeQueryAnswer(qry[i].Payload)
		if err != nil {
			t.Fatalf("saga %d: query answer %s: %v", i, qry[i].Payload, err)
		}
		n := f.effects(t, id, message.Forward)
		switch {
		case a.State == message.QueryDone && n == 1:
			done++
			wantOutcome(t, fwd[i], message.Success, "")
		case a.State == message.QueryClosed && n == 0:
			closed++
			wantOutcome(t, fwd[i], message.Failure, participants.ReasonClosedByQuery)
		default:
			t.Fatalf("saga %d: query %s with %d effects", i, a.State, n)
		}
	}
	t.Logf("%d forwards first, %d queries first", done, closed)
}
