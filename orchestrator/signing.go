package orchestrator

import (
	"errors"
	"fmt"
	"slices"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
)

// Signing authenticates the engine's commands and its participants'
// replies (the wire contract: docs/DESIGN.md, "Signed records"). The zero
// value is off: commands go unsigned and every reply is taken.
type Signing struct {
	// Commands, if set, signs every command the engine writes to its
	// outbox; the signature is stored with the row, so the relay and the
	// dispatcher publish it as is. Nil: commands are unsigned.
	Commands *message.Signer
	// Replies, if set, holds the participants' keys (each owned by the
	// participant's name): a reply for a step is taken only when signed
	// by a key of that step's participant (see VerifyReply). Nil: replies
	// are not checked.
	Replies *message.Keyring
	// AllowUnsigned takes unsigned replies from every participant (a
	// migration window while participants are given keys). A reply that
	// is signed is checked all the same. Default false.
	AllowUnsigned bool
	// AllowUnsignedFrom takes unsigned replies from these participants
	// only.
	AllowUnsignedFrom []string
}

// checkReplies reports whether replies are checked at all.
func (s *Signing) checkReplies() bool { return s.Replies != nil }

// ErrReplySigner is wrapped by the error for a reply that is not signed
// by the participant of the step it answers (unsigned when that is not
// allowed, or signed with another principal's key). It wraps
// message.ErrInvalid: the reply is dead-lettered with the reason and never
// applied.
var ErrReplySigner = fmt.Errorf("%w: reply not signed by the step's participant", message.ErrInvalid)

// VerifyReply checks the signature of the reply record m (already decoded
// as r, its headers checked) and records its signer in r.SignedBy (the
// participant owning the key; "" when unsigned), for ApplyReplies, which
// checks it against the step's participant. With Signing.Replies unset it
// does nothing. A record signed with a key nobody knows, or whose
// signature does not match, returns an error wrapping
// message.ErrBadSignature; an unsigned one is left to ApplyReplies, which
// knows whether its participant may answer unsigned.
func (e *Engine) VerifyReply(m message.Record, r *message.Reply) error {
	s := &e.cfg.Signing
	if !s.checkReplies() {
		return nil
	}
	owner, err := message.Verify(s.Replies, m.Topic, m.Key, m.Value, m.Headers)
	switch {
	case errors.Is(err, message.ErrUnsigned):
		r.SignedBy = ""
		return nil
	case err != nil:
		return fmt.Errorf("reply %s for saga %s step %q: %w", r.MessageID, r.SagaID, r.Step, err)
	}
	r.SignedBy = owner
	return nil
}

// checkSigner refuses reply r for step of def unless it is signed by the
// step's participant, or unsigned from a participant allowed to answer
// unsigned. A step the definition does not have is left to Decide.
func (e *Engine) checkSigner(def *saga.Def, r *message.Reply) error {
	s := &e.cfg.Signing
	if !s.checkReplies() {
		return nil
	}
	i, ok := def.StepIndex(r.Step)
	if !ok {
		return nil
	}
	want := def.Steps[i].Participant
	switch {
	case r.SignedBy != "" && r.SignedBy == want:
		return nil
	case r.SignedBy != "":
		e.countUnauthenticated(want, "refused")
		return fmt.Errorf("%w: reply %s for saga %s step %q (participant %q) is signed with a key of %q", ErrReplySigner, r.MessageID, r.SagaID, r.Step, want, r.SignedBy)
	}
	if s.AllowUnsigned || slices.Contains(s.AllowUnsignedFrom, want) {
		e.countUnauthenticated(want, "taken")
		return nil
	}
	e.countUnauthenticated(want, "refused")
	return fmt.Errorf("%w: reply %s for saga %s step %q is unsigned, and participant %q must sign its replies (security.allow_unsigned_replies to take unsigned ones during a migration)", ErrReplySigner, r.MessageID, r.SagaID, r.Step, want)
}

func (e *Engine) countUnauthenticated(participant, outcome string) {
	if e.cfg.Metrics != nil {
		e.cfg.Metrics.unauthenticated.WithLabelValues(participant, outcome).Inc()
	}
}
