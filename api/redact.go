package api

import (
	"net/http"
	"regexp"
	"strings"

	"github.com/sagaflow/sagaflow/inbox/dlq"
	"github.com/sagaflow/sagaflow/message"
)

// Command ids leave the read role's answers. A command's message id is
// what a reply quotes (in_reply_to) to answer it, so only the admin role
// sees the ids in dead letters (their value, headers, message id and
// reason), dead outbox rows and the repairs' audit; every other caller
// sees each UUID there but the saga's id replaced by RedactedIDPrefix and
// the id's hash (message.IDHash, the form logs and spans carry), which
// still ties an answer to the logs.

// RedactedIDPrefix begins what stands for a command id the caller may not
// see: "redacted:" and the id's message.IDHash.
const RedactedIDPrefix = "redacted:"

var uuidRE = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)

// seesCommandIDs reports whether r's caller may see command ids: the admin
// role, by bearer token or by the page's session.
func (s *Server) seesCommandIDs(r *http.Request) bool {
	return callerRole(r) == roleAdmin
}

// redactor replaces every UUID in a text, but keep (the saga's id, not a
// secret), by RedactedIDPrefix and its hash.
type redactor struct{ keep string }

func newRedactor(headers map[string]string) redactor {
	return redactor{keep: strings.ToLower(headers[message.HeaderSagaID])}
}

func (x redactor) text(s string) string {
	return uuidRE.ReplaceAllStringFunc(s, x.one)
}

func (x redactor) bytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return uuidRE.ReplaceAllFunc(b, func(id []byte) []byte { return []byte(x.one(string(id))) })
}

func (x redactor) one(id string) string {
	if x.keep != "" && strings.EqualFold(id, x.keep) {
		return id
	}
	return RedactedIDPrefix + message.IDTextHash(id)
}

func (x redactor) headers(h map[string]string) map[string]string {
	if h == nil {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		if k == message.HeaderSagaID {
			out[k] = v
			continue
		}
		out[k] = x.text(v)
	}
	return out
}

// redactDeadLetter is d as a caller who may not see command ids sees it.
func redactDeadLetter(d dlq.DeadLetter) dlq.DeadLetter {
	x := newRedactor(d.Headers)
	d.MessageID = x.text(d.MessageID)
	d.Value = x.bytes(d.Value)
	d.Headers = x.headers(d.Headers)
	d.Reason = x.text(d.Reason)
	return d
}

func redactDeadLetters(ds []dlq.DeadLetter) []dlq.DeadLetter {
	out := make([]dlq.DeadLetter, len(ds))
	for i, d := range ds {
		out[i] = redactDeadLetter(d)
	}
	return out
}

// redactDeadRows is rows as a caller who may not see command ids sees
// them.
func redactDeadRows(rows []dlq.DeadRow) []dlq.DeadRow {
	out := make([]dlq.DeadRow, len(rows))
	for i, r := range rows {
		x := newRedactor(r.Headers)
		r.Value = x.bytes(r.Value)
		r.Headers = x.headers(r.Headers)
		r.LastError = x.text(r.LastError)
		out[i] = r
	}
	return out
}

// redactAudit is the repairs' audit as a caller who may not see command
// ids sees it (a redrive's detail names the dead letter's message id).
func redactAudit(es []dlq.AuditEntry) []dlq.AuditEntry {
	out := make([]dlq.AuditEntry, len(es))
	x := redactor{}
	for i, e := range es {
		e.Target = x.text(e.Target)
		e.Reason = x.text(e.Reason)
		// A UUID inside a JSON string becomes text without quotes or
		// escapes: the detail stays valid JSON.
		e.Detail = x.bytes(e.Detail)
		out[i] = e
	}
	return out
}
