package saga_test

import (
	"bytes"
	"errors"
	"strconv"
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
