package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/saga"
)

// EventBody is the body of POST /sagas/{id}/events (the same envelope an
// event topic carries).
type EventBody struct {
	Name    string          `json:"name"`
	EventID string          `json:"event_id"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// EventAnswer is the answer of POST /sagas/{id}/events (202).
type EventAnswer struct {
	SagaID uuid.UUID  `json:"saga_id"`
	State  saga.State `json:"state"`
	// Duplicate: the saga had this event_id already; nothing changed.
	Duplicate bool `json:"duplicate"`
	// Taken: the saga was waiting for the event and took it (or refused
	// it); false when it is kept until the saga reaches its wait.
	Taken bool `json:"taken"`
}

// CancelBody is the body of POST /sagas/{id}/cancel.
type CancelBody struct {
	Reason string `json:"reason"`
	// Actor is who cancels (journaled); default "client".
	Actor string `json:"actor,omitempty"`
}

// CancelAnswer is the answer of POST /sagas/{id}/cancel (202).
type CancelAnswer struct {
	SagaID uuid.UUID  `json:"saga_id"`
	State  saga.State `json:"state"`
}

// MaxEventBodyBytes bounds the body of POST /sagas/{id}/events: the data
// bound plus room for the envelope.
const MaxEventBodyBytes = saga.MaxEventDataLen + 4<<10

func sagaIDOf(w http.ResponseWriter, r *http.Request) (uuid.UUID, bool) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		fail(w, http.StatusBadRequest, "id", "saga id %s is not a UUID", echo(r.PathValue("id")))
		return uuid.UUID{}, false
	}
	return id, true
}

// sendEvent is POST /sagas/{id}/events: 202 when recorded (or a
// duplicate), 400 for a malformed event, 404 for an unknown saga, 409
// for a finished saga, a name the definition never waits for, or one it
// waits for no more.
func (s *Server) sendEvent(w http.ResponseWriter, r *http.Request) {
	id, ok := sagaIDOf(w, r)
	if !ok {
		return
	}
	var b EventBody
	if !decodeBody(w, r, &b, MaxEventBodyBytes, fmt.Sprintf("the body is larger than %d bytes: event data may be at most %d bytes", MaxEventBodyBytes, saga.MaxEventDataLen)) {
		return
	}
	switch {
	case b.Name == "":
		fail(w, http.StatusBadRequest, "name", "name is required (the event a wait step waits for)")
		return
	case strings.TrimSpace(b.EventID) == "":
		fail(w, http.StatusBadRequest, "event_id", "event_id is required (the same event_id again is a no-op)")
		return
	case len(b.Data) > 0 && string(b.Data) != "null" && b.Data[0] != '{':
		fail(w, http.StatusBadRequest, "data", "data must be a JSON object")
		return
	}
	es, ok := s.eng.(EventSender)
	if !ok {
		fail(w, http.StatusNotImplemented, "", "this server's engine does not take events")
		return
	}
	res, err := es.SendEvent(r.Context(), id, b.Name, b.EventID, b.Data)
	var ee *saga.EventError
	switch {
	case errors.Is(err, saga.ErrNotFound):
		fail(w, http.StatusNotFound, "id", "no saga %s", id)
		return
	case errors.As(err, &ee):
		field, status := "name", http.StatusConflict
		if errors.Is(err, saga.ErrEventInvalid) {
			status = http.StatusBadRequest
			switch {
			case strings.Contains(ee.Why, "event_id"):
				field = "event_id"
			case strings.Contains(ee.Why, "data"):
				field = "data"
			}
		}
		if errors.Is(err, saga.ErrEventFinished) {
			field = "id"
		}
		fail(w, status, field, "%v", err)
		return
	case err != nil:
		s.failInternal(w, r, "send event to saga", err)
		return
	}
	writeJSON(w, http.StatusAccepted, EventAnswer{SagaID: id, State: res.Saga.State, Duplicate: res.Duplicate, Taken: res.Taken})
}

// cancel is POST /sagas/{id}/cancel: 202 when the saga turns back (it
// compensates what took effect, once its steps in flight have settled),
// 409 from the pivot on (nothing changes), 404 for an unknown saga.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	id, ok := sagaIDOf(w, r)
	if !ok {
		return
	}
	var b CancelBody
	if !decodeBody(w, r, &b, MaxActionBodyBytes, fmt.Sprintf("the body is larger than %d bytes", MaxActionBodyBytes)) {
		return
	}
	if b.Actor == "" {
		b.Actor = "client"
	}
	switch {
	case strings.TrimSpace(b.Reason) == "":
		fail(w, http.StatusBadRequest, "reason", "reason is required (why the saga is cancelled)")
		return
	case !plainText(b.Reason, 2000):
		fail(w, http.StatusBadRequest, "reason", "reason must be UTF-8 text without NUL characters, at most 2000 bytes")
		return
	case !plainText(b.Actor, 200):
		fail(w, http.StatusBadRequest, "actor", "actor must be UTF-8 text without NUL characters, at most 200 bytes")
		return
	}
	es, ok := s.eng.(EventSender)
	if !ok {
		fail(w, http.StatusNotImplemented, "", "this server's engine does not take cancels")
		return
	}
	in, err := es.Cancel(r.Context(), id, b.Actor, b.Reason)
	var refused *saga.RefusedError
	switch {
	case errors.Is(err, saga.ErrNotFound):
		fail(w, http.StatusNotFound, "id", "no saga %s", id)
		return
	case errors.As(err, &refused):
		fail(w, http.StatusConflict, "id", "cancel refused: %s", refused.Why)
		return
	case err != nil:
		s.failInternal(w, r, "cancel saga", err)
		return
	}
	writeJSON(w, http.StatusAccepted, CancelAnswer{SagaID: id, State: in.State})
}
