package saga_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
)

// nameBasedID is a command id computed from the saga id alone (as before
// sagas had secrets): what anyone who knows the saga id could guess.
func nameBasedID(sagaID uuid.UUID, step string, action message.Action, attempt int) uuid.UUID {
	return uuid.NewSHA1(sagaID, []byte(step+"\x00"+string(action)+"\x00"+strconv.Itoa(attempt)))
}

func TestCommandIDWithSecret(t *testing.T) {
	t.Parallel()
	id := uuid.NewSHA1(uuid.NameSpaceOID, []byte("secret-ids"))
	a := saga.Instance{ID: id, Secret: bytes.Repeat([]byte{1}, saga.SecretBytes)}
	b := saga.Instance{ID: id, Secret: bytes.Repeat([]byte{2}, saga.SecretBytes)}
	seen := map[uuid.UUID]bool{}
	for _, step := range []string{"a", "b"} {
		for _, action := range []message.Action{message.Forward, message.Compensate} {
			for attempt := 1; attempt <= 3; attempt++ {
				c := a.CommandID(step, action, attempt)
				if c != a.CommandID(step, action, attempt) {
					t.Fatal("CommandID is not deterministic")
				}
				if seen[c] {
					t.Fatalf("collision at %s %s %d", step, action, attempt)
				}
				seen[c] = true
				if c.Version() != 8 || c.Variant() != uuid.RFC4122 {
					t.Fatalf("CommandID %s: version %d variant %v, want 8 and RFC 9562", c, c.Version(), c.Variant())
				}
				if c == b.CommandID(step, action, attempt) {
					t.Fatal("two secrets give the same id")
				}
				if c == nameBasedID(id, step, action, attempt) {
					t.Fatal("the secret id equals the one computed from the saga id alone")
				}
				if c == (&saga.Instance{ID: uuid.New(), Secret: a.Secret}).CommandID(step, action, attempt) {
					t.Fatal("two sagas with one secret give the same id")
				}
			}
		}
	}
	if s1, s2 := saga.NewSecret(), saga.NewSecret(); len(s1) != saga.SecretBytes || bytes.Equal(s1, s2) {
		t.Fatalf("NewSecret gave %d bytes, equal twice: %v", len(s1), bytes.Equal(s1, s2))
	}
}

// With a secret, the commands carry secret ids; a reply quoting the id
// computed from the saga id alone is stray, the real one is taken.
func TestDecideWithSecretRefusesGuessedReplies(t *testing.T) {
	t.Parallel()
	h := newHarness(t, pivotDef(t), uuid.NewSHA1(uuid.NameSpaceOID, []byte("guessed")))
	d := h.start()
	step := d.Send[0].Command.Step
	if got, want := d.Send[0].Command.MessageID, h.in.CommandID(step, message.Forward, 1); got != want {
		t.Fatalf("first command id %s, want the secret-derived %s", got, want)
	}
	guess := message.Reply{MessageID: uuid.New(), InReplyTo: nameBasedID(h.in.ID, step, message.Forward, 1),
		SagaID: h.in.ID, Step: step, Action: message.Forward, Outcome: message.Success}
	if _, err := saga.Decide(h.def, h.in, saga.Event{Kind: saga.EventReply, At: h.now, Reply: &guess}); !errors.Is(err, saga.ErrStrayReply) || !errors.Is(err, message.ErrInvalid) {
		t.Fatalf("a guessed in_reply_to: %v, want ErrStrayReply (invalid)", err)
	}
	real := guess
	real.InReplyTo = d.Send[0].Command.MessageID
	if d := h.must(saga.Event{Kind: saga.EventReply, At: h.now, Reply: &real}); !d.Changed {
		t.Fatal("the real answer changed nothing")
	}
}

// referenceCommandID is the documented derivation, written out with the
// standard library alone: the first 16 bytes of HMAC-SHA256(secret, saga
// id, step, 0, action, 0, decimal attempt), version 8, RFC 9562 variant.
// Ids already sent must keep answering across releases, so the
// derivation may not change.
func referenceCommandID(secret []byte, sagaID uuid.UUID, step string, action message.Action, attempt int) uuid.UUID {
	mac := hmac.New(sha256.New, secret)
	mac.Write(append(append(append(append(append(sagaID[:len(sagaID):len(sagaID)], step...), 0), action...), 0), strconv.Itoa(attempt)...))
	var id uuid.UUID
	copy(id[:], mac.Sum(nil))
	id[6] = id[6]&0x0f | 0x80
	id[8] = id[8]&0x3f | 0x80
	return id
}

// TestCommandIDMatchesItsDerivation: CommandID and the ids a decision
// sends (one keyed HMAC reused for every id of the decision) equal the
// documented derivation, for steps, actions and attempts of every shape.
func TestCommandIDMatchesItsDerivation(t *testing.T) {
	t.Parallel()
	secret := bytes.Repeat([]byte{7}, saga.SecretBytes)
	id := uuid.MustParse("1b4e28ba-2fa1-11d2-883f-0016d3cca427")
	in := saga.Instance{ID: id, Secret: secret}
	for _, step := range []string{"", "a", "reserve-inventory", "réserver-☃", strings.Repeat("x", 300)} {
		for _, action := range []message.Action{message.Forward, message.Compensate, message.Query} {
			for _, attempt := range []int{0, 1, 2, 9, 10, 12345, -1} {
				if got, want := in.CommandID(step, action, attempt), referenceCommandID(secret, id, step, action, attempt); got != want {
					t.Fatalf("CommandID(%q, %s, %d) = %s, want %s", step, action, attempt, got, want)
				}
			}
		}
	}
	// The ids decisions send, each from the one HMAC of its decision: the
	// start's, and the next step's after a reply whose in_reply_to the same
	// decision checked with that HMAC first.
	h := newHarness(t, pivotDef(t), uuid.NewSHA1(uuid.NameSpaceOID, []byte("derivation")))
	sent := h.start().Send
	for round := 0; round < 2 && len(sent) > 0; round++ {
		c := sent[0].Command
		if want := referenceCommandID(h.in.Secret, h.in.ID, c.Step, c.Action, c.Attempt); c.MessageID != want {
			t.Fatalf("round %d sent %s for %s attempt %d, want %s", round, c.MessageID, c.Step, c.Attempt, want)
		}
		r := message.Reply{MessageID: uuid.New(), InReplyTo: c.MessageID, SagaID: h.in.ID, Step: c.Step, Action: c.Action, Outcome: message.Success}
		sent = h.must(saga.Event{Kind: saga.EventReply, At: h.now, Reply: &r}).Send
	}
	if len(sent) == 0 {
		t.Fatal("the reply sent no next command")
	}
}
