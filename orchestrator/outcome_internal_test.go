package orchestrator

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
)

// TestOutcomeOf: which decisions write an outcome record, and what it says.
func TestOutcomeOf(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	inst := func(st saga.State, finished bool, flag string) saga.Instance {
		in := saga.Instance{ID: uuid.New(), Type: "t", AggregateID: "agg", IdempotencyKey: "key", State: st,
			Data: json.RawMessage(`{"x":1}`), UpdatedAt: at, Flag: flag, Version: 7,
			Steps: []saga.StepState{{Name: "a", State: saga.StepSucceeded}, {Name: "b", State: saga.StepFailed, LastError: "declined"}}}
		if finished {
			in.FinishedAt = &at
		}
		return in
	}
	earlier := at.Add(-time.Minute)
	resolvedBefore := inst(saga.Failed, false, "")
	resolvedBefore.FinishedAt = &earlier
	cases := []struct {
		name   string
		d      saga.Decision
		want   bool
		kind   string
		state  string
		reason string
		actor  string
	}{
		{name: "unchanged (a replayed reply)", d: saga.Decision{Next: inst(saga.Completed, true, "")}},
		{name: "moved, not ended", d: saga.Decision{Changed: true, Next: inst(saga.Running, false, "")}},
		{name: "changed a saga finished before (a late answer journaled)", d: saga.Decision{Changed: true, Next: resolvedBefore}},
		{name: "completed", d: saga.Decision{Changed: true, Next: inst(saga.Completed, true, "")},
			want: true, kind: message.OutcomeFinished, state: "completed"}, // no reason, whatever its steps
		{name: "compensated, reason from the failed step", d: saga.Decision{Changed: true, Next: inst(saga.Compensated, true, "")},
			want: true, kind: message.OutcomeFinished, state: "compensated", reason: `step "b" failed: declined`},
		{name: "failed by an operator", d: saga.Decision{Changed: true, Next: inst(saga.Failed, true, "forced"), Flagged: true,
			Journal: []saga.JournalEntry{{Event: "operator force-fail", Actor: "ops", Reason: "hotel closed"}}},
			want: true, kind: message.OutcomeFinished, state: "failed", reason: "hotel closed", actor: "ops"},
		{name: "flagged", d: saga.Decision{Changed: true, Flagged: true, Next: inst(saga.Running, false, "step r1 retried 3 times")},
			want: true, kind: message.OutcomeFlagged, state: "running", reason: "step r1 retried 3 times"},
	}
	for _, c := range cases {
		o, ok := outcomeOf(&c.d)
		if ok != c.want {
			t.Errorf("%s: outcome written %v, want %v", c.name, ok, c.want)
			continue
		}
		if !ok {
			continue
		}
		n := c.d.Next
		if o.Kind != c.kind || o.State != c.state || o.Reason != c.reason || o.Actor != c.actor {
			t.Errorf("%s: kind %q state %q reason %q actor %q, want %q %q %q %q", c.name, o.Kind, o.State, o.Reason, o.Actor, c.kind, c.state, c.reason, c.actor)
		}
		if o.SagaID != n.ID || o.Type != "t" || o.AggregateID != "agg" || o.IdempotencyKey != "key" || string(o.Data) != `{"x":1}` {
			t.Errorf("%s: outcome %+v does not carry the saga's fields", c.name, o)
		}
		if !o.At.Equal(at.Truncate(time.Microsecond)) {
			t.Errorf("%s: at %s, want %s to the microsecond", c.name, o.At, at)
		}
	}
}

// TestOutcomeMessage: the record is keyed by the aggregate id, carries the
// wire headers, decodes as a message.SagaOutcome, and has the same message
// id however often it is built (a relay's re-publish is deduped).
func TestOutcomeMessage(t *testing.T) {
	t.Parallel()
	e := &Engine{cfg: EngineConfig{}.WithDefaults()}
	at := time.Now()
	d := saga.Decision{Changed: true, Next: saga.Instance{ID: uuid.New(), Type: "t", AggregateID: "agg", IdempotencyKey: "k",
		State: saga.Completed, UpdatedAt: at, FinishedAt: &at, Version: 3}}
	m, ok, err := e.outcomeMessage(&d)
	if err != nil || !ok {
		t.Fatalf("outcomeMessage: %v %v", ok, err)
	}
	again, _, _ := e.outcomeMessage(&d)
	if m.Topic != OutcomeTopicDefault || m.Key != "agg" || m.Headers[message.HeaderSagaID] != d.Next.ID.String() {
		t.Fatalf("record %s key %q headers %v", m.Topic, m.Key, m.Headers)
	}
	if m.Headers[message.HeaderMessageID] != again.Headers[message.HeaderMessageID] {
		t.Fatalf("message ids %s and %s for the same end", m.Headers[message.HeaderMessageID], again.Headers[message.HeaderMessageID])
	}
	o, err := message.DecodeSagaOutcome(m.Value)
	if err != nil {
		t.Fatal(err)
	}
	if o.State != "completed" || string(o.Data) != "{}" {
		t.Fatalf("decoded %+v, want completed with data {}", o)
	}
}
