package saga

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"hash"
	"io"
	"strconv"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
)

// SecretBytes is the size of a saga's command-id secret.
const SecretBytes = 32

// NewSecret returns a fresh random command-id secret.
func NewSecret() []byte {
	b := make([]byte, SecretBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it panics if it could)
	return b
}

// CommandID is the message id of the attempt-th send of step's action in
// the saga: the first 16 bytes of HMAC-SHA256(secret, saga id, step,
// action, attempt) shaped as a version 8 UUID. It is derived, so Decide
// stays pure and a reply's in_reply_to can be checked against every send,
// and unguessable without the saga's secret (NewSecret), which is stored
// with the saga and never shown by the API.
func (in *Instance) CommandID(step string, action message.Action, attempt int) uuid.UUID {
	return commandID(hmac.New(sha256.New, in.Secret), in.ID, step, action, attempt)
}

// commandID computes a command id with mac, keyed by the saga's secret
// and reset: a decision that needs several ids keys one HMAC for all of
// them (machine.commandID).
func commandID(mac hash.Hash, sagaID uuid.UUID, step string, action message.Action, attempt int) uuid.UUID {
	var buf [sha256.Size]byte
	var num [20]byte
	mac.Write(sagaID[:])
	io.WriteString(mac, step)
	mac.Write([]byte{0})
	io.WriteString(mac, string(action))
	mac.Write([]byte{0})
	mac.Write(strconv.AppendInt(num[:0], int64(attempt), 10))
	var id uuid.UUID
	copy(id[:], mac.Sum(buf[:0]))
	id[6] = id[6]&0x0f | 0x80 // version 8: custom
	id[8] = id[8]&0x3f | 0x80 // RFC 9562 variant
	return id
}
