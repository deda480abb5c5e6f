package message

import (
	"fmt"

	"github.com/google/uuid"
)

// ReadCommand reads a command record as a participant takes it: it
// decodes value (DecodeCommand), checks the headers on their own
// (CheckRecordHeaders) and then against the body (MatchRecordHeaders).
// The error wraps ErrInvalid: the record belongs on the dead-letter topic.
// With a header error the decoded command is returned too, so the caller
// can name it.
func ReadCommand[H RecordHeader](value []byte, hs []H) (Command, error) {
	cmd, err := DecodeCommand(value)
	if err != nil {
		return cmd, err
	}
	return cmd, checkHeaders(hs, "command message-id hash "+IDHash(cmd.MessageID), cmd.MessageID, cmd.SagaID)
}

// ReadReply reads a reply record as an orchestrator takes it, with the
// checks of ReadCommand.
func ReadReply[H RecordHeader](value []byte, hs []H) (Reply, error) {
	r, err := DecodeReply(value)
	if err != nil {
		return r, err
	}
	return r, checkHeaders(hs, "reply "+r.MessageID.String(), r.MessageID, r.SagaID)
}

func checkHeaders[H RecordHeader](hs []H, what string, messageID, sagaID uuid.UUID) error {
	if err := CheckRecordHeaders(hs); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := MatchRecordHeaders(hs, messageID, sagaID); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
