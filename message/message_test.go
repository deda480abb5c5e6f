package message_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
)

var (
	msgID   = uuid.MustParse("0b6a5f2e-3c1d-4e7a-9f10-1a2b3c4d5e6f")
	sagaID  = uuid.MustParse("7c9e6679-7425-40de-944b-e07fc1f90ae7")
	replyID = uuid.MustParse("f47ac10b-58cc-4372-a567-0e02b2c3d479")
	sentAt  = time.Date(2026, 3, 14, 15, 9, 26, 535000000, time.UTC)
)

func validCommand() message.Command {
	return message.Command{
		MessageID:   msgID,
		SagaID:      sagaID,
		SagaType:    "place-order",
		AggregateID: "order-42",
		Step:        "reserve-stock",
		Action:      message.Forward,
		Attempt:     1,
		ReplyTo:     "saga.replies",
		SentAt:      sentAt,
		Payload:     json.RawMessage(`{"sku":"A-1","qty":2}`),
	}
}

func validReply() message.Reply {
	return message.Reply{
		MessageID: replyID,
		InReplyTo: msgID,
		SagaID:    sagaID,
		Step:      "reserve-stock",
		Action:    message.Forward,
		Outcome:   message.Failure,
		Reason:    "out of stock",
		Payload:   json.RawMessage(`{"available":0}`),
	}
}

// commandJSON returns a valid command as a JSON object with edit applied.
func commandJSON(t testing.TB, edit func(map[string]any)) []byte {
	t.Helper()
	return objectJSON(t, validCommand(), edit)
}

func replyJSON(t testing.TB, edit func(map[string]any)) []byte {
	t.Helper()
	return objectJSON(t, validReply(), edit)
}

func objectJSON(t testing.TB, v any, edit func(map[string]any)) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(m)
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func del(field string) func(map[string]any) {
	return func(m map[string]any) { delete(m, field) }
}

func set(field string, v any) func(map[string]any) {
	return func(m map[string]any) { m[field] = v }
}

// wantInvalid fails unless err wraps ErrInvalid and its text contains every
// one of names.
func wantInvalid(t *testing.T, err error, names ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want an ErrInvalid naming %q", names)
	}
	if !errors.Is(err, message.ErrInvalid) {
		t.Fatalf("err = %v, does not wrap ErrInvalid", err)
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			t.Fatalf("err = %q, want it to name %q", err, n)
		}
	}
}

func TestDecodeCommandRejects(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		value func(t *testing.T) []byte
		names []string // substrings the error must contain
	}{
		{"empty", func(*testing.T) []byte { return nil }, []string{"empty"}},
		{"malformed JSON", func(*testing.T) []byte { return []byte(`{"message_id":`) }, []string{"decode command"}},
		{"trailing garbage", func(*testing.T) []byte { return []byte(`{} x`) }, []string{"decode command"}},
		{"not an object", func(*testing.T) []byte { return []byte(`[1,2]`) }, []string{"object"}},
		{"a string", func(*testing.T) []byte { return []byte(`"hello"`) }, []string{"object"}},
		{"missing message_id", func(t *testing.T) []byte { return commandJSON(t, del("message_id")) }, []string{`"message_id"`, "missing"}},
		{"missing saga_id", func(t *testing.T) []byte { return commandJSON(t, del("saga_id")) }, []string{`"saga_id"`, "missing"}},
		{"missing saga_type", func(t *testing.T) []byte { return commandJSON(t, del("saga_type")) }, []string{`"saga_type"`, "missing"}},
		{"missing step", func(t *testing.T) []byte { return commandJSON(t, del("step")) }, []string{`"step"`, "missing"}},
		{"missing action", func(t *testing.T) []byte { return commandJSON(t, del("action")) }, []string{`"action"`}},
		{"missing attempt", func(t *testing.T) []byte { return commandJSON(t, del("attempt")) }, []string{`"attempt"`}},
		{"missing reply_to", func(t *testing.T) []byte { return commandJSON(t, del("reply_to")) }, []string{`"reply_to"`, "missing"}},
		{"nil message_id", func(t *testing.T) []byte { return commandJSON(t, set("message_id", uuid.Nil.String())) }, []string{`"message_id"`}},
		{"unknown action", func(t *testing.T) []byte { return commandJSON(t, set("action", "undo")) }, []string{`"action"`, "undo"}},
		{"attempt zero", func(t *testing.T) []byte { return commandJSON(t, set("attempt", 0)) }, []string{`"attempt"`, ">= 1"}},
		{"attempt as string", func(t *testing.T) []byte { return commandJSON(t, set("attempt", "1")) }, []string{`"attempt"`, "string"}},
		{"attempt fractional", func(t *testing.T) []byte { return commandJSON(t, set("attempt", 1.5)) }, []string{`"attempt"`}},
		{"step as object", func(t *testing.T) []byte { return commandJSON(t, set("step", map[string]any{})) }, []string{`"step"`, "object"}},
		{"saga_type as number", func(t *testing.T) []byte { return commandJSON(t, set("saga_type", 7)) }, []string{`"saga_type"`, "number"}},
		{"message_id as number", func(t *testing.T) []byte { return commandJSON(t, set("message_id", 12)) }, []string{`"message_id"`, "number"}},
		{"message_id not a UUID", func(t *testing.T) []byte { return commandJSON(t, set("message_id", "abc")) }, []string{`"message_id"`}},
		{"saga_id not a UUID", func(t *testing.T) []byte {
			return commandJSON(t, set("saga_id", "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz"))
		}, []string{`"saga_id"`}},
		{"sent_at not a time", func(t *testing.T) []byte { return commandJSON(t, set("sent_at", "yesterday")) }, []string{`"sent_at"`}},
		{"payload array", func(t *testing.T) []byte { return commandJSON(t, set("payload", []any{1})) }, []string{`"payload"`, "object"}},
		{"payload string", func(t *testing.T) []byte { return commandJSON(t, set("payload", "x")) }, []string{`"payload"`, "object"}},
		{"payload number", func(t *testing.T) []byte { return commandJSON(t, set("payload", 3)) }, []string{`"payload"`, "object"}},
		{"oversize", func(*testing.T) []byte { return oversize() }, []string{"too large", "1048577 bytes", "1048576 allowed"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := message.DecodeCommand(tc.value(t))
			wantInvalid(t, err, tc.names...)
			if c.MessageID != uuid.Nil || c.Step != "" {
				t.Fatalf("DecodeCommand returned a partial command %+v with its error", c)
			}
		})
	}
}

func TestDecodeReplyRejects(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		value func(t *testing.T) []byte
		names []string
	}{
		{"empty", func(*testing.T) []byte { return []byte{} }, []string{"empty"}},
		{"malformed JSON", func(*testing.T) []byte { return []byte(`{"outcome":"success"`) }, []string{"decode reply"}},
		{"not an object", func(*testing.T) []byte { return []byte(`null1`) }, []string{"decode reply"}},
		{"json null", func(*testing.T) []byte { return []byte(`null`) }, []string{`"message_id"`}},
		{"array", func(*testing.T) []byte { return []byte(`[]`) }, []string{"object"}},
		{"missing message_id", func(t *testing.T) []byte { return replyJSON(t, del("message_id")) }, []string{`"message_id"`, "missing"}},
		{"missing in_reply_to", func(t *testing.T) []byte { return replyJSON(t, del("in_reply_to")) }, []string{`"in_reply_to"`, "missing"}},
		{"missing saga_id", func(t *testing.T) []byte { return replyJSON(t, del("saga_id")) }, []string{`"saga_id"`, "missing"}},
		{"missing step", func(t *testing.T) []byte { return replyJSON(t, del("step")) }, []string{`"step"`, "missing"}},
		{"missing action", func(t *testing.T) []byte { return replyJSON(t, del("action")) }, []string{`"action"`}},
		{"missing outcome", func(t *testing.T) []byte { return replyJSON(t, del("outcome")) }, []string{`"outcome"`}},
		{"unknown outcome", func(t *testing.T) []byte { return replyJSON(t, set("outcome", "maybe")) }, []string{`"outcome"`, "maybe"}},
		{"unknown action", func(t *testing.T) []byte { return replyJSON(t, set("action", "FORWARD")) }, []string{`"action"`, "FORWARD"}},
		{"outcome as bool", func(t *testing.T) []byte { return replyJSON(t, set("outcome", true)) }, []string{`"outcome"`, "bool"}},
		{"reason as number", func(t *testing.T) []byte { return replyJSON(t, set("reason", 1)) }, []string{`"reason"`, "number"}},
		{"in_reply_to not a UUID", func(t *testing.T) []byte { return replyJSON(t, set("in_reply_to", "not-a-uuid")) }, []string{`"in_reply_to"`}},
		{"payload array", func(t *testing.T) []byte { return replyJSON(t, set("payload", []any{})) }, []string{`"payload"`, "object"}},
		{"oversize", func(*testing.T) []byte { return oversize() }, []string{"too large", "1048577 bytes", "1048576 allowed"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := message.DecodeReply(tc.value(t))
			wantInvalid(t, err, tc.names...)
			if r.MessageID != uuid.Nil || r.Step != "" {
				t.Fatalf("DecodeReply returned a partial reply %+v with its error", r)
			}
		})
	}
}

// oversize is a syntactically valid object one byte over the limit.
func oversize() []byte {
	head, tail := []byte(`{"reason":"`), []byte(`"}`)
	b := make([]byte, 0, message.MaxPayloadBytes+1)
	b = append(b, head...)
	b = append(b, bytes.Repeat([]byte("x"), message.MaxPayloadBytes+1-len(head)-len(tail))...)
	return append(b, tail...)
}

func TestDecodeAtSizeLimit(t *testing.T) {
	t.Parallel()
	b := commandJSON(t, nil)
	pad := message.MaxPayloadBytes - len(b)
	// The same command with insignificant whitespace up to exactly the limit.
	b = append(bytes.Repeat([]byte(" "), pad), b...)
	if len(b) != message.MaxPayloadBytes {
		t.Fatalf("test value is %d bytes", len(b))
	}
	if _, err := message.DecodeCommand(b); err != nil {
		t.Fatalf("a command of exactly MaxPayloadBytes: %v", err)
	}
	if _, err := message.DecodeCommand(append(b, ' ')); !errors.Is(err, message.ErrOversize) {
		t.Fatalf("one byte over the limit: err = %v, want ErrOversize", err)
	}
}

func TestEncodeRejects(t *testing.T) {
	t.Parallel()
	cmdCases := []struct {
		name  string
		edit  func(*message.Command)
		names []string
	}{
		{"nil message id", func(c *message.Command) { c.MessageID = uuid.Nil }, []string{`"message_id"`}},
		{"nil saga id", func(c *message.Command) { c.SagaID = uuid.Nil }, []string{`"saga_id"`}},
		{"no saga type", func(c *message.Command) { c.SagaType = "" }, []string{`"saga_type"`}},
		{"no step", func(c *message.Command) { c.Step = "" }, []string{`"step"`}},
		{"bad action", func(c *message.Command) { c.Action = "redo" }, []string{`"action"`, "redo"}},
		{"attempt zero", func(c *message.Command) { c.Attempt = 0 }, []string{`"attempt"`}},
		{"no reply_to", func(c *message.Command) { c.ReplyTo = "" }, []string{`"reply_to"`}},
		{"payload array", func(c *message.Command) { c.Payload = json.RawMessage(`[1]`) }, []string{`"payload"`}},
		{"payload not JSON", func(c *message.Command) { c.Payload = json.RawMessage(`{"a":`) }, []string{`"payload"`, "not valid JSON"}},
		{"sent_at beyond year 9999", func(c *message.Command) { c.SentAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, []string{"sent_at", "year"}},
	}
	for _, tc := range cmdCases {
		c := validCommand()
		tc.edit(&c)
		b, err := message.EncodeCommand(c)
		if b != nil {
			t.Errorf("EncodeCommand (%s) returned bytes with an error", tc.name)
		}
		t.Run("command/"+tc.name, func(t *testing.T) {
			wantInvalid(t, err, append(tc.names, "encode command for saga "+c.SagaID.String())...)
		})
	}
	replyCases := []struct {
		name  string
		edit  func(*message.Reply)
		names []string
	}{
		{"nil message id", func(r *message.Reply) { r.MessageID = uuid.Nil }, []string{`"message_id"`}},
		{"nil in_reply_to", func(r *message.Reply) { r.InReplyTo = uuid.Nil }, []string{`"in_reply_to"`}},
		{"nil saga id", func(r *message.Reply) { r.SagaID = uuid.Nil }, []string{`"saga_id"`}},
		{"no step", func(r *message.Reply) { r.Step = "" }, []string{`"step"`}},
		{"bad action", func(r *message.Reply) { r.Action = "" }, []string{`"action"`}},
		{"bad outcome", func(r *message.Reply) { r.Outcome = "ok" }, []string{`"outcome"`, "ok"}},
		{"payload string", func(r *message.Reply) { r.Payload = json.RawMessage(`"s"`) }, []string{`"payload"`}},
	}
	for _, tc := range replyCases {
		r := validReply()
		tc.edit(&r)
		b, err := message.EncodeReply(r)
		if b != nil {
			t.Errorf("EncodeReply (%s) returned bytes with an error", tc.name)
		}
		t.Run("reply/"+tc.name, func(t *testing.T) {
			wantInvalid(t, err, tc.names...)
		})
	}
}

func TestFieldErrorIsTyped(t *testing.T) {
	t.Parallel()
	_, err := message.DecodeReply(replyJSON(t, set("outcome", "maybe")))
	var fe *message.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v, not a *FieldError", err)
	}
	if fe.Field != "outcome" {
		t.Fatalf("FieldError.Field = %q, want outcome", fe.Field)
	}
}

func TestCommandRoundTrip(t *testing.T) {
	t.Parallel()
	cases := map[string]func(*message.Command){
		"full":               func(*message.Command) {},
		"compensate":         func(c *message.Command) { c.Action = message.Compensate; c.Attempt = 7 },
		"no payload":         func(c *message.Command) { c.Payload = nil },
		"null payload":       func(c *message.Command) { c.Payload = json.RawMessage(`null`) },
		"empty object":       func(c *message.Command) { c.Payload = json.RawMessage(`{}`) },
		"no aggregate":       func(c *message.Command) { c.AggregateID = "" },
		"unicode step":       func(c *message.Command) { c.Step = "réserver-📦" },
		"zone offset":        func(c *message.Command) { c.SentAt = time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", -5*3600)) },
		"zero sent_at":       func(c *message.Command) { c.SentAt = time.Time{} },
		"nested payload":     func(c *message.Command) { c.Payload = json.RawMessage(`{"a":{"b":[1,2,{"c":null}]}}`) },
		"escaped characters": func(c *message.Command) { c.AggregateID = "a\"b\\c\n" },
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := validCommand()
			edit(&c)
			b, err := message.EncodeCommand(c)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			got, err := message.DecodeCommand(b)
			if err != nil {
				t.Fatalf("decode %s: %v", b, err)
			}
			if !sameCommand(got, c) {
				t.Fatalf("round trip changed the command:\n got %+v\nwant %+v", got, c)
			}
		})
	}
}

func TestReplyRoundTrip(t *testing.T) {
	t.Parallel()
	for _, o := range []message.Outcome{message.Success, message.Failure, message.Retry} {
		for _, a := range []message.Action{message.Forward, message.Compensate} {
			r := validReply()
			r.Outcome, r.Action = o, a
			if o == message.Success {
				r.Reason = ""
			}
			b, err := message.EncodeReply(r)
			if err != nil {
				t.Fatalf("encode %s/%s: %v", a, o, err)
			}
			got, err := message.DecodeReply(b)
			if err != nil {
				t.Fatalf("decode %s: %v", b, err)
			}
			if !sameReply(got, r) {
				t.Fatalf("round trip changed the reply:\n got %+v\nwant %+v", got, r)
			}
		}
	}
}

// The wire contract's field names, as a participant in another language
// would write them.
func TestDecodeWireContract(t *testing.T) {
	t.Parallel()
	cmd := `{"message_id":"0b6a5f2e-3c1d-4e7a-9f10-1a2b3c4d5e6f","saga_id":"7c9e6679-7425-40de-944b-e07fc1f90ae7",
	  "saga_type":"place-order","aggregate_id":"order-42","step":"reserve-stock","action":"compensate","attempt":2,
	  "reply_to":"saga.replies","sent_at":"2026-03-14T15:09:26.535Z","payload":{"sku":"A-1"},"extra":"ignored"}`
	c, err := message.DecodeCommand([]byte(cmd))
	if err != nil {
		t.Fatal(err)
	}
	if c.MessageID != msgID || c.SagaID != sagaID || c.Action != message.Compensate || c.Attempt != 2 || !c.SentAt.Equal(sentAt) || string(c.Payload) != `{"sku":"A-1"}` {
		t.Fatalf("decoded %+v", c)
	}
	rep := `{"message_id":"f47ac10b-58cc-4372-a567-0e02b2c3d479","in_reply_to":"0b6a5f2e-3c1d-4e7a-9f10-1a2b3c4d5e6f",
	  "saga_id":"7c9e6679-7425-40de-944b-e07fc1f90ae7","step":"reserve-stock","action":"forward","outcome":"retry","reason":"db busy"}`
	r, err := message.DecodeReply([]byte(rep))
	if err != nil {
		t.Fatal(err)
	}
	if r.InReplyTo != msgID || r.Outcome != message.Retry || r.Reason != "db busy" || r.Payload != nil {
		t.Fatalf("decoded %+v", r)
	}
}

func TestMatchRecordHeadersAgainstTheBody(t *testing.T) {
	t.Parallel()
	other := uuid.MustParse("11111111-2222-4333-8444-555555555555")
	cases := []struct {
		name    string
		headers map[string]string
		names   []string // nil: no error
	}{
		{"none", nil, nil},
		{"matching", message.Headers(msgID, sagaID), nil},
		{"uppercase ids", map[string]string{message.HeaderMessageID: strings.ToUpper(msgID.String()), message.HeaderSagaID: strings.ToUpper(sagaID.String())}, nil},
		{"only content type", map[string]string{message.HeaderContentType: message.ContentTypeJSON}, nil},
		{"message id differs", map[string]string{message.HeaderMessageID: other.String()}, []string{message.HeaderMessageID, other.String(), "has hash " + message.IDHash(msgID)}},
		{"saga id differs", map[string]string{message.HeaderMessageID: msgID.String(), message.HeaderSagaID: other.String()}, []string{message.HeaderSagaID, other.String()}},
		{"message id garbage", map[string]string{message.HeaderMessageID: "garbage"}, []string{message.HeaderMessageID, "garbage"}},
		{"saga id empty", map[string]string{message.HeaderSagaID: ""}, []string{message.HeaderSagaID}},
	}
	for _, tc := range cases {
		var hs []message.Header
		for k, v := range tc.headers {
			hs = append(hs, message.Header{Key: k, Value: []byte(v)})
		}
		err := message.MatchRecordHeaders(hs, msgID, sagaID)
		if tc.names == nil {
			if err != nil {
				t.Errorf("%s: MatchRecordHeaders = %v, want nil", tc.name, err)
			}
			continue
		}
		t.Run(tc.name, func(t *testing.T) { wantInvalid(t, err, tc.names...) })
	}
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	h := message.Headers(msgID, sagaID)
	if h[message.HeaderMessageID] != msgID.String() || h[message.HeaderSagaID] != sagaID.String() || h[message.HeaderContentType] != message.ContentTypeJSON || len(h) != 3 {
		t.Fatalf("Headers = %v", h)
	}
}

func compact(p json.RawMessage) string {
	if len(p) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Compact(&b, p); err != nil {
		return "invalid:" + string(p)
	}
	return b.String()
}

func sameCommand(a, b message.Command) bool {
	return a.MessageID == b.MessageID && a.SagaID == b.SagaID && a.SagaType == b.SagaType &&
		a.AggregateID == b.AggregateID && a.Step == b.Step && a.Action == b.Action &&
		a.Attempt == b.Attempt && a.ReplyTo == b.ReplyTo && a.SentAt.Equal(b.SentAt) &&
		compact(a.Payload) == compact(b.Payload)
}

func sameReply(a, b message.Reply) bool {
	return a.MessageID == b.MessageID && a.InReplyTo == b.InReplyTo && a.SagaID == b.SagaID &&
		a.Step == b.Step && a.Action == b.Action && a.Outcome == b.Outcome && a.Reason == b.Reason &&
		compact(a.Payload) == compact(b.Payload)
}

// normalPayload makes two encodings of the same JSON comparable:
// encoding/json compacts raw payloads and escapes HTML characters.
func normalPayload(t *testing.T, p json.RawMessage) string {
	t.Helper()
	if len(p) == 0 {
		return ""
	}
	var c, e bytes.Buffer
	if err := json.Compact(&c, p); err != nil {
		t.Fatalf("decoded payload %q is not valid JSON: %v", p, err)
	}
	json.HTMLEscape(&e, c.Bytes())
	return e.String()
}

func commandSeeds(f *testing.F) {
	b, err := message.EncodeCommand(validCommand())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	for _, s := range []string{
		``, `{}`, `null`, `[]`, `"x"`, `{"message_id":1}`,
		`{"message_id":"abc","saga_id":"7c9e6679-7425-40de-944b-e07fc1f90ae7"}`,
		`{"message_id":"0b6a5f2e-3c1d-4e7a-9f10-1a2b3c4d5e6f","saga_id":"7c9e6679-7425-40de-944b-e07fc1f90ae7","saga_type":"t","step":"s","action":"forward","attempt":1,"reply_to":"r"}`,
		`{"MESSAGE_ID":"0b6a5f2e-3c1d-4e7a-9f10-1a2b3c4d5e6f","saga_id":"7c9e6679-7425-40de-944b-e07fc1f90ae7","saga_type":"t","step":"s","action":"compensate","attempt":3,"reply_to":"r","sent_at":"2026-01-02T03:04:05+05:30","payload": { "a" : "<&>\u2028" } }`,
		`{"message_id":"0b6a5f2e-3c1d-4e7a-9f10-1a2b3c4d5e6f","saga_id":"7c9e6679-7425-40de-944b-e07fc1f90ae7","saga_type":"t","step":"s","action":"forward","attempt":1,"reply_to":"r","payload":null}`,
		`{"sent_at":"yesterday"}`, `{"attempt":1e99}`, `{"payload":[1]}`,
	} {
		f.Add([]byte(s))
	}
}

func FuzzDecodeCommand(f *testing.F) {
	commandSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := message.DecodeCommand(b)
		if err != nil {
			if !errors.Is(err, message.ErrInvalid) {
				t.Fatalf("decode error %v does not wrap ErrInvalid", err)
			}
			safeText(t, err.Error())
			return
		}
		enc, err := message.EncodeCommand(c)
		if errors.Is(err, message.ErrOversize) && len(b) > message.MaxValueBytesDefault/6 {
			return // escaping (<, >, &, U+2028 as \u003c...) grew it past the bound
		}
		if err != nil {
			t.Fatalf("a decoded command does not encode: %v (%+v)", err, c)
		}
		c2, err := message.DecodeCommand(enc)
		if err != nil {
			t.Fatalf("a re-encoded command does not decode: %v (%s)", err, enc)
		}
		enc2, err := message.EncodeCommand(c2)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable: %s vs %s (%v)", enc, enc2, err)
		}
		if normalPayload(t, c.Payload) != normalPayload(t, c2.Payload) {
			t.Fatalf("payload changed: %q -> %q", c.Payload, c2.Payload)
		}
		c.Payload, c2.Payload = nil, nil
		if !sameCommand(c, c2) {
			t.Fatalf("round trip changed the command:\n got %+v\nwant %+v", c2, c)
		}
	})
}

func FuzzDecodeReply(f *testing.F) {
	b, err := message.EncodeReply(validReply())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	for _, s := range []string{
		``, `{}`, `null`, `{"outcome":"maybe"}`, `{"reason":1}`,
		`{"message_id":"f47ac10b-58cc-4372-a567-0e02b2c3d479","in_reply_to":"0b6a5f2e-3c1d-4e7a-9f10-1a2b3c4d5e6f","saga_id":"7c9e6679-7425-40de-944b-e07fc1f90ae7","step":"s","action":"forward","outcome":"success"}`,
		`{"message_id":"f47ac10b-58cc-4372-a567-0e02b2c3d479","in_reply_to":"0b6a5f2e-3c1d-4e7a-9f10-1a2b3c4d5e6f","saga_id":"7c9e6679-7425-40de-944b-e07fc1f90ae7","step":"s\ud800","action":"compensate","outcome":"retry","reason":"\u0000","payload":{"x":[{}]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := message.DecodeReply(b)
		if err != nil {
			if !errors.Is(err, message.ErrInvalid) {
				t.Fatalf("decode error %v does not wrap ErrInvalid", err)
			}
			safeText(t, err.Error())
			return
		}
		enc, err := message.EncodeReply(r)
		if errors.Is(err, message.ErrOversize) && len(b) > message.MaxValueBytesDefault/6 {
			return // escaping (<, >, &, U+2028 as \u003c...) grew it past the bound
		}
		if err != nil {
			t.Fatalf("a decoded reply does not encode: %v (%+v)", err, r)
		}
		r2, err := message.DecodeReply(enc)
		if err != nil {
			t.Fatalf("a re-encoded reply does not decode: %v (%s)", err, enc)
		}
		enc2, err := message.EncodeReply(r2)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable: %s vs %s (%v)", enc, enc2, err)
		}
		if normalPayload(t, r.Payload) != normalPayload(t, r2.Payload) {
			t.Fatalf("payload changed: %q -> %q", r.Payload, r2.Payload)
		}
		r.Payload, r2.Payload = nil, nil
		if !sameReply(r, r2) {
			t.Fatalf("round trip changed the reply:\n got %+v\nwant %+v", r2, r)
		}
	})
}
