package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/orchestrator"
)

// The four-eyes page:
//
//	GET  /ui/proposals                       open proposals (?state= others)
//	POST /ui/proposals/{id}/{approve|reject} a decision (admin token, actor, reason)
//
// A saga's page lists its proposals and its operator audit (who proposed,
// who approved).

type proposalsData struct {
	State     string
	Proposals []orchestrator.Proposal
	Done      string
	Error     string
	Now       string
}

func (s *Server) proposalsPage(w http.ResponseWriter, r *http.Request) {
	d := proposalsData{}
	switch r.URL.Query().Get("done") {
	case orchestrator.DecisionApprove:
		d.Done = "Proposal approved: the action ran, audited with the proposer and you."
	case orchestrator.DecisionReject:
		d.Done = "Proposal rejected: nothing changed."
	}
	s.renderProposals(w, r, http.StatusOK, d)
}

func (s *Server) renderProposals(w http.ResponseWriter, r *http.Request, status int, d proposalsData) {
	pe, ok := s.eng.(ProposalEngine)
	if !ok {
		s.render(w, http.StatusNotImplemented, "error", "This server keeps no four-eyes proposals.")
		return
	}
	f, _, err := parseProposalFilter(r)
	if err != nil {
		s.render(w, http.StatusBadRequest, "error", err.Error()+".")
		return
	}
	if r.URL.Query().Get("state") == "" {
		f.State = orchestrator.ProposalProposed
	}
	d.State = f.State
	d.Now = time.Now().UTC().Format("2006-01-02 15:04:05 UTC")
	if d.Proposals, err = pe.Proposals(r.Context(), f); err != nil {
		s.internalPage(w, r, "list proposals (page)", err)
		return
	}
	s.render(w, status, "proposals", d)
}

// proposalDecisionPage decides a proposal from the page's forms (the gate
// checked the form's admin token).
func (s *Server) proposalDecisionPage(w http.ResponseWriter, r *http.Request) {
	pe, ok := s.eng.(ProposalEngine)
	if !ok {
		s.render(w, http.StatusNotImplemented, "error", "This server keeps no four-eyes proposals.")
		return
	}
	decision := r.PathValue("decision")
	if decision != orchestrator.DecisionApprove && decision != orchestrator.DecisionReject {
		s.render(w, http.StatusNotFound, "error", "Unknown decision "+echo(decision)+"; want approve or reject.")
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		s.render(w, http.StatusBadRequest, "error", "Proposal id "+echo(r.PathValue("id"))+" is not a positive number.")
		return
	}
	// Approving runs the action: the page asks first (a box to tick).
	if decision == orchestrator.DecisionApprove && r.PostFormValue("confirm") != "yes" {
		s.renderProposals(w, r, http.StatusBadRequest, proposalsData{Error: "Approving runs the action: tick the confirmation box. Nothing was changed."})
		return
	}
	_, _, aerr := s.decide(r, pe, id, decision, DecisionBody{Actor: r.PostFormValue("actor"), Reason: r.PostFormValue("reason")})
	if aerr != nil {
		d := proposalsData{Error: aerr.msg + ". Nothing was changed."}
		if aerr.requestID != "" {
			d.Error = internalText(Error{Error: aerr.msg, RequestID: aerr.requestID}) + " Reload the page to see what was recorded."
		}
		s.renderProposals(w, r, aerr.status, d)
		return
	}
	http.Redirect(w, r, "/ui/proposals?done="+url.QueryEscape(decision), http.StatusSeeOther)
}

// sagaGovernance is a saga's proposals and operator audit for its page;
// empty when the engine keeps neither.
func (s *Server) sagaGovernance(ctx context.Context, id uuid.UUID) ([]orchestrator.Proposal, []orchestrator.AuditEntry, error) {
	var props []orchestrator.Proposal
	var audit []orchestrator.AuditEntry
	var err error
	if pe, ok := s.eng.(ProposalEngine); ok {
		if props, err = pe.Proposals(ctx, orchestrator.ProposalFilter{SagaID: id, Limit: 50}); err != nil {
			return nil, nil, err
		}
	}
	if ar, ok := s.eng.(AuditReader); ok {
		if audit, err = ar.Audit(ctx, id, AuditLimit); err != nil {
			return nil, nil, err
		}
	}
	return props, audit, nil
}
