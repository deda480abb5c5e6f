package conformance

import (
	"fmt"
	"slices"
	"strings"

	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/message"
)

// Record signatures (docs/DESIGN.md, "Signed records"): the kit plays the
// orchestrator with a key of its own, made for the run, and gives the
// participant that key (to verify commands with) and one of its own (to
// sign its replies with): EnvOrchestratorKeys, EnvParticipantKeys.

// makeKeys makes the run's keys and returns the participant's.
func (r *run) makeKeys() (message.Key, error) {
	var err error
	if r.orchKey, err = message.GenerateKey("conformance-orchestrator"); err != nil {
		return message.Key{}, err
	}
	if r.signer, err = message.NewSigner(r.orchKey); err != nil {
		return message.Key{}, err
	}
	part, err := message.GenerateKey("conformance-" + r.cfg.Participant)
	if err != nil {
		return message.Key{}, err
	}
	r.replyKeys = &message.Keyring{}
	return part, r.replyKeys.Add(r.cfg.Participant, part)
}

// sign (re)signs m with s: any signature headers are replaced.
func (r *run) sign(m *kafka.Message, s *message.Signer) {
	m.Headers = slices.DeleteFunc(slices.Clone(m.Headers), func(h kafka.Header) bool {
		return h.Key == message.HeaderKeyID || h.Key == message.HeaderSignature
	})
	h := map[string]string{}
	for _, x := range m.Headers {
		if _, dup := h[x.Key]; !dup {
			h[x.Key] = string(x.Value)
		}
	}
	s.Sign(m.Topic, m.Key, m.Value, h)
	m.Headers = append(m.Headers, kafka.Header{Key: message.HeaderKeyID, Value: []byte(h[message.HeaderKeyID])},
		kafka.Header{Key: message.HeaderSignature, Value: []byte(h[message.HeaderSignature])})
}

// poisonUnsigned is a well-formed command without its signature.
func poisonUnsigned(_ *run, _ message.Command, m kafka.Message) (kafka.Message, error) {
	m.Headers = slices.DeleteFunc(slices.Clone(m.Headers), func(h kafka.Header) bool {
		return h.Key == message.HeaderKeyID || h.Key == message.HeaderSignature
	})
	return m, nil
}

// poisonBadSignature is a command whose payload was changed after it was
// signed (the key id is the kit's, the signature no longer matches): what
// a party that can write the command topic but has no key sends.
func poisonBadSignature(_ *run, _ message.Command, m kafka.Message) (kafka.Message, error) {
	m.Value = []byte(strings.Replace(string(m.Value), `"mode":"`+ModeSucceed+`"`, `"mode":"`+ModeSucceed+`" `, 1))
	return m, nil
}

// verifyReply checks that a reply record is signed with the participant's
// key.
func (r *run) verifyReply(rec record) error {
	owner, err := message.Verify(r.replyKeys, rec.topic, rec.key, rec.value, rec.headers)
	if err != nil {
		return err
	}
	if owner != r.cfg.Participant {
		return fmt.Errorf("signed with a key of %q", owner)
	}
	return nil
}
