package message_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
)

// withRaw returns b with the JSON string "MARK" replaced by raw, JSON
// text written as it is (escapes and bytes encoding/json would not write).
func withRaw(t testing.TB, b []byte, raw string) []byte {
	t.Helper()
	if bytes.Count(b, []byte(`"MARK"`)) != 1 {
		t.Fatalf("no single MARK in %s", b)
	}
	return bytes.Replace(b, []byte(`"MARK"`), []byte(raw), 1)
}

// viaEncodingJSON makes the fast reader give up at once (a null member
// first), so that encoding/json decodes b and the strict scan after it
// must find the problem.
func viaEncodingJSON(b []byte) []byte {
	return append([]byte(`{"unused":null,`), bytes.TrimPrefix(b, []byte("{"))...)
}

// safeText fails unless s is valid UTF-8 without NUL and at most
// message.MaxErrorBytes long: an error text goes into dead-letter headers
// and text columns as it is.
func safeText(t *testing.T, s string) {
	t.Helper()
	if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 || len(s) > message.MaxErrorBytes {
		t.Fatalf("error text is not safe (%d bytes): %q", len(s), s)
	}
}

type rawCase struct {
	name  string
	field string // member set to MARK
	raw   string // JSON text put in its place
	names []string
}

// textCases are values valid as JSON that Postgres would refuse.
var textCases = []rawCase{
	{"NUL in a payload string", "payload", `{"note":"a\u0000b"}`, []string{`field "payload"`, "NUL character (U+0000", "in a string at byte 10 of its JSON text"}},
	{"NUL in a payload key", "payload", `{"ok":1,"k\u0000":1}`, []string{`field "payload"`, "NUL character", "in a member name at byte 10"}},
	{"NUL deep in the payload", "payload", `{"a":[{"b":["x","\u0000"]}]}`, []string{`field "payload"`, "NUL character", "byte 17"}},
	{"invalid UTF-8 in a payload string", "payload", "{\"a\":\"ok\xff\"}", []string{`field "payload"`, "invalid UTF-8 in a string at byte 8"}},
	{"invalid UTF-8 in a payload key", "payload", "{\"\xc3\":1}", []string{`field "payload"`, "invalid UTF-8 in a member name at byte 2"}},
	{"encoded surrogate in the payload", "payload", "{\"a\":\"\xed\xa0\x80\"}", []string{`field "payload"`, "invalid UTF-8"}},
	{"lone high surrogate in the payload", "payload", `{"a":"\ud800"}`, []string{`field "payload"`, `unpaired UTF-16 surrogate escape \ud800`, "byte 6"}},
	{"lone low surrogate in the payload", "payload", `{"a":"x\udc00y"}`, []string{`field "payload"`, `\udc00`}},
	{"high surrogate then a letter", "payload", `{"a":"\ud83d\u0041"}`, []string{`field "payload"`, `\ud83d`}},
	{"two high surrogates", "payload", `{"a":"\ud83d\ud83d"}`, []string{`field "payload"`, `\ud83d`}},
	{"surrogate in a payload key", "payload", `{"\udfff":1}`, []string{`field "payload"`, "member name"}},
	{"number over numeric's range", "payload", `{"n":1e131072}`, []string{`field "payload"`, "1e131072", "byte 5", "numeric"}},
	{"number with a too fine scale", "payload", `{"n":1e-16384}`, []string{`field "payload"`, "1e-16384", "numeric"}},
	{"zero with a huge exponent", "payload", `{"n":[0e1073741823]}`, []string{`field "payload"`, "numeric"}},
	{"NUL in an unknown member", "future", `{"x":"\u0000"}`, []string{`field "future"`, "NUL character"}},
	{"NUL in an unknown string member", "future", `"ab\u0000"`, []string{`field "future"`, "NUL character (U+0000) at byte 2"}},
	{"invalid UTF-8 in an unknown member", "future", "\"\xff\"", []string{`field "future"`, "not valid UTF-8 at byte 0"}},
	{"lone surrogate in an unknown member", "future", `"\ud800"`, []string{`field "future"`, `\ud800`}},
}

// stringFieldCases applies to every string field of an envelope.
func stringFieldCases(field string) []rawCase {
	return []rawCase{
		{field + " NUL", field, `"decl\u0000x"`, []string{`field "` + field + `"`, "contains a NUL character (U+0000) at byte 4"}},
		{field + " NUL after escapes", field, `"\n\u00e9\u0000"`, []string{`field "` + field + `"`, "NUL character (U+0000) at byte 3"}},
		{field + " invalid UTF-8", field, "\"ab\xffc\"", []string{`field "` + field + `"`, "is not valid UTF-8 at byte 2"}},
		{field + " truncated UTF-8", field, "\"ab\xe2\x82\"", []string{`field "` + field + `"`, "is not valid UTF-8 at byte 2"}},
		{field + " lone surrogate", field, `"ab\ud800"`, []string{`field "` + field + `"`, `unpaired UTF-16 surrogate escape \ud800 at byte 2`}},
	}
}

func TestDecodeRefusesWhatPostgresRefuses(t *testing.T) {
	t.Parallel()
	var cmdCases, replyCases []rawCase
	cmdCases = append(cmdCases, textCases...)
	replyCases = append(replyCases, textCases...)
	for _, f := range []string{"saga_type", "aggregate_id", "step", "action", "reply_to", "message_id", "sent_at"} {
		cmdCases = append(cmdCases, stringFieldCases(f)...)
	}
	for _, f := range []string{"step", "reason", "outcome", "in_reply_to"} {
		replyCases = append(replyCases, stringFieldCases(f)...)
	}
	run := func(t *testing.T, kind string, tc rawCase, in []byte, decode func([]byte) (uuid.UUID, error)) {
		for path, b := range map[string][]byte{"fast": in, "encoding/json": viaEncodingJSON(in)} {
			id, err := decode(b)
			wantInvalid(t, err, tc.names...)
			safeText(t, err.Error())
			if id != uuid.Nil {
				t.Fatalf("%s %s: returned an envelope with the error", kind, path)
			}
			var fe *message.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("%s %s: err %v is not a FieldError naming %q", kind, path, err, tc.field)
			}
		}
	}
	for _, tc := range cmdCases {
		t.Run("command/"+tc.name, func(t *testing.T) {
			run(t, "command", tc, withRaw(t, commandJSON(t, set(tc.field, "MARK")), tc.raw), func(b []byte) (uuid.UUID, error) {
				c, err := message.DecodeCommand(b)
				return c.MessageID, err
			})
		})
	}
	for _, tc := range replyCases {
		t.Run("reply/"+tc.name, func(t *testing.T) {
			run(t, "reply", tc, withRaw(t, replyJSON(t, set(tc.field, "MARK")), tc.raw), func(b []byte) (uuid.UUID, error) {
				r, err := message.DecodeReply(b)
				return r.MessageID, err
			})
		})
	}
}

func TestDecodeRefusesBadMemberNames(t *testing.T) {
	t.Parallel()
	for name, raw := range map[string]string{
		"NUL":            `"reason\u0000"`,
		"invalid UTF-8":  "\"re\xffason\"",
		"lone surrogate": `"\ud800"`,
	} {
		b := bytes.Replace(replyJSON(t, nil), []byte(`"reason"`), []byte(raw), 1)
		for path, in := range map[string][]byte{"fast": b, "encoding/json": viaEncodingJSON(b)} {
			_, err := message.DecodeReply(in)
			wantInvalid(t, err, "member name")
			safeText(t, err.Error())
			if name == "lone surrogate" && !strings.Contains(err.Error(), `\ud800`) {
				t.Errorf("%s %s: %v does not show the escape", name, path, err)
			}
		}
	}
}

// What Postgres stores although it looks odd is accepted, byte for byte.
func TestDecodeKeepsStorableText(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		`{"emoji":"\ud83d\ude00","upper":"\uD83D\uDE00"}`, `{"r":"\ufffd","raw":"` + "\uFFFD" + `"}`, `{"c":"\u0001\u001f","nc":"\uffff\ufffe"}`,
		`{"big":1e131071,"fine":1e-16383,"z":0e1073741822,"neg":-0.0}`, `{"é中🙂":["\u00e9", "é"]}`,
	} {
		b := withRaw(t, replyJSON(t, set("payload", "MARK")), raw)
		for path, in := range map[string][]byte{"fast": b, "encoding/json": viaEncodingJSON(b)} {
			r, err := message.DecodeReply(in)
			if err != nil {
				t.Fatalf("%s %s: %v", path, raw, err)
			}
			if string(r.Payload) != raw {
				t.Fatalf("%s: payload %s, want %s", path, r.Payload, raw)
			}
		}
	}
	b := withRaw(t, replyJSON(t, set("reason", "MARK")), `"ok \ud83d\ude00 \u0001"`)
	if r, err := message.DecodeReply(b); err != nil || r.Reason != "ok 😀 \x01" {
		t.Fatalf("reason %q, %v", r.Reason, err)
	}
}

func TestDecodeBounds(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("é", n/2) + strings.Repeat("x", n%2) }
	type bound struct {
		field string
		max   int
		value func(n int) string
		names []string
	}
	check := func(t *testing.T, name string, b []byte, decode func([]byte) error, names ...string) {
		t.Helper()
		err := decode(b)
		if names == nil {
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return
		}
		wantInvalid(t, err, names...)
		safeText(t, err.Error())
		if strings.Contains(err.Error(), "éé") {
			t.Fatalf("%s: the error quotes the value: %v", name, err)
		}
	}
	decodeCommand := func(b []byte) error { _, err := message.DecodeCommand(b); return err }
	decodeReply := func(b []byte) error { _, err := message.DecodeReply(b); return err }
	for _, bd := range []bound{
		{"saga_type", message.MaxNameBytesDefault, long, []string{"256 bytes, longer than the 255 allowed"}},
		{"aggregate_id", message.MaxNameBytesDefault, long, []string{"256 bytes, longer than the 255 allowed"}},
		{"step", message.MaxNameBytesDefault, long, []string{"256 bytes, longer than the 255 allowed"}},
		{"reply_to", message.MaxTopicBytes, func(n int) string { return strings.Repeat("t", n) }, []string{"250 bytes, longer than the 249 Kafka allows"}},
	} {
		check(t, bd.field+" at the bound", commandJSON(t, set(bd.field, bd.value(bd.max))), decodeCommand)
		check(t, bd.field+" over it", commandJSON(t, set(bd.field, bd.value(bd.max+1))), decodeCommand, append([]string{`field "` + bd.field + `"`}, bd.names...)...)
	}
	for _, bd := range []bound{
		{"step", message.MaxNameBytesDefault, long, []string{"256 bytes, longer than the 255 allowed"}},
		{"reason", message.MaxReasonBytesDefault, long, []string{"1025 bytes, longer than the 1024 allowed"}},
	} {
		check(t, bd.field+" at the bound", replyJSON(t, set(bd.field, bd.value(bd.max))), decodeReply)
		check(t, bd.field+" over it", replyJSON(t, set(bd.field, bd.value(bd.max+1))), decodeReply, append([]string{`field "` + bd.field + `"`}, bd.names...)...)
	}
	check(t, "reason 2048", replyJSON(t, set("reason", strings.Repeat("x", 2048))), decodeReply,
		`field "reason" is 2048 bytes, longer than the 1024 allowed`)
	check(t, "step 256", replyJSON(t, set("step", strings.Repeat("x", 256))), decodeReply, `field "step" is 256 bytes, longer than the 255 allowed`)
	check(t, "attempt at the bound", commandJSON(t, set("attempt", message.MaxAttempt)), decodeCommand)
	check(t, "attempt over it", commandJSON(t, set("attempt", message.MaxAttempt+1)), decodeCommand, `field "attempt"`, "2147483648")

	// The payload's own bound, default and configured.
	pad := func(n int) string { return `{"p":"` + strings.Repeat("x", n-8) + `"}` }
	at := withRaw(t, replyJSON(t, set("payload", "MARK")), pad(message.MaxPayloadBytesDefault))
	check(t, "payload at the bound", at, decodeReply)
	over := withRaw(t, replyJSON(t, set("payload", "MARK")), pad(message.MaxPayloadBytesDefault+1))
	check(t, "payload over it", over, decodeReply, `field "payload" is 983041 bytes, longer than the 983040 allowed`)
	small := message.Limits{MaxPayloadBytes: 100}
	b := withRaw(t, commandJSON(t, set("payload", "MARK")), pad(101))
	if _, err := small.DecodeCommand(b); err == nil || !strings.Contains(err.Error(), "101 bytes, longer than the 100 allowed") {
		t.Fatalf("a 101-byte payload with MaxPayloadBytes 100: %v", err)
	}
	if _, err := small.DecodeCommand(withRaw(t, commandJSON(t, set("payload", "MARK")), pad(100))); err != nil {
		t.Fatalf("a 100-byte payload with MaxPayloadBytes 100: %v", err)
	}
	// The other configured bounds.
	limits := message.Limits{MaxValueBytes: 600, MaxReasonBytes: 10, MaxNameBytes: 20}
	if _, err := limits.DecodeReply(replyJSON(t, set("reason", strings.Repeat("r", 11)))); err == nil || !strings.Contains(err.Error(), "11 bytes, longer than the 10 allowed") {
		t.Fatalf("reason over MaxReasonBytes: %v", err)
	}
	if _, err := limits.DecodeReply(replyJSON(t, set("step", strings.Repeat("s", 21)))); err == nil || !strings.Contains(err.Error(), `field "step" is 21 bytes`) {
		t.Fatalf("step over MaxNameBytes: %v", err)
	}
	big := replyJSON(t, set("payload", map[string]string{"p": strings.Repeat("x", 600)}))
	if _, err := limits.DecodeReply(big); !errors.Is(err, message.ErrOversize) || !strings.Contains(err.Error(), "more than the 600 allowed") {
		t.Fatalf("value over MaxValueBytes: %v", err)
	}
	if _, err := limits.DecodeReply(replyJSON(t, set("reason", "no"))); err != nil {
		t.Fatalf("a small reply within small limits: %v", err)
	}
}

func TestReplyToIsATopicName(t *testing.T) {
	t.Parallel()
	for _, good := range []string{"saga.replies", "r", "A-b_c.9", "...", strings.Repeat("x", 249)} {
		if _, err := message.DecodeCommand(commandJSON(t, set("reply_to", good))); err != nil {
			t.Errorf("reply_to %q: %v", good, err)
		}
		if err := message.CheckTopicName(good); err != nil {
			t.Errorf("CheckTopicName(%q) = %v", good, err)
		}
	}
	for bad, names := range map[string][]string{
		".":                      {"not allowed"},
		"..":                     {"not allowed"},
		"saga replies":           {`' '`, "at byte 4", "ASCII letters"},
		"a/b":                    {`'/'`, "at byte 1"},
		"réponses":               {`'é'`, "at byte 1"},
		"a\x00b":                 {`'\x00'`},
		"a\xffb":                 {"byte 0xff"},
		strings.Repeat("x", 250): {"250 bytes", "249"},
	} {
		c := validCommand()
		c.ReplyTo = bad
		_, err := message.EncodeCommand(c)
		wantInvalid(t, err, append([]string{`field "reply_to"`}, names...)...)
		safeText(t, err.Error())
		b := commandJSON(t, set("reply_to", "MARK"))
		raw, _ := json.Marshal(bad)
		if utf8.ValidString(bad) {
			_, err = message.DecodeCommand(withRaw(t, b, string(raw)))
			if !strings.Contains(bad, "\x00") {
				wantInvalid(t, err, append([]string{`field "reply_to"`}, names...)...)
			} else {
				wantInvalid(t, err, `field "reply_to"`, "NUL") // the text check comes first
			}
		}
		if err := message.CheckTopicName(bad); err == nil {
			t.Errorf("CheckTopicName(%q) = nil", bad)
		}
	}
}

// Encoding refuses what decoding refuses, so nothing we send is refused.
func TestEncodeRefusesWhatDecodeRefuses(t *testing.T) {
	t.Parallel()
	cmd := []struct {
		name  string
		edit  func(*message.Command)
		names []string
	}{
		{"NUL in saga_type", func(c *message.Command) { c.SagaType = "a\x00" }, []string{`"saga_type"`, "NUL character (U+0000) at byte 1"}},
		{"NUL in aggregate_id", func(c *message.Command) { c.AggregateID = "\x00" }, []string{`"aggregate_id"`, "at byte 0"}},
		{"invalid UTF-8 in step", func(c *message.Command) { c.Step = "st\xe9p" }, []string{`"step"`, "not valid UTF-8 at byte 2"}},
		{"long step", func(c *message.Command) { c.Step = strings.Repeat("s", 256) }, []string{`"step"`, "256 bytes"}},
		{"attempt over int4", func(c *message.Command) { c.Attempt = message.MaxAttempt + 1 }, []string{`"attempt"`}},
		{"NUL in the payload", func(c *message.Command) { c.Payload = json.RawMessage(`{"a":"\u0000"}`) }, []string{`"payload"`, "NUL"}},
		{"invalid UTF-8 in the payload", func(c *message.Command) { c.Payload = json.RawMessage("{\"a\":\"\xff\"}") }, []string{`"payload"`, "invalid UTF-8"}},
		{"lone surrogate in the payload", func(c *message.Command) { c.Payload = json.RawMessage(`{"\ud800":1}`) }, []string{`"payload"`, "surrogate"}},
		{"huge number in the payload", func(c *message.Command) { c.Payload = json.RawMessage(`{"a":1e999999}`) }, []string{`"payload"`, "numeric"}},
		{"payload over the bound", func(c *message.Command) {
			c.Payload = json.RawMessage(`{"a":"` + strings.Repeat("x", message.MaxPayloadBytesDefault) + `"}`)
		}, []string{`"payload"`, "longer than the 983040 allowed"}},
		{"value over the bound once escaped", func(c *message.Command) {
			c.Payload = json.RawMessage(`{"a":"` + strings.Repeat("<", 200000) + `"}`) // written \u003c: 1.2 MB
		}, []string{"too large", "more than the 1048576 allowed"}},
	}
	for _, tc := range cmd {
		c := validCommand()
		tc.edit(&c)
		b, err := message.EncodeCommand(c)
		if b != nil {
			t.Errorf("%s: bytes with the error", tc.name)
		}
		wantInvalid(t, err, tc.names...)
		safeText(t, err.Error())
	}
	reply := []struct {
		name  string
		edit  func(*message.Reply)
		names []string
	}{
		{"NUL in the reason", func(r *message.Reply) { r.Reason = "declined\x00x" }, []string{`field "reason" contains a NUL character (U+0000) at byte 8`}},
		{"invalid UTF-8 in the reason", func(r *message.Reply) { r.Reason = "\xc3" }, []string{`"reason"`, "not valid UTF-8 at byte 0"}},
		{"long reason", func(r *message.Reply) { r.Reason = strings.Repeat("é", 1024) }, []string{`field "reason" is 2048 bytes, longer than the 1024 allowed`}},
		{"long outcome", func(r *message.Reply) { r.Outcome = message.Outcome(strings.Repeat("\x00", 1<<20)) }, []string{`"outcome"`, `"\x00\x00`, "(1048576 bytes)"}},
		{"NUL in the payload key", func(r *message.Reply) { r.Payload = json.RawMessage(`{"k\u0000":1}`) }, []string{`"payload"`, "member name"}},
		{"step with NUL", func(r *message.Reply) { r.Step = strings.Repeat("\x00", 5000) }, []string{`"step"`, "5000 bytes"}},
	}
	for _, tc := range reply {
		r := validReply()
		tc.edit(&r)
		b, err := message.EncodeReply(r)
		if b != nil {
			t.Errorf("%s: bytes with the error", tc.name)
		}
		wantInvalid(t, err, tc.names...)
		safeText(t, err.Error())
	}
	if _, err := (message.Limits{MaxReasonBytes: 2000}).EncodeReply(func() message.Reply {
		r := validReply()
		r.Reason = strings.Repeat("x", 1500)
		return r
	}()); err != nil {
		t.Fatalf("a 1500-byte reason with MaxReasonBytes 2000: %v", err)
	}
}

func TestZeroLimitsAreTheDefaults(t *testing.T) {
	t.Parallel()
	explicit := message.Limits{MaxValueBytes: message.MaxValueBytesDefault, MaxPayloadBytes: message.MaxPayloadBytesDefault,
		MaxReasonBytes: message.MaxReasonBytesDefault, MaxNameBytes: message.MaxNameBytesDefault}
	if message.MaxValueBytesDefault != message.MaxPayloadBytes || message.MaxPayloadBytesDefault >= message.MaxValueBytesDefault {
		t.Fatalf("value bound %d, payload bound %d", message.MaxValueBytesDefault, message.MaxPayloadBytesDefault)
	}
	for _, in := range [][]byte{replyJSON(t, set("reason", strings.Repeat("x", 1025))), replyJSON(t, set("reason", strings.Repeat("x", 1024))), replyJSON(t, nil)} {
		_, e1 := message.DecodeReply(in)
		_, e2 := explicit.DecodeReply(in)
		_, e3 := message.Limits{MaxReasonBytes: -1}.DecodeReply(in)
		if (e1 == nil) != (e2 == nil) || (e1 == nil) != (e3 == nil) {
			t.Fatalf("DecodeReply %v, explicit defaults %v, negative %v", e1, e2, e3)
		}
	}
	c := validCommand()
	c.Step = strings.Repeat("s", 300)
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "300 bytes") {
		t.Fatalf("Validate: %v", err)
	}
	if err := (message.Limits{MaxNameBytes: 300}).ValidateCommand(&c); err != nil {
		t.Fatalf("ValidateCommand with MaxNameBytes 300: %v", err)
	}
	r := validReply()
	r.Reason = strings.Repeat("r", 1025)
	if err := r.Validate(); err == nil {
		t.Fatal("Validate took a 1025-byte reason")
	}
	if err := (message.Limits{MaxReasonBytes: 1025}).ValidateReply(&r); err != nil {
		t.Fatalf("ValidateReply with MaxReasonBytes 1025: %v", err)
	}
}

func TestErrorTextsAreSafe(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("\xff\x00é", 100000)
	errs := []error{
		(&message.FieldError{Field: huge, Reason: huge}),
		message.MatchRecordHeaders([]message.Header{{Key: message.HeaderMessageID, Value: []byte(huge)}}, msgID, sagaID),
		message.CheckTopicName(huge),
	}
	_, err := message.DecodeReply(replyJSON(t, set("action", strings.Repeat("\u0000", 1000))))
	errs = append(errs, err)
	_, err = message.DecodeCommand([]byte(`[` + strings.Repeat("1", 100000) + `]`))
	errs = append(errs, err)
	_, err = message.DecodeCommand(commandJSON(t, set("sent_at", strings.Repeat("\u00e9", 10000))))
	errs = append(errs, err)
	_, err = message.DecodeCommand([]byte(`{"attempt":` + strings.Repeat("9", 100000) + `}`))
	errs = append(errs, err)
	for _, err := range errs {
		if !errors.Is(err, message.ErrInvalid) {
			t.Fatalf("%v does not wrap ErrInvalid", err)
		}
		safeText(t, err.Error())
	}
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exact", 5, "exact"},
		{"", 0, ""},
		{"abc", 0, ""},
		{strings.Repeat("a", 40), 20, "aaaaaaa...(40 bytes)"},
		{strings.Repeat("é", 20), 20, "ééé...(40 bytes)"}, // 7 bytes left: 3 é, no half of a fourth
		{"héllo wörld", 8, "héll..."},                     // too short for "(13 bytes)"
		{"abcdef", 3, "abc"},
		{"a\x00b", 10, "a\uFFFDb"},
		{"a\xffb", 10, "a\uFFFDb"},
		{"a\xff\xfeb", 10, "a\uFFFDb"},
		{"\x00\x00\x00\x00\x00", 5, "..."}, // five U+FFFD are 15 bytes
		{"🙂🙂🙂", 11, "🙂🙂..."},
	}
	for _, tc := range cases {
		got := message.Truncate(tc.s, tc.n)
		if got != tc.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
		if len(got) > max(tc.n, 0) || !utf8.ValidString(got) || strings.IndexByte(got, 0) >= 0 {
			t.Errorf("Truncate(%q, %d) = %q: not safe text within the bound", tc.s, tc.n, got)
		}
	}
}

func FuzzTruncate(f *testing.F) {
	f.Add("héllo\x00wörld\xff", 7)
	f.Add(strings.Repeat("🙂", 50), 30)
	f.Fuzz(func(t *testing.T, s string, n int) {
		got := message.Truncate(s, n)
		if len(got) > max(n, 0) || !utf8.ValidString(got) || strings.IndexByte(got, 0) >= 0 {
			t.Fatalf("Truncate(%q, %d) = %q", s, n, got)
		}
		if len(s) <= n && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 && got != s {
			t.Fatalf("Truncate(%q, %d) = %q, want it unchanged", s, n, got)
		}
		if clean := strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD"); len(clean) > n && n >= 16 {
			prefix := got[:strings.LastIndex(got, "...")]
			if !strings.HasPrefix(strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD"), prefix) {
				t.Fatalf("Truncate(%q, %d) = %q is not a prefix of the cleaned text", s, n, got)
			}
		}
	})
}

func TestCheckRecordHeaders(t *testing.T) {
	t.Parallel()
	h := func(kv ...string) []message.Header {
		var hs []message.Header
		for i := 0; i < len(kv); i += 2 {
			hs = append(hs, message.Header{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return hs
	}
	std := h(message.HeaderMessageID, msgID.String(), message.HeaderSagaID, sagaID.String(), message.HeaderContentType, message.ContentTypeJSON)
	cases := []struct {
		name    string
		headers []message.Header
		names   []string // nil: no error
	}{
		{"none", nil, nil},
		{"ours", std, nil},
		{"foreign text", slices.Concat(h("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "", ""), std), nil},
		{"dlq reason at the bound", h(message.HeaderDLQReason, strings.Repeat("r", message.MaxHeaderValueBytesDefault)), nil},
		{"NUL in a key", h("a\x00b", "v"), []string{`header "a\x00b" has a key that contains a NUL character (U+0000) at byte 1`}},
		{"invalid UTF-8 in a key", slices.Concat(std, h("\xff", "v")), []string{`header "\xff" has a key that is not valid UTF-8 at byte 0`}},
		{"NUL in our value", h(message.HeaderSagaID, "7c9e6679\x00"), []string{`header "saga-id" contains a NUL character (U+0000) at byte 8`}},
		{"invalid UTF-8 in a foreign value", h("x-trace", "ok\xc3"), []string{`header "x-trace" is not valid UTF-8 at byte 2`}},
		{"long message id", h(message.HeaderMessageID, strings.Repeat("\x00", 2048)), []string{`header "message-id" is 2048 bytes, longer than the 1024 allowed`}},
		{"long dlq reason", h(message.HeaderDLQReason, strings.Repeat("r", 1025)), []string{`header "dlq-reason" is 1025 bytes`}},
		{"duplicate message id", slices.Concat(std, h(message.HeaderMessageID, uuid.NewString())), []string{`header "message-id" appears more than once`}},
		{"too much in all", h("a", strings.Repeat("x", 10000), "b", strings.Repeat("\xff", 10000)), []string{"2 headers are 20002 bytes", "more than the 16384 allowed"}},
		{"700 KB saga id", h("x", "y", message.HeaderSagaID, strings.Repeat("s", 700<<10)), []string{`header "saga-id" is 716800 bytes, longer than the 1024 allowed`}},
		{"700 KB key", h(strings.Repeat("k", 700<<10), "v"), []string{"headers are 716801 bytes"}},
	}
	for _, tc := range cases {
		err := message.CheckRecordHeaders(tc.headers)
		if tc.names == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			wantInvalid(t, err, tc.names...)
			safeText(t, err.Error())
			if strings.Contains(err.Error(), "xxxx") || strings.Contains(err.Error(), "rrrr") {
				t.Fatalf("the error quotes a value: %v", err)
			}
		})
	}
	// Configured bounds.
	l := message.HeaderLimits{MaxValueBytes: 36, MaxTotalBytes: 100}
	if err := message.CheckRecordHeadersLimits(std[:2], l); err != nil {
		t.Fatalf("two ids within 36-byte values and 100 bytes: %v", err)
	}
	if err := message.CheckRecordHeadersLimits(std, l); err == nil || !strings.Contains(err.Error(), "more than the 100 allowed") {
		t.Fatalf("three headers over 100 bytes: %v", err)
	}
	if err := message.CheckRecordHeadersLimits(h(message.HeaderContentType, "application/json; charset=utf-8"), l); err != nil {
		t.Fatalf("content type of 31 bytes: %v", err)
	}
	if err := message.CheckRecordHeadersLimits(h(message.HeaderMessageID, msgID.String()+"0"), l); err == nil {
		t.Fatal("a 37-byte message id with MaxValueBytes 36")
	}
	// Any type with the fields of Header will do (kafka-go's kafka.Header is one).
	type kafkaHeader struct {
		Key   string
		Value []byte
	}
	if err := message.CheckRecordHeaders([]kafkaHeader{{Key: "k\x00", Value: nil}}); err == nil {
		t.Fatal("a NUL in a key of another header type")
	}
}

func TestMatchRecordHeaders(t *testing.T) {
	t.Parallel()
	other := uuid.MustParse("11111111-2222-4333-8444-555555555555")
	hs := func(kv ...string) []message.Header {
		var out []message.Header
		for i := 0; i < len(kv); i += 2 {
			out = append(out, message.Header{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return out
	}
	for name, tc := range map[string]struct {
		headers []message.Header
		names   []string
	}{
		"none":               {nil, nil},
		"matching":           {hs(message.HeaderMessageID, msgID.String(), message.HeaderSagaID, sagaID.String()), nil},
		"upper case":         {hs(message.HeaderMessageID, strings.ToUpper(msgID.String())), nil},
		"other headers only": {hs("x", "y", message.HeaderContentType, message.ContentTypeJSON), nil},
		"message id differs": {hs(message.HeaderMessageID, other.String()), []string{`header "message-id" is "` + other.String() + `" but body message_id has hash ` + message.IDHash(msgID)}},
		"saga id garbage":    {hs(message.HeaderSagaID, "gar\x00bage"), []string{`header "saga-id" is "gar\x00bage"`}},
		"second copy differs": {hs(message.HeaderMessageID, msgID.String(), message.HeaderMessageID, other.String()),
			[]string{`header "message-id"`, other.String()}},
	} {
		err := message.MatchRecordHeaders(tc.headers, msgID, sagaID)
		if tc.names == nil {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		wantInvalid(t, err, tc.names...)
		safeText(t, err.Error())
	}
}

// What CheckRecordHeaders accepts is text within the bounds; what it
// refuses it says safely.
func FuzzCheckRecordHeaders(f *testing.F) {
	f.Add(message.HeaderMessageID, []byte(msgID.String()), "x-trace", []byte("a\x00"))
	f.Add("k\xff", []byte("v"), message.HeaderSagaID, []byte(strings.Repeat("s", 2000)))
	f.Fuzz(func(t *testing.T, k1 string, v1 []byte, k2 string, v2 []byte) {
		hs := []message.Header{{Key: k1, Value: v1}, {Key: k2, Value: v2}}
		err := message.CheckRecordHeaders(hs)
		if err != nil {
			wantInvalid(t, err)
			safeText(t, err.Error())
			return
		}
		total := 0
		for _, h := range hs {
			total += len(h.Key) + len(h.Value)
			for _, s := range []string{h.Key, string(h.Value)} {
				if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
					t.Fatalf("accepted %q", hs)
				}
			}
			if slices.Contains([]string{message.HeaderMessageID, message.HeaderSagaID, message.HeaderContentType}, h.Key) && len(h.Value) > message.MaxHeaderValueBytesDefault {
				t.Fatalf("accepted a %d-byte %s", len(h.Value), h.Key)
			}
		}
		if total > message.MaxHeadersBytesDefault || (k1 == k2 && slices.Contains([]string{message.HeaderMessageID, message.HeaderSagaID}, k1)) {
			t.Fatalf("accepted %d bytes of headers, keys %q %q", total, k1, k2)
		}
	})
}
