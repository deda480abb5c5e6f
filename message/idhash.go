package message

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/google/uuid"
)

// IDHashLen is the length of IDHash's text: 12 hex characters (48 bits),
// enough to tell a command's log lines and spans apart and to find them
// from an id an operator holds, too few to be turned back into the id.
const IDHashLen = 12

// IDHash is what logs, trace spans and the read-role API show for a
// command id: the first IDHashLen hex characters of the SHA-256 of its
// text form. A command id is a reply's only credential for the saga's
// awaited round (in_reply_to), so the id itself is kept out of everything
// a reader of logs, traces or the read-only API sees; the hash still ties
// them together (hash an id with IDHash to search for it).
func IDHash(id uuid.UUID) string {
	return IDTextHash(id.String())
}

// IDTextHash is IDHash of an id held as text (a header value, a database
// column): the hash of the text as given, lower-cased when it parses as a
// UUID, so both spellings hash alike. "" stays "".
func IDTextHash(s string) string {
	if s == "" {
		return ""
	}
	if id, err := uuid.Parse(s); err == nil {
		s = id.String()
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:IDHashLen]
}

// Attribute keys of a message id's hash in log lines and span attributes.
const (
	// AttrMessageIDHash is the hash of the message's own id.
	AttrMessageIDHash = "message_id_hash"
	// AttrInReplyToHash is the hash of the command id a reply answers.
	AttrInReplyToHash = "in_reply_to_hash"
)
