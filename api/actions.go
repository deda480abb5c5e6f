package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/saga"
)

// ActionBody is the body of POST /sagas/{id}/actions/{action}.
type ActionBody struct {
	Actor   string     `json:"actor"`
	Reason  string     `json:"reason"`
	Outcome saga.State `json:"outcome,omitempty"`
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
// door. A refused action writes nothing.
func (s *Server) act(r *http.Request, id uuid.UUID, action saga.OperatorAction, b ActionBody) (saga.Instance, *actionError) {
	switch action {
	case saga.ActionRetry, saga.ActionCompensate, saga.ActionResolve, saga.ActionQuery, saga.ActionCheck:
	default:
		return saga.Instance{}, &actionError{status: http.StatusNotFound, field: "action", msg: fmt.Sprintf("unknown action %s; want retry, compensate, resolve, query or check", echo(string(action)))}
	}
	if aerr := checkAction(action, b); aerr != nil {
		return saga.Instance{}, aerr
	}
	in, err := s.eng.Operate(r.Context(), id, saga.Operator{Action: action, Actor: b.Actor, Reason: b.Reason, Outcome: b.Outcome})
	var refused *saga.RefusedError
	switch {
	case errors.Is(err, saga.ErrNotFound):
		return in, &actionError{status: http.StatusNotFound, field: "id", msg: fmt.Sprintf("no saga %s", id)}
	case errors.As(err, &refused):
		return in, &actionError{status: http.StatusConflict, field: "action", msg: fmt.Sprintf("%s refused: %s", action, refused.Why)}
	case err != nil:
		status, body := s.internal(r, fmt.Sprintf("operator action %s on saga %s", action, id), err)
		return in, &actionError{status: status, msg: body.Error, requestID: body.RequestID}
	}
	return in, nil
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
	switch action {
	case saga.ActionRetry, saga.ActionCompensate, saga.ActionResolve, saga.ActionQuery, saga.ActionCheck:
	default:
		fail(w, http.StatusNotFound, "action", "unknown action %s; want retry, compensate, resolve, query or check", echo(string(action)))
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
	in, aerr := s.act(r, id, action, b)
	if aerr != nil {
		if aerr.requestID != "" {
			w.Header().Set("X-Request-Id", aerr.requestID)
		}
		writeJSON(w, aerr.status, Error{Error: aerr.msg, Field: aerr.field, RequestID: aerr.requestID})
		return
	}
	_, js, err := s.eng.GetPage(r.Context(), id, jp.Before, jp.Limit)
	if err != nil {
		s.failInternal(w, r, "read saga after operator action", err)
		return
	}
	writeJSON(w, http.StatusOK, s.detail(in, js))
}
