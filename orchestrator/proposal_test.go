package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// fourEyesEnv is an engine with four eyes on mark-done and force-fail of
// place-order, proposals living an hour.
func fourEyesEnv(t *testing.T) *engineEnv {
	return setupEngineWith(t, func(c *orchestrator.EngineConfig) {
		c.FourEyes = orchestrator.FourEyes{orderapi.SagaType: {saga.ActionMarkDone, saga.ActionForceFail}}
		c.ProposalTTL = time.Hour
	})
}

func TestFourEyesProposalDoesNothingUntilASecondActorApproves(t *testing.T) {
	t.Parallel()
	env := fourEyesEnv(t)
	ctx := context.Background()
	id := startToShipment(t, env, "o-four-eyes")
	flagShipment(t, env, id)
	before, _ := get(t, env, id)

	output := json.RawMessage(`{"shipment_id":"ship-by-hand"}`)
	_, p, err := env.eng.Request(ctx, id, saga.Operator{Action: saga.ActionMarkDone, Actor: "alice", Reason: "shipped with another carrier", Ticket: "INC-42", Output: output})
	if err != nil || p == nil {
		t.Fatalf("request: proposal %+v, err %v; want a proposal", p, err)
	}
	if p.State != orchestrator.ProposalProposed || p.Proposer != "alice" || p.Action != saga.ActionMarkDone || string(p.Args.Output) != string(output) {
		t.Fatalf("proposal %+v", p)
	}
	unchanged := func(when string) {
		t.Helper()
		now, _ := get(t, env, id)
		if now.Version != before.Version || now.Steps[3].State == saga.StepSucceeded {
			t.Fatalf("%s: the saga changed (version %d -> %d, shipment %s)", when, before.Version, now.Version, now.Steps[3].State)
		}
		if audit, err := env.eng.Audit(ctx, id, 10); err != nil || len(audit) != 0 {
			t.Fatalf("%s: audit %+v, %v; want none", when, audit, err)
		}
	}
	unchanged("after the proposal")

	var pe *orchestrator.ProposalError
	if _, _, err := env.eng.DecideProposal(ctx, p.ID, orchestrator.DecisionApprove, " Alice", ""); !errors.As(err, &pe) || !strings.Contains(pe.Why, "cannot approve") {
		t.Fatalf("the proposer approving: err %v, want a refusal", err)
	}
	unchanged("after the proposer's approval")

	got, in, err := env.eng.DecideProposal(ctx, p.ID, orchestrator.DecisionApprove, "bob", "checked the carrier's receipt")
	if err != nil {
		t.Fatalf("approve: %v", err)
	}
	if got.State != orchestrator.ProposalApproved || got.Decider != "bob" || got.Decided == nil || in.Steps[3].State != saga.StepSucceeded || in.Flag != "" {
		t.Fatalf("after approval: proposal %+v, shipment %s, flag %q", got, in.Steps[3].State, in.Flag)
	}
	audit, err := env.eng.Audit(ctx, id, 10)
	if err != nil || len(audit) != 1 {
		t.Fatalf("audit %+v, %v; want one entry", audit, err)
	}
	if a := audit[0]; a.Actor != "alice" || a.Approver != "bob" || a.Proposal == nil || *a.Proposal != p.ID || a.Ticket != "INC-42" || a.Action != "mark-done" {
		t.Fatalf("audit entry %+v; want alice approved by bob under proposal %d", a, p.ID)
	}
	if _, _, err := env.eng.DecideProposal(ctx, p.ID, orchestrator.DecisionApprove, "carol", ""); !errors.As(err, &pe) || !strings.Contains(pe.Why, "approved already") {
		t.Fatalf("approving twice: err %v, want a refusal", err)
	}
	list, err := env.eng.Proposals(ctx, orchestrator.ProposalFilter{SagaID: id})
	if err != nil || len(list) != 1 || list[0].State != orchestrator.ProposalApproved || list[0].Decider != "bob" {
		t.Fatalf("proposals of the saga: %+v, %v", list, err)
	}
}

func TestFourEyesExpiredProposalCannotBeApproved(t *testing.T) {
	t.Parallel()
	env := fourEyesEnv(t)
	ctx := context.Background()
	id := startToShipment(t, env, "o-expired")
	before, _ := get(t, env, id)
	_, p, err := env.eng.Request(ctx, id, saga.Operator{Action: saga.ActionForceFail, Actor: "alice", Reason: "carrier outage"})
	if err != nil || p == nil {
		t.Fatalf("request: %+v, %v", p, err)
	}
	if open, err := env.eng.Proposals(ctx, orchestrator.ProposalFilter{State: orchestrator.ProposalProposed}); err != nil || len(open) != 1 || open[0].ID != p.ID {
		t.Fatalf("open proposals %+v, %v; want proposal %d", open, err, p.ID)
	}
	env.clock.advance(time.Hour)
	if listed, err := env.eng.Proposals(ctx, orchestrator.ProposalFilter{State: orchestrator.ProposalExpired}); err != nil || len(listed) != 1 || listed[0].State != orchestrator.ProposalExpired {
		t.Fatalf("expired proposals %+v, %v; want proposal %d", listed, err, p.ID)
	}
	var pe *orchestrator.ProposalError
	got, _, err := env.eng.DecideProposal(ctx, p.ID, orchestrator.DecisionApprove, "bob", "")
	if !errors.As(err, &pe) || !strings.Contains(pe.Why, "expired") || got.State != orchestrator.ProposalExpired {
		t.Fatalf("approving an expired proposal: %+v, err %v; want a refusal", got, err)
	}
	if now, _ := get(t, env, id); now.Version != before.Version || now.State != saga.Running {
		t.Fatalf("the saga changed: %s version %d -> %d", now.State, before.Version, now.Version)
	}
	if open, err := env.eng.Proposals(ctx, orchestrator.ProposalFilter{State: orchestrator.ProposalProposed}); err != nil || len(open) != 0 {
		t.Fatalf("open proposals after expiry %+v, %v; want none", open, err)
	}
}

func TestFourEyesRejectAndRefusals(t *testing.T) {
	t.Parallel()
	env := fourEyesEnv(t)
	ctx := context.Background()
	id := startToShipment(t, env, "o-reject")
	before, _ := get(t, env, id)

	// An action the saga's state refuses is refused at once, not proposed.
	_, p, err := env.eng.Request(ctx, id, saga.Operator{Action: saga.ActionMarkDone, Actor: "alice", Reason: "x", Step: orderapi.StepReserveInventory})
	if !errors.Is(err, saga.ErrRefused) || p != nil {
		t.Fatalf("refused action: proposal %+v, err %v; want a refusal", p, err)
	}
	// An action without four eyes runs at once.
	if _, p, err := env.eng.Request(ctx, id, saga.Operator{Action: saga.ActionRetry, Actor: "alice", Reason: "re-send"}); err != nil || p != nil {
		t.Fatalf("retry: proposal %+v, err %v; want it applied", p, err)
	}
	before, _ = get(t, env, id)
	// Bulk refuses what needs four eyes.
	res, err := env.eng.OperateMatching(ctx, orchestrator.BulkRequest{Filter: orchestrator.Filter{Type: orderapi.SagaType},
		Operator: saga.Operator{Action: saga.ActionForceFail, Actor: "alice", Reason: "outage"}})
	if err != nil || res.Counts.Refused != 1 || res.Counts.Applied != 0 || !strings.Contains(res.Items[0].Reason, "four eyes") {
		t.Fatalf("bulk force-fail: %+v, %v; want it refused for four eyes", res, err)
	}

	_, p, err = env.eng.Request(ctx, id, saga.Operator{Action: saga.ActionForceFail, Actor: "alice", Reason: "outage"})
	if err != nil || p == nil {
		t.Fatalf("request: %+v, %v", p, err)
	}
	got, _, err := env.eng.DecideProposal(ctx, p.ID, orchestrator.DecisionReject, "bob", "the carrier is back")
	if err != nil || got.State != orchestrator.ProposalRejected || got.DecisionReason != "the carrier is back" {
		t.Fatalf("reject: %+v, %v", got, err)
	}
	if _, _, err := env.eng.DecideProposal(ctx, p.ID, orchestrator.DecisionApprove, "carol", ""); !errors.Is(err, orchestrator.ErrProposalRefused) {
		t.Fatalf("approving a rejected proposal: %v, want a refusal", err)
	}
	if _, _, err := env.eng.DecideProposal(ctx, 99999, orchestrator.DecisionApprove, "carol", ""); !errors.Is(err, orchestrator.ErrProposalNotFound) {
		t.Fatalf("unknown proposal: %v", err)
	}
	if now, _ := get(t, env, id); now.Version != before.Version || now.State != saga.Running {
		t.Fatalf("the saga changed: %s version %d -> %d", now.State, before.Version, now.Version)
	}
}
