package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
)

// ActionBody is the body of POST /sagas/{id}/actions/{action}.
type ActionBody struct {
	Actor   string     `json:"actor"`
	Reason  string     `json:"reason"`
	Outcome saga.State `json:"outcome,omitempty"`
	// Ticket is an optional reference (incident, change request) journaled
	// and audited with the action.
	Ticket string `json:"ticket,omitempty"`
	// Step (mark-done, mark-compensated: the active step when empty;
	// resume: required) names the step a repair acts on.
	Step string `json:"step,omitempty"`
	// Output (mark-done): the step's output as the operator found it.
	Output json.RawMessage `json:"output,omitempty"`
	// Note (mark-compensated): what the operator did instead.
	Note string `json:"note,omitempty"`
}

// actionNames is the list of the single-saga operator actions.
const actionNames = "retry, compensate, resolve, query, check, mark-done, mark-compensated, force-fail or resume"

// knownAction reports whether a is an operator action on one saga.
func knownAction(a saga.OperatorAction) bool {
	switch a {
	case saga.ActionRetry, saga.ActionCompensate, saga.ActionResolve, saga.ActionQuery, saga.ActionCheck:
		return true
	}
	return a.Repair()
}

// operator is the saga.Operator of an action body.
func (b ActionBody) operator(action saga.OperatorAction) saga.Operator {
	return saga.Operator{Action: action, Actor: b.Actor, Reason: b.Reason, Outcome: b.Outcome,
		Ticket: b.Ticket, Step: b.Step, Output: b.Output, Note: b.Note}
}

// actionError is a refused or failed operator action: the HTTP status, the
// field at fault, a message for a person and, for a 5xx, the request id
// the log has the details under.
type actionError struct {
	status    int
	field     string
	msg       string
	requestID string
}

// plainText reports whether v is storable text of at most max bytes.
func plainText(v string, max int) bool {
	return len(v) <= max && utf8.ValidString(v) && !strings.ContainsRune(v, 0)
}

// act validates and applies an operator action through the engine's one
// door, or, when four eyes applies, records it as a proposal (returned;
// nothing changed). A refused action writes nothing.
func (s *Server) act(r *http.Request, id uuid.UUID, action saga.OperatorAction, b ActionBody) (saga.Instance, *orchestrator.Proposal, *actionError) {
	if !knownAction(action) {
		return saga.Instance{}, nil, &actionError{status: http.StatusNotFound, field: "action", msg: fmt.Sprintf("unknown action %s; want %s", echo(string(action)), actionNames)}
	}
	actor, aerr := s.actor(r, b.Actor)
	if aerr != nil {
		return saga.Instance{}, nil, aerr
	}
	b.Actor = actor
	if aerr := checkAction(action, b); aerr != nil {
		return saga.Instance{}, nil, aerr
	}
	var in saga.Instance
	var p *orchestrator.Proposal
	var err error
	if pe, ok := s.eng.(ProposalEngine); ok {
		in, p, err = pe.Request(r.Context(), id, b.operator(action))
	} else {
		in, err = s.eng.Operate(r.Context(), id, b.operator(action))
	}
	return in, p, s.actionErr(r, fmt.Sprintf("operator action %s on saga %s", action, id), action, id, err)
}

// actionErr maps an error of an operator action on saga id to its answer
// (nil for none): 404 no saga, 409 refused, else 5xx.
func (s *Server) actionErr(r *http.Request, what string, action saga.OperatorAction, id uuid.UUID, err error) *actionError {
	var refused *saga.RefusedError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, saga.ErrNotFound):
		return &actionError{status: http.StatusNotFound, field: "id", msg: fmt.Sprintf("no saga %s", id)}
	case errors.As(err, &refused):
		return &actionError{status: http.StatusConflict, field: "action", msg: fmt.Sprintf("%s refused: %s", action, refused.Why)}
	}
	status, body := s.internal(r, what, err)
	return &actionError{status: status, msg: body.Error, requestID: body.RequestID}
}

// checkAction validates the actor, reason and outcome of an operator
// action (400 with the field at fault).
func checkAction(action saga.OperatorAction, b ActionBody) *actionError {
	bad := func(field, msg string) *actionError {
		return &actionError{status: http.StatusBadRequest, field: field, msg: msg}
	}
	switch {
	case strings.TrimSpace(b.Actor) == "":
		return bad("actor", "actor is required (who acts)")
	case strings.TrimSpace(b.Reason) == "":
		return bad("reason", "reason is required (why)")
	case !plainText(b.Actor, 200):
		return bad("actor", "actor must be UTF-8 text without NUL characters, at most 200 bytes")
	case !plainText(b.Reason, 2000):
		return bad("reason", "reason must be UTF-8 text without NUL characters, at most 2000 bytes")
	case action == saga.ActionResolve && b.Outcome != saga.Completed && b.Outcome != saga.Compensated:
		return bad("outcome", "outcome must be completed or compensated")
	case !plainText(b.Ticket, saga.MaxTicketBytes):
		return bad("ticket", fmt.Sprintf("ticket must be UTF-8 text without NUL characters, at most %d bytes", saga.MaxTicketBytes))
	case !plainText(b.Step, 200):
		return bad("step", "step must be UTF-8 text without NUL characters, at most 200 bytes")
	case !plainText(b.Note, 2000):
		return bad("note", "note must be UTF-8 text without NUL characters, at most 2000 bytes")
	case action == saga.ActionResume && strings.TrimSpace(b.Step) == "":
		return bad("step", "step is required for resume (the step the saga goes forward from)")
	case len(b.Output) > 0 && action != saga.ActionMarkDone:
		return bad("output", "output is taken by mark-done only")
	case len(b.Output) > 0 && !json.Valid(b.Output):
		return bad("output", "output must be JSON")
	}
	return nil
}

func (s *Server) operate(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		fail(w, http.StatusBadRequest, "id", "saga id %s is not a UUID", echo(r.PathValue("id")))
		return
	}
	action := saga.OperatorAction(r.PathValue("action"))
	if !knownAction(action) {
		fail(w, http.StatusNotFound, "action", "unknown action %s; want %s", echo(string(action)), actionNames)
		return
	}
	jp, field, err := ParseJournalPage(r.URL.Query())
	if err != nil {
		fail(w, http.StatusBadRequest, field, "%v", err)
		return
	}
	var b ActionBody
	if !decodeBody(w, r, &b, MaxActionBodyBytes, fmt.Sprintf("the body is larger than %d bytes", MaxActionBodyBytes)) {
		return
	}
	in, p, aerr := s.act(r, id, action, b)
	if aerr != nil {
		writeActionError(w, aerr)
		return
	}
	if p != nil {
		// Four eyes: nothing changed; a second person decides.
		writeJSON(w, http.StatusAccepted, map[string]any{"proposal": p})
		return
	}
	_, js, err := s.eng.GetPage(r.Context(), id, jp.Before, jp.Limit)
	if err != nil {
		s.failInternal(w, r, "read saga after operator action", err)
		return
	}
	writeJSON(w, http.StatusOK, s.detail(in, js))
}

// writeActionError answers aerr.
func writeActionError(w http.ResponseWriter, aerr *actionError) {
	if aerr.requestID != "" {
		w.Header().Set("X-Request-Id", aerr.requestID)
	}
	writeJSON(w, aerr.status, Error{Error: aerr.msg, Field: aerr.field, RequestID: aerr.requestID})
}

// AuditReader is what GET /sagas/{id}/audit needs; the engine implements
// it. When the Engine given to New does not, the route answers 501.
type AuditReader interface {
	Audit(ctx context.Context, id uuid.UUID, limit int) ([]orchestrator.AuditEntry, error)
}

// AuditLimit bounds the audit rows GET /sagas/{id}/audit answers.
const AuditLimit = 1000

// sagaAudit answers a saga's operator audit: every operator action that
// changed it, with actor, reason, ticket and the saga before and after.
func (s *Server) sagaAudit(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		fail(w, http.StatusBadRequest, "id", "saga id %s is not a UUID", echo(r.PathValue("id")))
		return
	}
	ar, ok := s.eng.(AuditReader)
	if !ok {
		fail(w, http.StatusNotImplemented, "", "this server keeps no operator audit")
		return
	}
	log, err := ar.Audit(r.Context(), id, AuditLimit)
	if err != nil {
		s.failInternal(w, r, "read the operator audit", err)
		return
	}
	if log == nil {
		log = []orchestrator.AuditEntry{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"audit": log})
}
