package outboxdb

import (
	"github.com/sagaflow/sagaflow/internal/jsonlite"
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

// DecodeHeaders decodes a row's headers column, a flat JSON object of
// strings as jsonb prints it ({"k": "v", ...}), to the map encoding/json
// would give (nil for a null). The relay decodes one per row it claims,
// so it is read with jsonlite's reader, without reflection
// (docs/perf/figures.md#outbox-headers-json).
func DecodeHeaders(b []byte) (map[string]string, error) {
	r := jsonlite.NewReader(b)
	if r.Null() {
		return nil, r.End()
	}
	m := make(map[string]string, 4)
	err := r.Object(func(name []byte) error {
		v, err := r.String()
		m[string(name)] = v
		return err
	})
	if err == nil {
		err = r.End()
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}
