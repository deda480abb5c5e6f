package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
)

// Four eyes (the configuration names, per saga type, the operator actions
// that need a second person):
//
//	POST /sagas/{id}/actions/{action}  202 {"proposal": ...}: nothing changed
//	GET  /proposals?state=&saga_id=&limit=
//	POST /proposals/{id}/approve       {"actor","reason"}: the action runs
//	POST /proposals/{id}/reject        {"actor","reason"}
//
// Like every operator action these need the admin token; the actor is the
// body's, as for the other actions.

// ProposalEngine is what four eyes needs; the engine implements it. When
// the Engine given to New does not, actions apply at once and the
// proposal routes answer 501.
type ProposalEngine interface {
	Request(ctx context.Context, id uuid.UUID, op saga.Operator) (saga.Instance, *orchestrator.Proposal, error)
	DecideProposal(ctx context.Context, id int64, decision, actor, reason string) (orchestrator.Proposal, saga.Instance, error)
	Proposals(ctx context.Context, f orchestrator.ProposalFilter) ([]orchestrator.Proposal, error)
}

// DecisionBody is the body of POST /proposals/{id}/approve and /reject.
type DecisionBody struct {
	Actor  string `json:"actor"`
	Reason string `json:"reason,omitempty"`
}

func (s *Server) proposalEngine(w http.ResponseWriter) (ProposalEngine, bool) {
	pe, ok := s.eng.(ProposalEngine)
	if !ok {
		fail(w, http.StatusNotImplemented, "", "this server keeps no four-eyes proposals")
	}
	return pe, ok
}

// parseProposalFilter reads state, saga_id and limit; the field at fault
// on error.
func parseProposalFilter(r *http.Request) (orchestrator.ProposalFilter, string, error) {
	q := r.URL.Query()
	f := orchestrator.ProposalFilter{State: q.Get("state")}
	switch f.State {
	case "", orchestrator.ProposalProposed, orchestrator.ProposalApproved, orchestrator.ProposalRejected, orchestrator.ProposalExpired:
	default:
		return f, "state", fmt.Errorf("state %s: want proposed, approved, rejected or expired", echo(f.State))
	}
	if v := q.Get("saga_id"); v != "" {
		id, err := uuid.Parse(v)
		if err != nil {
			return f, "saga_id", fmt.Errorf("saga_id %s is not a UUID", echo(v))
		}
		f.SagaID = id
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > orchestrator.ProposalLimitMax {
			return f, "limit", fmt.Errorf("limit %s: want 1 to %d", echo(v), orchestrator.ProposalLimitMax)
		}
		f.Limit = n
	}
	return f, "", nil
}

func (s *Server) listProposals(w http.ResponseWriter, r *http.Request) {
	pe, ok := s.proposalEngine(w)
	if !ok {
		return
	}
	f, field, err := parseProposalFilter(r)
	if err != nil {
		fail(w, http.StatusBadRequest, field, "%v", err)
		return
	}
	list, err := pe.Proposals(r.Context(), f)
	if err != nil {
		s.failInternal(w, r, "list proposals", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"proposals": list})
}

func (s *Server) approveProposal(w http.ResponseWriter, r *http.Request) {
	s.decideProposal(w, r, orchestrator.DecisionApprove)
}

func (s *Server) rejectProposal(w http.ResponseWriter, r *http.Request) {
	s.decideProposal(w, r, orchestrator.DecisionReject)
}

func (s *Server) decideProposal(w http.ResponseWriter, r *http.Request, decision string) {
	pe, ok := s.proposalEngine(w)
	if !ok {
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		fail(w, http.StatusBadRequest, "id", "proposal id %s is not a positive number", echo(r.PathValue("id")))
		return
	}
	var b DecisionBody
	if !decodeBody(w, r, &b, MaxActionBodyBytes, fmt.Sprintf("the body is larger than %d bytes", MaxActionBodyBytes)) {
		return
	}
	p, in, aerr := s.decide(r, pe, id, decision, b)
	if aerr != nil {
		writeActionError(w, aerr)
		return
	}
	out := map[string]any{"proposal": p}
	if p.State == orchestrator.ProposalApproved {
		out["saga"] = s.detail(in, orchestrator.JournalSlice{})
	}
	writeJSON(w, http.StatusOK, out)
}

// decide validates and records a decision on proposal id: 400 without an
// actor (or a reason to reject), 404 no proposal, 409 refused by the four
// eyes rules or by the saga's state now.
func (s *Server) decide(r *http.Request, pe ProposalEngine, id int64, decision string, b DecisionBody) (orchestrator.Proposal, saga.Instance, *actionError) {
	bad := func(field, msg string) *actionError {
		return &actionError{status: http.StatusBadRequest, field: field, msg: msg}
	}
	actor, aerr := s.actor(r, b.Actor)
	if aerr != nil {
		return orchestrator.Proposal{}, saga.Instance{}, aerr
	}
	b.Actor = actor
	switch {
	case strings.TrimSpace(b.Actor) == "" || !plainText(b.Actor, 200):
		return orchestrator.Proposal{}, saga.Instance{}, bad("actor", "actor is required (who decides): UTF-8 text without NUL characters, at most 200 bytes")
	case decision == orchestrator.DecisionReject && strings.TrimSpace(b.Reason) == "":
		return orchestrator.Proposal{}, saga.Instance{}, bad("reason", "reason is required to reject (why)")
	case !plainText(b.Reason, 2000):
		return orchestrator.Proposal{}, saga.Instance{}, bad("reason", "reason must be UTF-8 text without NUL characters, at most 2000 bytes")
	}
	p, in, err := pe.DecideProposal(r.Context(), id, decision, b.Actor, b.Reason)
	var pr *orchestrator.ProposalError
	switch {
	case errors.Is(err, orchestrator.ErrProposalNotFound):
		return p, in, &actionError{status: http.StatusNotFound, field: "id", msg: fmt.Sprintf("no proposal %d", id)}
	case errors.As(err, &pr):
		return p, in, &actionError{status: http.StatusConflict, field: "id", msg: fmt.Sprintf("%s refused: %s", decision, pr.Why)}
	}
	return p, in, s.actionErr(r, fmt.Sprintf("%s proposal %d", decision, id), p.Action, p.SagaID, err)
}
