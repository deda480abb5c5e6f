package orchestrator

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sagaflow/sagaflow/saga"
)

// FourEyes names, per saga type, the operator actions that need a second
// person: the first actor's request is a proposal that changes nothing
// until a different actor approves it (Engine.Request, Engine.Decide).
type FourEyes map[string][]saga.OperatorAction

// ProposalTTLDefault is how long a proposal may wait for its second person
// (EngineConfig.ProposalTTL).
const ProposalTTLDefault = 24 * time.Hour

// Requires reports whether action on a saga of sagaType needs four eyes.
func (f FourEyes) Requires(sagaType string, action saga.OperatorAction) bool {
	for _, a := range f[sagaType] {
		if a == action {
			return true
		}
	}
	return false
}

// fourEyesActions are the actions four eyes may be asked for: the ones that
// change a saga by an operator's word. query and check only ask
// participants, and the reconciler uses them.
var fourEyesActions = []saga.OperatorAction{saga.ActionRetry, saga.ActionCompensate, saga.ActionResolve,
	saga.ActionMarkDone, saga.ActionMarkCompensated, saga.ActionForceFail, saga.ActionResume}

// Validate names the first type and action four eyes cannot be asked for.
func (f FourEyes) Validate() error {
	types := make([]string, 0, len(f))
	for t := range f {
		types = append(types, t)
	}
	sort.Strings(types)
	for _, t := range types {
		for _, a := range f[t] {
			ok := false
			for _, k := range fourEyesActions {
				ok = ok || a == k
			}
			if !ok {
				return fmt.Errorf("four eyes for saga type %s: action %q cannot need a second person; want one of %s", t, a, ActionList(fourEyesActions))
			}
		}
	}
	return nil
}

// ActionList joins actions with commas.
func ActionList(actions []saga.OperatorAction) string {
	s := make([]string, len(actions))
	for i, a := range actions {
		s[i] = string(a)
	}
	return strings.Join(s, ", ")
}

// Proposal states.
const (
	ProposalProposed = "proposed"
	ProposalApproved = "approved"
	ProposalRejected = "rejected"
	ProposalExpired  = "expired"
)

// Decisions on a proposal.
const (
	DecisionApprove = "approve"
	DecisionReject  = "reject"
)

// ErrProposalRefused is wrapped by a *ProposalError.
var ErrProposalRefused = errors.New("proposal decision refused")

// ProposalError is a decision on a proposal that its rules refuse: the
// API answers 409 with Why.
type ProposalError struct {
	ID  int64
	Why string
}

func (e *ProposalError) Error() string {
	return fmt.Sprintf("%v: proposal %d: %s", ErrProposalRefused, e.ID, e.Why)
}
func (e *ProposalError) Unwrap() error { return ErrProposalRefused }

// sameActor reports whether two actor names are one person: compared
// without surrounding spaces and case.
func sameActor(a, b string) bool {
	return strings.EqualFold(strings.TrimSpace(a), strings.TrimSpace(b))
}

// decideProposal is the rule of a decision by actor on p at now: the state
// p goes to, or a *ProposalError. A proposal is decided once; one past its
// expiry goes to expired whatever the decision (and approve is refused);
// approving needs an actor other than the proposer, who may still reject
// (withdraw) it.
func decideProposal(p Proposal, decision, actor string, now time.Time) (string, error) {
	refuse := func(format string, args ...any) (string, error) {
		return p.State, &ProposalError{ID: p.ID, Why: fmt.Sprintf(format, args...)}
	}
	switch {
	case decision != DecisionApprove && decision != DecisionReject:
		return refuse("unknown decision %q; want approve or reject", decision)
	case strings.TrimSpace(actor) == "":
		return refuse("an actor is required")
	case p.State != ProposalProposed:
		return refuse("it is %s already (by %s)", p.State, cmpOr(p.Decider, "nobody"))
	case !now.Before(p.Expires):
		return ProposalExpired, &ProposalError{ID: p.ID, Why: fmt.Sprintf("it expired at %s unapproved; propose again", p.Expires.UTC().Format(time.RFC3339))}
	case decision == DecisionApprove && sameActor(actor, p.Proposer):
		return refuse("%s proposed it and cannot approve it too; four eyes needs a different actor", p.Proposer)
	case decision == DecisionApprove:
		return ProposalApproved, nil
	}
	return ProposalRejected, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
