package outboxdb

import (
	"github.com/sagaflow/sagaflow/message"
)

// checkHeaders is the bound on a message's headers as a whole, before it
// is written: at most message.MaxSendHeadersBytes of keys and values, all
// text, the envelope's headers short (message.CheckHeaderMap), which is
// what every consumer accepts by default. A record its consumers must
// refuse for its headers (and dead-letter on every send) is never stored.
func checkHeaders(h map[string]string) error {
	return message.CheckHeaderMap(h, message.HeaderLimits{MaxTotalBytes: message.MaxSendHeadersBytes})
}
