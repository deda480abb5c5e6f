package message

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Topics of the saga-level records (docs/conformance.md, "Outcomes, starts
// and events over Kafka"): what the orchestrator writes when a saga ends
// or is flagged, and what other services send it to start a saga or to
// deliver an external event.
const (
	OutcomeTopicDefault = "saga.outcomes"
	StartTopicDefault   = "saga.starts"
	EventTopicDefault   = "saga.events"
)

// Kinds of a SagaOutcome.
const (
	// OutcomeFinished: the saga reached a terminal state (completed,
	// compensated, failed; an operator's repair that ends a failed saga
	// again writes one, with its actor).
	OutcomeFinished = "finished"
	// OutcomeFlagged: the saga was flagged for an operator while it keeps
	// running (a step retried too long); Reason is the flag.
	OutcomeFlagged = "flagged"
)

// SagaOutcome is the value of an outcome record (keyed by the saga's
// aggregate id): one per end of a saga, one per flag.
type SagaOutcome struct {
	SagaID         uuid.UUID `json:"saga_id"`
	Type           string    `json:"type"`
	AggregateID    string    `json:"aggregate_id"`
	IdempotencyKey string    `json:"idempotency_key"`
	// Kind is OutcomeFinished or OutcomeFlagged.
	Kind string `json:"kind"`
	// State is the saga's state: the terminal one for a finished saga,
	// running or compensating for a flagged one.
	State string `json:"state"`
	// Reason says why (a failure, a refusal, a cancel, the flag); empty
	// for a plain completion.
	Reason string `json:"reason,omitempty"`
	// Actor is the operator or client whose action caused it, if any.
	Actor string `json:"actor,omitempty"`
	// Data is the saga's data at that moment (final for a finished saga).
	Data json.RawMessage `json:"data"`
	At   time.Time       `json:"at"`
}

// DecodeSagaOutcome parses an outcome record value. Errors wrap ErrInvalid.
func DecodeSagaOutcome(b []byte) (SagaOutcome, error) {
	var o SagaOutcome
	if err := strictJSON(b, &o); err != nil {
		return o, fmt.Errorf("outcome: %w", err)
	}
	switch {
	case o.SagaID == uuid.Nil:
		return o, fmt.Errorf("outcome: %w", missing("saga_id"))
	case o.Kind != OutcomeFinished && o.Kind != OutcomeFlagged:
		return o, fmt.Errorf("outcome: %w", &FieldError{Field: "kind", Reason: fmt.Sprintf("is %q, want %q or %q", o.Kind, OutcomeFinished, OutcomeFlagged)})
	}
	return o, nil
}

// StartRecord is the value of a start record: the body of POST /sagas.
type StartRecord struct {
	Type           string          `json:"type"`
	IdempotencyKey string          `json:"idempotency_key"`
	AggregateID    string          `json:"aggregate_id"`
	Data           json.RawMessage `json:"data"`
}

// DecodeStartRecord parses a start record value: one JSON object with no
// unknown field, type, idempotency_key and aggregate_id present, data an
// object. The engine checks the rest (a known type, the keys' bounds, the
// data storable) when it starts the saga. Errors wrap ErrInvalid.
func DecodeStartRecord(b []byte) (StartRecord, error) {
	var s StartRecord
	if err := strictJSON(b, &s); err != nil {
		return s, fmt.Errorf("start: %w", err)
	}
	switch {
	case s.Type == "":
		return s, fmt.Errorf("start: %w", missing("type"))
	case s.IdempotencyKey == "":
		return s, fmt.Errorf("start: %w", missing("idempotency_key"))
	case s.AggregateID == "":
		return s, fmt.Errorf("start: %w", missing("aggregate_id"))
	case len(s.Data) == 0 || s.Data[0] != '{':
		return s, fmt.Errorf("start: %w", &FieldError{Field: "data", Reason: "must be a JSON object"})
	}
	return s, nil
}

// EventRecord is the value of an event record: the body of POST
// /sagas/{id}/events, with the saga id in the body or in the record key.
type EventRecord struct {
	// SagaID is optional in the body; the record key is the saga id
	// otherwise (and, when both are there, they must agree).
	SagaID  uuid.UUID       `json:"saga_id"`
	Name    string          `json:"name"`
	EventID string          `json:"event_id"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// DecodeEventRecord parses an event record value with its record key:
// name and event_id present, the saga id from the body's saga_id or else
// the key (a UUID), the two the same when both are given. The engine
// checks the rest (SendEvent). Errors wrap ErrInvalid.
func DecodeEventRecord(key, b []byte) (EventRecord, error) {
	var e EventRecord
	if err := strictJSON(b, &e); err != nil {
		return e, fmt.Errorf("event: %w", err)
	}
	var fromKey uuid.UUID
	if len(key) > 0 {
		id, err := uuid.ParseBytes(key)
		if err != nil && e.SagaID == uuid.Nil {
			return e, fmt.Errorf("event: %w", &FieldError{Field: "key", Reason: fmt.Sprintf("is %q, not a saga id (UUID), and the body has no saga_id", cutText(string(key), 80))})
		}
		fromKey = id
	}
	switch {
	case e.SagaID == uuid.Nil && fromKey == uuid.Nil:
		return e, fmt.Errorf("event: %w", &FieldError{Field: "saga_id", Reason: "is missing from both the body and the record key"})
	case e.SagaID == uuid.Nil:
		e.SagaID = fromKey
	case fromKey != uuid.Nil && fromKey != e.SagaID:
		return e, fmt.Errorf("event: %w", &FieldError{Field: "saga_id", Reason: fmt.Sprintf("is %s but the record key is %s", e.SagaID, fromKey)})
	}
	switch {
	case e.Name == "":
		return e, fmt.Errorf("event %s: %w", e.SagaID, missing("name"))
	case strings.TrimSpace(e.EventID) == "":
		return e, fmt.Errorf("event %s: %w", e.SagaID, missing("event_id"))
	}
	return e, nil
}

// strictJSON decodes one JSON object from b into v, refusing unknown
// fields and trailing text. Errors wrap ErrInvalid.
func strictJSON(b []byte, v any) error {
	if len(b) > MaxPayloadBytes {
		return oversize(len(b), MaxPayloadBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: not a valid JSON body: %s", ErrInvalid, cutText(err.Error(), 200))
	}
	if dec.More() {
		return fmt.Errorf("%w: text after the JSON object", ErrInvalid)
	}
	return nil
}

// cutText cuts s to at most n bytes, at a character boundary.
func cutText(s string, n int) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && (s[n]&0xC0) == 0x80 {
		n--
	}
	return s[:n] + "..."
}
