package message

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// QueryState is what a participant's barrier recorded for a step's forward,
// as the answer to a query command.
type QueryState string

const (
	// QueryDone: the forward succeeded and was not compensated; the answer
	// carries its recorded output.
	QueryDone QueryState = "done"
	// QueryFailed: the forward answered a business failure; nothing of it
	// remains.
	QueryFailed QueryState = "failed"
	// QueryCompensated: the forward succeeded and was compensated since.
	QueryCompensated QueryState = "compensated"
	// QueryClosed: nothing was recorded for the forward, and from now on a
	// late forward is refused (the query closed the barrier, the way an
	// empty compensation does; or a compensation had closed it already).
	QueryClosed QueryState = "closed"
	// QueryAccepted: the forward was answered accepted and is not settled
	// yet (the participant will complete or fail it); still pending, and
	// the barrier is not closed.
	QueryAccepted QueryState = "accepted"
)

// Valid reports whether s is one of the known query states.
func (s QueryState) Valid() bool {
	switch s {
	case QueryDone, QueryFailed, QueryCompensated, QueryClosed, QueryAccepted:
		return true
	}
	return false
}

// QueryAnswer is the payload of a successful reply to a query command.
type QueryAnswer struct {
	State QueryState `json:"state"`
	// Output is the forward's recorded output (a JSON object), with
	// QueryDone only; absent when the forward recorded none.
	Output json.RawMessage `json:"output,omitempty"`
}

// DecodeQueryAnswer reads the payload of a successful query reply. Errors
// wrap ErrInvalid and name the field: a missing or unknown state, an output
// that is not a JSON object, an output with a state other than done.
func DecodeQueryAnswer(payload json.RawMessage) (QueryAnswer, error) {
	var a QueryAnswer
	if len(bytes.TrimSpace(payload)) == 0 || string(bytes.TrimSpace(payload)) == "null" {
		return a, missing("payload")
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return QueryAnswer{}, &FieldError{Field: "payload", Reason: "of a query answer " + Truncate(err.Error(), 200) + `, want {"state": ..., "output": {...}}`}
	}
	if !a.State.Valid() {
		return QueryAnswer{}, &FieldError{Field: "payload.state", Reason: fmt.Sprintf("is %s, want done, failed, compensated, closed or accepted", quote(string(a.State), 64))}
	}
	out := bytes.TrimSpace(a.Output)
	if string(out) == "null" {
		out = nil
	}
	if len(out) > 0 {
		if out[0] != '{' {
			return QueryAnswer{}, &FieldError{Field: "payload.output", Reason: "is not a JSON object"}
		}
		if a.State != QueryDone {
			return QueryAnswer{}, &FieldError{Field: "payload.output", Reason: fmt.Sprintf("is set with state %q; only done carries an output", a.State)}
		}
	}
	a.Output = out
	return a, nil
}

// Encode returns the answer as a reply payload.
func (a QueryAnswer) Encode() (json.RawMessage, error) {
	if !a.State.Valid() {
		return nil, fmt.Errorf("query answer: state %q, want done, failed, compensated, closed or accepted", a.State)
	}
	if len(a.Output) > 0 && a.State != QueryDone {
		return nil, fmt.Errorf("query answer: output with state %q; only done carries one", a.State)
	}
	return json.Marshal(a)
}
