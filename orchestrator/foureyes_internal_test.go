package orchestrator

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/saga"
)

func TestDecideProposalRules(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	open := Proposal{ID: 7, Proposer: "alice", State: ProposalProposed, Expires: t0.Add(time.Hour)}
	decided := open
	decided.State, decided.Decider = ProposalRejected, "bob"
	for _, tc := range []struct {
		name     string
		p        Proposal
		decision string
		actor    string
		at       time.Time
		want     string
		refused  string
	}{
		{"another actor approves", open, DecisionApprove, "bob", t0, ProposalApproved, ""},
		{"another actor rejects", open, DecisionReject, "bob", t0, ProposalRejected, ""},
		{"the proposer withdraws", open, DecisionReject, "alice", t0, ProposalRejected, ""},
		{"the proposer cannot approve", open, DecisionApprove, "alice", t0, ProposalProposed, "alice proposed it and cannot approve"},
		{"case and spaces do not make another person", open, DecisionApprove, " ALICE ", t0, ProposalProposed, "cannot approve"},
		{"expired at the instant", open, DecisionApprove, "bob", t0.Add(time.Hour), ProposalExpired, "expired at 2026-01-01T01:00:00Z"},
		{"expired cannot be rejected either", open, DecisionReject, "bob", t0.Add(2 * time.Hour), ProposalExpired, "expired"},
		{"decided once", decided, DecisionApprove, "carol", t0, ProposalRejected, "rejected already (by bob)"},
		{"an actor is required", open, DecisionApprove, " ", t0, ProposalProposed, "an actor is required"},
		{"unknown decision", open, "maybe", "bob", t0, ProposalProposed, "unknown decision"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decideProposal(tc.p, tc.decision, tc.actor, tc.at)
			if got != tc.want {
				t.Errorf("state %q, want %q", got, tc.want)
			}
			var pe *ProposalError
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refused != "" && (!errors.As(err, &pe) || !strings.Contains(pe.Why, tc.refused) || pe.ID != 7 || !errors.Is(err, ErrProposalRefused)):
				t.Errorf("err %v, want a *ProposalError of proposal 7 saying %q", err, tc.refused)
			}
		})
	}
}

func TestFourEyesRequiresAndValidates(t *testing.T) {
	f := FourEyes{"place-order": {saga.ActionMarkDone, saga.ActionResolve}}
	for _, tc := range []struct {
		typ    string
		action saga.OperatorAction
		want   bool
	}{
		{"place-order", saga.ActionMarkDone, true},
		{"place-order", saga.ActionResolve, true},
		{"place-order", saga.ActionForceFail, false},
		{"refund", saga.ActionMarkDone, false},
	} {
		if got := f.Requires(tc.typ, tc.action); got != tc.want {
			t.Errorf("Requires(%s, %s) = %v, want %v", tc.typ, tc.action, got, tc.want)
		}
	}
	if err := f.Validate(); err != nil {
		t.Errorf("valid four eyes refused: %v", err)
	}
	for _, a := range []saga.OperatorAction{saga.ActionCheck, saga.ActionQuery, "mark-everything"} {
		err := FourEyes{"place-order": {a}}.Validate()
		if err == nil || !strings.Contains(err.Error(), string(a)) || !strings.Contains(err.Error(), "place-order") {
			t.Errorf("four eyes for %s: err %v, want a refusal naming the type and action", a, err)
		}
	}
}
