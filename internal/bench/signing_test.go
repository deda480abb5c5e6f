package bench

import (
	"testing"

	"github.com/sagaflow/sagaflow/message"
)

// headersOf turns a map of headers into a record's header list.
func headersOf(m map[string]string) []message.Header {
	hs := make([]message.Header, 0, len(m))
	for k, v := range m {
		hs = append(hs, message.Header{Key: k, Value: []byte(v)})
	}
	return hs
}

// TestBenchSigningKeysAgree: what the bench's engine signs, its
// participants verify, and what a participant signs, the engine takes as
// that participant's; a run with another seed holds other keys, and
// --unsigned turns every part off.
func TestBenchSigningKeysAgree(t *testing.T) {
	c := Config{Seed: 7}
	sg, err := c.signing([]string{"bench-p1", "bench-p2"})
	if err != nil {
		t.Fatal(err)
	}
	if sg.Commands == nil || sg.Replies == nil {
		t.Fatal("signing is off by default; want commands signed and replies checked")
	}
	headers := map[string]string{message.HeaderMessageID: "m", message.HeaderSagaID: "s"}
	sg.Commands.SignString("bench-p1.commands", "k", []byte(`{}`), headers)
	verifiers := &message.Keyring{}
	for _, k := range c.commandKeys() {
		if err := verifiers.Add("orchestrator", k); err != nil {
			t.Fatal(err)
		}
	}
	if owner, err := message.Verify(verifiers, "bench-p1.commands", []byte("k"), []byte(`{}`), headersOf(headers)); err != nil || owner != "orchestrator" {
		t.Fatalf("a participant verifying the engine's command: owner %q, err %v", owner, err)
	}

	s, err := message.NewSigner(c.replyKey("bench-p2"))
	if err != nil {
		t.Fatal(err)
	}
	reply := map[string]string{message.HeaderMessageID: "r", message.HeaderSagaID: "s"}
	s.SignString("saga.replies", "k", []byte(`{}`), reply)
	if owner, err := message.Verify(sg.Replies, "saga.replies", []byte("k"), []byte(`{}`), headersOf(reply)); err != nil || owner != "bench-p2" {
		t.Fatalf("the engine verifying bench-p2's reply: owner %q, err %v", owner, err)
	}

	other, err := Config{Seed: 8}.signing([]string{"bench-p2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := message.Verify(other.Replies, "saga.replies", []byte("k"), []byte(`{}`), headersOf(reply)); err == nil {
		t.Fatal("another seed's keyring took the reply")
	}

	u := Config{Seed: 7, Unsigned: true}
	if g, _ := u.signing([]string{"bench-p1"}); g.Commands != nil || g.Replies != nil || u.commandKeys() != nil || u.replyKey("bench-p1").ID != "" || replyKeys(u) != nil {
		t.Fatal("--unsigned left some signing on")
	}
}
