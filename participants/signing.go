package participants

import (
	"errors"
	"fmt"

	"github.com/sagaflow/sagaflow/message"
)

// orchestratorKeyOwner owns the orchestrator's keys in a participant's
// keyring (the name errors give the signer of a command).
const orchestratorKeyOwner = "orchestrator"

// signing is a participant's part of the record signatures (the wire
// contract: docs/DESIGN.md, "Signed records"): the orchestrator's keys it
// verifies commands with, and its own key it signs replies with.
type signing struct {
	commands      *message.Keyring // nil: commands are not verified
	allowUnsigned bool
	replies       *message.Signer // nil: replies are unsigned
}

func newSigning(c *Config) (signing, error) {
	var s signing
	if len(c.CommandKeys) > 0 {
		s.commands = &message.Keyring{}
		for i, k := range c.CommandKeys {
			if err := s.commands.Add(orchestratorKeyOwner, k); err != nil {
				return signing{}, fmt.Errorf("Config.CommandKeys[%d]: %w", i, err)
			}
		}
	}
	s.allowUnsigned = c.AllowUnsignedCommands
	if c.ReplyKey.ID != "" || len(c.ReplyKey.Secret) > 0 {
		sg, err := message.NewSigner(c.ReplyKey)
		if err != nil {
			return signing{}, fmt.Errorf("Config.ReplyKey: %w", err)
		}
		s.replies = sg
	}
	return s, nil
}

// verifyCommand checks the signature of command record m with the
// orchestrator's keys (Config.CommandKeys). An unsigned command is taken
// only with Config.AllowUnsignedCommands; one signed with a key the
// participant does not know, or whose signature does not match, never.
// The error wraps message.ErrInvalid: the command is dead-lettered with it
// as the reason, unexecuted.
func (p *Participant) verifyCommand(m message.Record) error {
	if p.signing.commands == nil {
		return nil
	}
	_, err := message.Verify(p.signing.commands, m.Topic, m.Key, m.Value, m.Headers)
	if errors.Is(err, message.ErrUnsigned) && p.signing.allowUnsigned {
		return nil
	}
	if errors.Is(err, message.ErrUnsigned) {
		return fmt.Errorf("%w; participant %q requires signed commands (participants.Config.AllowUnsignedCommands takes unsigned ones during a migration)", err, p.cfg.Name)
	}
	return err
}

// signReply signs the reply record about to be enqueued, when the
// participant has a key of its own (Config.ReplyKey).
func (p *Participant) signReply(topic, key string, value []byte, headers map[string]string) {
	if s := p.signing.replies; s != nil {
		s.SignString(topic, key, value, headers)
	}
}
