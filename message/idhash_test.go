package message_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
)

func TestIDHashIsAShortSHA256OfTheID(t *testing.T) {
	t.Parallel()
	id := uuid.MustParse("0b6a5f2e-3c1d-4e7a-9f10-1a2b3c4d5e6f")
	sum := sha256.Sum256([]byte(id.String()))
	want := hex.EncodeToString(sum[:])[:message.IDHashLen]
	if got := message.IDHash(id); got != want || len(got) != 12 {
		t.Fatalf("IDHash = %q, want %q", got, want)
	}
	if got := message.IDTextHash(strings.ToUpper(id.String())); got != want {
		t.Fatalf("IDTextHash of the upper-case text = %q, want %q (the same id)", got, want)
	}
	if message.IDTextHash("") != "" || message.IDTextHash("not an id") == "" {
		t.Fatal(`IDTextHash: "" must stay "", other text must hash`)
	}
	if message.IDHash(uuid.New()) == want {
		t.Fatal("two ids share a hash")
	}
}
