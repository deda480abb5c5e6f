package message

import (
	"bytes"
	"encoding/json"
)

// AcceptedAnswer is the optional payload of an accepted reply (outcome
// Accepted): what the participant says about the step it will settle
// later.
type AcceptedAnswer struct {
	// Cancellable: the participant can cancel the step while it is
	// accepted. A compensation that meets it settles it as failed (and
	// answers an empty compensation) instead of being held until the step
	// is settled; the orchestrator compensates such a step at once when the
	// saga turns back, instead of waiting for its final answer.
	Cancellable bool `json:"cancellable,omitempty"`
}

// DecodeAcceptedAnswer reads the payload of an accepted reply: empty or
// null is the zero answer. Errors wrap ErrInvalid and name the field.
func DecodeAcceptedAnswer(payload json.RawMessage) (AcceptedAnswer, error) {
	var a AcceptedAnswer
	p := bytes.TrimSpace(payload)
	if len(p) == 0 || string(p) == "null" {
		return a, nil
	}
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return AcceptedAnswer{}, &FieldError{Field: "payload", Reason: "of an accepted reply " + Truncate(err.Error(), 200) + `, want {"cancellable": true|false}`}
	}
	return a, nil
}

// Encode returns the answer as a reply payload: nil for the zero answer.
func (a AcceptedAnswer) Encode() json.RawMessage {
	if !a.Cancellable {
		return nil
	}
	return json.RawMessage(`{"cancellable":true}`)
}
