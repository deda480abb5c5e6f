package message_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
)

// The promise of decoding: what DecodeCommand and DecodeReply accept goes
// into Postgres as it is (strings into text columns, the payload into
// jsonb). These tests hold it against a real server (testkit: a fresh
// database per test; testkit does not import this package).

// payloadVerdicts are payloads on both sides of what Postgres 15 accepts
// in jsonb, found against the server: \u0000 is refused ("unsupported
// Unicode escape sequence"), in names too; every unpaired surrogate escape
// is refused ("Unicode low surrogate must follow a high surrogate", "...
// high surrogate must not follow a high surrogate"), a pair is one
// character; invalid UTF-8 is refused as text; numbers are numeric: at
// most 16383 digits after the point once the exponent is applied (trailing
// zeros count, zero too), a most significant digit at most 10^131071, an
// exponent below 2^30-1 even on zero; \uffff, \ufffe, \ufffd and control
// escapes are stored.
var payloadVerdicts = []struct {
	payload string
	ok      bool
}{
	{`{"a":"\u0000"}`, false},
	{`{"\u0000":1}`, false},
	{`{"a":"x\u0000"}`, false},
	{`{"a":"\ud800"}`, false},
	{`{"a":"\udc00"}`, false},
	{`{"a":"\ud800x"}`, false},
	{`{"a":"\ud800\u0041"}`, false},
	{`{"a":"\ud800\ud800"}`, false},
	{`{"a":"\udc00\ud800"}`, false},
	{`{"\udbff":true}`, false},
	{"{\"a\":\"\xff\"}", false},
	{"{\"a\":\"\xed\xa0\x80\"}", false},
	{"{\"\xc3\":1}", false},
	{`{"n":1e131072}`, false},
	{`{"n":10e131071}`, false},
	{`{"n":1e-16384}`, false},
	{`{"n":0e-16384}`, false},
	{`{"n":0.0e-16383}`, false},
	{`{"n":1.55e-16382}`, false},
	{`{"n":0e1073741823}`, false},
	{`{"n":0e-1073741823}`, false},
	{`{"n":1e-99999999999999999999}`, false},
	{`{"n":[1` + strings.Repeat("0", 131072) + `]}`, false},
	{`{"n":0.` + strings.Repeat("0", 16383) + `1}`, false},
	{`{"a":"\ud83d\ude00"}`, true},
	{`{"a":"\uD83D\uDE00"}`, true},
	{`{"a":"\ufffd\uffff\ufffe\u0001\u001f"}`, true},
	{`{"é中🙂":"` + "\uFFFD" + `"}`, true},
	{`{"n":1e131071}`, true},
	{`{"n":9.9999e131071}`, true},
	{`{"n":1e-16383}`, true},
	{`{"n":0e-16383}`, true},
	{`{"n":-0.0e-16382}`, true},
	{`{"n":1.5e-16382}`, true},
	{`{"n":0e1073741822}`, true},
	{`{"n":0e-1073741822}`, false}, // scale 1073741822
	{`{"n":1e00000000000000000000005}`, true},
	{`{"n":[1` + strings.Repeat("0", 131071) + `]}`, true},
	{`{"n":0.` + strings.Repeat("0", 16382) + `1}`, true},
	{`{"n":-0,"m":1E+2,"o":100e-2}`, true},
}

func TestPostgresAgreesOnPayloads(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	ctx := testkit.Context(t, time.Minute)
	for _, v := range payloadVerdicts {
		_, decErr := message.DecodeReply(withRaw(t, replyJSON(t, set("payload", "MARK")), v.payload))
		var got string
		pgErr := pool.QueryRow(ctx, `SELECT $1::jsonb::text`, v.payload).Scan(&got)
		short := message.Truncate(v.payload, 60)
		if (pgErr == nil) != v.ok {
			t.Errorf("%q: Postgres says %v, the table says ok=%v", short, pgErr, v.ok)
		}
		if (decErr == nil) != (pgErr == nil) {
			t.Errorf("%q: DecodeReply says %v, Postgres %v", short, decErr, pgErr)
		}
		if pgErr != nil {
			var pe *pgconn.PgError
			if !errors.As(pgErr, &pe) {
				t.Errorf("%q: %v is not the server's refusal", short, pgErr)
			}
		}
	}
}

// String fields: NUL and invalid UTF-8 are refused by text columns as by
// decoding. A lone surrogate escape in a string field is refused by
// decoding although encoding/json would have read it as U+FFFD, which text
// stores: the sender meant something else, and we do not store a silently
// replaced character.
func TestPostgresAgreesOnStrings(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	ctx := testkit.Context(t, time.Minute)
	for _, s := range []struct {
		raw  string // JSON string
		text string // what a text column would be given
		ok   bool
	}{
		{`"declined\u0000x"`, "declined\x00x", false},
		{"\"ab\xffc\"", "ab\xffc", false},
		{`"ok \ud83d\ude00 \u0001 \uffff"`, "ok 😀 \x01 \uffff", true},
	} {
		_, decErr := message.DecodeReply(withRaw(t, replyJSON(t, set("reason", "MARK")), s.raw))
		_, pgErr := pool.Exec(ctx, `SELECT $1::text`, s.text)
		if (decErr == nil) != s.ok || (pgErr == nil) != s.ok {
			t.Errorf("%q: DecodeReply %v, Postgres %v, want ok=%v", s.raw, decErr, pgErr, s.ok)
		}
	}
}

func storeReply(ctx context.Context, pool *pgxpool.Pool, r message.Reply) error {
	_, err := pool.Exec(ctx, `INSERT INTO replies (message_id, in_reply_to, saga_id, step, action, outcome, reason, payload)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb)`,
		r.MessageID, r.InReplyTo, r.SagaID, r.Step, string(r.Action), string(r.Outcome), r.Reason, payloadArg(r.Payload))
	return err
}

func storeCommand(ctx context.Context, pool *pgxpool.Pool, c message.Command) error {
	_, err := pool.Exec(ctx, `INSERT INTO commands (message_id, saga_id, saga_type, aggregate_id, step, action, attempt, reply_to, sent_at, payload)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb)`,
		c.MessageID, c.SagaID, c.SagaType, c.AggregateID, c.Step, string(c.Action), c.Attempt, c.ReplyTo, c.SentAt, payloadArg(c.Payload))
	return err
}

// payloadArg is the payload's JSON text as the server is to parse it, or
// SQL NULL.
func payloadArg(p []byte) any {
	if len(p) == 0 {
		return nil
	}
	return string(p)
}

// postgresSeeds are the NUL, UTF-8, surrogate, number and length cases
// (refused, for the fuzzer to mutate) and their storable neighbours.
func postgresSeeds(f *testing.F, value func(field string, raw string) []byte, fields []string) {
	for _, v := range payloadVerdicts {
		if len(v.payload) < 1000 {
			f.Add(value("payload", v.payload))
		}
	}
	for _, field := range fields {
		for _, raw := range []string{`"a\u0000b"`, "\"a\xffb\"", `"\ud800"`, `"x\udc00"`, `"\ud83d\ude00"`, `"\ufffd\u0001"`, `"é"`, `"` + strings.Repeat("x", 255) + `"`} {
			f.Add(value(field, raw))
		}
	}
	f.Add(value("future", `{"k\u0000":[1e131072]}`))
}

func FuzzDecodeReplyPostgres(f *testing.F) {
	pool := testkit.Pool(f)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE replies (message_id uuid, in_reply_to uuid, saga_id uuid,
		step text, action text, outcome text, reason text, payload jsonb)`); err != nil {
		f.Fatal(err)
	}
	// The harness sees a refusal (the server parses the payload).
	bad := validReply()
	bad.Payload = []byte(`{"a":"\u0000"}`)
	if err := storeReply(ctx, pool, bad); err == nil {
		f.Fatal("Postgres stored a payload with \\u0000")
	}
	postgresSeeds(f, func(field, raw string) []byte { return withRaw(f, replyJSON(f, set(field, "MARK")), raw) },
		[]string{"step", "reason", "outcome"})
	f.Add(replyJSON(f, set("reason", strings.Repeat("é", 512))))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := message.DecodeReply(b)
		if err != nil {
			return
		}
		if err := storeReply(ctx, pool, r); err != nil {
			t.Fatalf("DecodeReply accepted %q, Postgres refuses it: %v", b, err)
		}
	})
}

func FuzzDecodeCommandPostgres(f *testing.F) {
	pool := testkit.Pool(f)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE commands (message_id uuid, saga_id uuid, saga_type text, aggregate_id text,
		step text, action text, attempt integer, reply_to text, sent_at timestamptz, payload jsonb)`); err != nil {
		f.Fatal(err)
	}
	postgresSeeds(f, func(field, raw string) []byte { return withRaw(f, commandJSON(f, set(field, "MARK")), raw) },
		[]string{"saga_type", "aggregate_id", "step", "reply_to"})
	f.Add(commandJSON(f, set("attempt", message.MaxAttempt)))
	f.Add(commandJSON(f, set("sent_at", "0000-01-01T00:00:00-23:59")))
	f.Add(commandJSON(f, set("sent_at", "9999-12-31T23:59:59.999999999+23:59")))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := message.DecodeCommand(b)
		if err != nil {
			return
		}
		if err := storeCommand(ctx, pool, c); err != nil {
			t.Fatalf("DecodeCommand accepted %q, Postgres refuses it: %v", b, err)
		}
	})
}
