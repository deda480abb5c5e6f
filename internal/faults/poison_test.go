package faults_test

// Poison messages (issue 17, item 4). One named test per poison class: bad
// records are produced on the reply topic (the orchestrator's consumer,
// HandleReplies) and on a participant's command topic (HandleCommands) on
// every partition, ahead of the sagas of a seeded workload; every saga must
// still end in bounded time with the invariants holding, and every bad
// record must be on the dead-letter topic of its topic with a reason that
// names its problem.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

const (
	// poisonOrders is the workload of each poison test.
	poisonOrders = 8
	// poisonSettle bounds how long the sagas may take to end with the
	// poison on their partitions.
	poisonSettle = 45 * time.Second
	// poisonPartitions is the partition count of every topic (newEnv).
	poisonPartitions = 4
)

// fields is a JSON object written member by member, values as raw JSON
// text, so that a test can put exactly the bytes it wants in one member
// (an escape, an invalid UTF-8 byte) and nowhere else.
type fields [][2]string

// set returns f with member name's raw value replaced (or appended).
func (f fields) set(name, raw string) fields {
	out := slices.Clone(f)
	for i := range out {
		if out[i][0] == name {
			out[i][1] = raw
			return out
		}
	}
	return append(out, [2]string{name, raw})
}

func (f fields) bytes() []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, kv := range f {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + kv[0] + `":` + kv[1])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// q is a JSON string with s between the quotes as it is: s carries its own
// escapes (write `\u0000` for the escape) and raw bytes.
func q(s string) string { return `"` + s + `"` }

// replyFields is a well-formed reply: a failure of reserve-inventory.
func replyFields(msgID, sagaID, inReplyTo uuid.UUID) fields {
	return fields{
		{"message_id", q(msgID.String())}, {"in_reply_to", q(inReplyTo.String())}, {"saga_id", q(sagaID.String())},
		{"step", q(orderapi.StepReserveInventory)}, {"action", q("forward")}, {"outcome", q("failure")}, {"reason", q("declined")},
	}
}

// commandFields is a well-formed reserve-inventory command of one unit of
// an item of the plan (were it executed, the stock check would see it).
func commandFields(replyTo string, msgID, sagaID uuid.UUID) fields {
	return fields{
		{"message_id", q(msgID.String())}, {"saga_id", q(sagaID.String())}, {"saga_type", q(orderapi.SagaType)},
		{"aggregate_id", q("order-poison")}, {"step", q(orderapi.StepReserveInventory)}, {"action", q("forward")},
		{"attempt", "1"}, {"reply_to", q(replyTo)}, {"sent_at", q("2026-01-02T03:04:05Z")},
		{"payload", `{"order_id":"order-poison","sku":"sku-apple","qty":1}`},
	}
}

// poison is one kind of bad record.
type poison struct {
	what string
	// want: substrings the dead-letter reason must contain.
	want []string
	// record builds a fresh record (fresh ids) with the given key.
	record func(key string) kafka.Message
}

// replyPoison is a reply whose body is f applied to a well-formed one.
func replyPoison(what string, want []string, f func(fields) fields) poison {
	return poison{what: what, want: want, record: func(key string) kafka.Message {
		id, sagaID := uuid.New(), uuid.New()
		return record(key, f(replyFields(id, sagaID, uuid.New())).bytes(), stdHeaders(id, sagaID))
	}}
}

// commandPoison is a command whose body is f applied to a well-formed one.
func commandPoison(replyTo, what string, want []string, f func(fields) fields) poison {
	return poison{what: what, want: want, record: func(key string) kafka.Message {
		id, sagaID := uuid.New(), uuid.New()
		return record(key, f(commandFields(replyTo, id, sagaID)).bytes(), stdHeaders(id, sagaID))
	}}
}

// headerPoison is a well-formed body (body(msgID, sagaID)) whose headers
// are changed by h.
func headerPoison(what string, want []string, body func(msgID, sagaID uuid.UUID) []byte, h func(msgID, sagaID uuid.UUID, hs map[string]*string)) poison {
	return poison{what: what, want: want, record: func(key string) kafka.Message {
		id, sagaID := uuid.New(), uuid.New()
		hs := stdHeaders(id, sagaID)
		h(id, sagaID, hs)
		return record(key, body(id, sagaID), hs)
	}}
}

func goodReply(msgID, sagaID uuid.UUID) []byte { return replyFields(msgID, sagaID, uuid.New()).bytes() }

func goodCommand(replyTo string) func(msgID, sagaID uuid.UUID) []byte {
	return func(msgID, sagaID uuid.UUID) []byte { return commandFields(replyTo, msgID, sagaID).bytes() }
}

// keyOn returns a key that kafka.Hash (the producers' balancer) puts on
// partition p of poisonPartitions.
func keyOn(prefix string, p int) string {
	parts := make([]int, poisonPartitions)
	for i := range parts {
		parts[i] = i
	}
	for n := 0; ; n++ {
		k := fmt.Sprintf("%s#%d", prefix, n)
		if (kafkaclient.Balancer()).Balance(kafka.Message{Key: []byte(k)}, parts...) == p {
			return k
		}
	}
}

// spread builds one record of each poison per partition, keyed so that
// the key names the poison (the dead letter keeps the key).
func spread(ps []poison) (map[string]poison, []kafka.Message) {
	byKey := map[string]poison{}
	var ms []kafka.Message
	for i, p := range ps {
		for part := range poisonPartitions {
			k := keyOn(fmt.Sprintf("poison-%d-p%d", i, part), part)
			byKey[k] = p
			ms = append(ms, p.record(k))
		}
	}
	return byKey, ms
}

// produceLarge writes records that may be over kafka-go's default batch
// bound (1 MiB) and, once compressed, still under the broker's 1 MiB
// record-batch bound: gzip, batches up to 8 MiB uncompressed.
func (e *env) produceLarge(topic string, ms ...kafka.Message) {
	e.t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(e.brokers...), Topic: topic, Transport: tr, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, BatchBytes: 8 << 20, Compression: kafka.Gzip, Balancer: kafkaclient.Balancer()}
	defer w.Close()
	if err := w.WriteMessages(testkit.Context(e.t, 30*time.Second), ms...); err != nil {
		e.t.Fatalf("produce %d records to %s: %v", len(ms), topic, err)
	}
}

// deadLetters waits until topic has at least want records and returns them.
func (e *env) deadLetters(topic string, want int) []kafka.Message {
	e.t.Helper()
	testkit.Eventually(e.t, settle, fmt.Sprintf("%d dead letters on %s", want, topic), func() (bool, error) {
		n, err := e.records(topic)
		return n >= int64(want), err
	})
	return e.readAll(topic, want)
}

func headerOf(m kafka.Message, key string) (string, bool) {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// checkDeadLettered checks that every record of byKey is on dlq (from the
// topic from) with a reason naming its problem, and that nothing else is.
// It returns the dead letters by key.
func (e *env) checkDeadLettered(side, from string, byKey map[string]poison) map[string]kafka.Message {
	e.t.Helper()
	dls := e.deadLetters(from+inbox.DLQSuffixDefault, len(byKey))
	got := map[string]kafka.Message{}
	for _, m := range dls {
		k := string(m.Key)
		if _, ok := byKey[k]; !ok {
			e.t.Errorf("%s: unexpected dead letter key %q reason %q", side, k, m.Headers)
			continue
		}
		if _, dup := got[k]; dup {
			// At least once: a redelivered bad record is dead-lettered again.
			e.t.Logf("%s: %q dead-lettered twice", side, k)
		}
		got[k] = m
	}
	for k, p := range byKey {
		m, ok := got[k]
		if !ok {
			e.t.Errorf("%s: %s (key %q) is not on the dead-letter topic", side, p.what, k)
			continue
		}
		reason, _ := headerOf(m, message.HeaderDLQReason)
		for _, w := range p.want {
			if !strings.Contains(reason, w) {
				e.t.Errorf("%s: %s: dead-letter reason %q does not say %q", side, p.what, reason, w)
			}
		}
		if len(reason) > inbox.MaxReasonBytes {
			e.t.Errorf("%s: %s: reason is %d bytes, more than %d", side, p.what, len(reason), inbox.MaxReasonBytes)
		}
		if topic, _ := headerOf(m, message.HeaderDLQTopic); topic != from {
			e.t.Errorf("%s: %s: %s is %q, want %q", side, p.what, message.HeaderDLQTopic, topic, from)
		}
		if _, ok := headerOf(m, message.HeaderDLQOffset); !ok {
			e.t.Errorf("%s: %s: no %s header", side, p.what, message.HeaderDLQOffset)
		}
	}
	seen := map[string]bool{}
	for k, p := range byKey {
		if !seen[p.what] {
			seen[p.what] = true
			r, _ := headerOf(got[k], message.HeaderDLQReason)
			e.t.Logf("%s: %s -> %q", side, p.what, r)
		}
	}
	return got
}

// poisonRun runs the reference workload with the records of replies on the
// reply topic and those of commands on the inventory command topic, one of
// each kind per partition, produced before any saga starts (every reply
// and command of the workload queues behind them). Every saga must end in
// poisonSettle with the invariants holding, and every bad record must be
// dead-lettered with its reason. It returns the env and the dead letters
// by key (reply side, command side).
func poisonRun(t *testing.T, seed int64, replies, commands func(e *env) []poison, before ...func(e *env)) (*env, map[string]kafka.Message, map[string]kafka.Message) {
	t.Helper()
	e := newEnv(t, envOpts{orders: poisonOrders, seed: seed})
	ctx := testkit.Context(t, 2*time.Minute)
	for _, f := range before {
		f(e)
	}
	e.runAll()
	cmdTopic := e.prefix + orderapi.Inventory + ".commands"
	replyKeys, rs := spread(replies(e))
	cmdKeys, cs := spread(commands(e))
	e.produceLarge(e.replies, rs...)
	e.produceLarge(cmdTopic, cs...)
	start := time.Now()
	e.startAll(ctx)
	e.waitTerminal(poisonSettle)
	t.Logf("%d sagas terminal %s after the start, behind %d bad replies and %d bad commands", len(e.plan.Orders), time.Since(start).Round(time.Millisecond), len(rs), len(cs))
	e.checkInvariants(false)
	rd := e.checkDeadLettered("reply consumer", e.replies, replyKeys)
	cd := e.checkDeadLettered("command consumer", cmdTopic, cmdKeys)
	return e, rd, cd
}

// NUL in a reason: a reply whose reason is "declined\u0000x" (valid JSON;
// Postgres text refuses the NUL); on the command topic the same in a member
// commands do not have and in aggregate_id.
func TestPoisonNULInReason(t *testing.T) {
	t.Parallel()
	poisonRun(t, 171,
		func(e *env) []poison {
			return []poison{replyPoison("NUL in reason", []string{`"reason"`, "NUL"}, func(f fields) fields { return f.set("reason", q(`declined\u0000x`)) })}
		},
		func(e *env) []poison {
			return []poison{
				commandPoison(e.replies, "NUL in a reason member", []string{"reason", "NUL"}, func(f fields) fields { return f.set("reason", q(`declined\u0000x`)) }),
				commandPoison(e.replies, "NUL in aggregate_id", []string{`"aggregate_id"`, "NUL"}, func(f fields) fields { return f.set("aggregate_id", q(`order\u0000x`)) }),
			}
		})
}

// NUL in a payload string: {"note":"a\u0000b"} (jsonb refuses \u0000),
// nested deeper, and in a member name.
func TestPoisonNULInPayloadString(t *testing.T) {
	t.Parallel()
	payloads := []struct{ what, raw string }{
		{"NUL in a payload string", `{"note":"a\u0000b"}`},
		{"NUL in a nested payload string", `{"a":[1,{"b":["x","y\u0000"]}]}`},
		{"NUL in a payload member name", `{"no\u0000te":1}`},
	}
	poisonRun(t, 172,
		func(e *env) []poison {
			var ps []poison
			for _, p := range payloads {
				ps = append(ps, replyPoison(p.what, []string{`"payload"`, "NUL"}, func(f fields) fields {
					return f.set("outcome", q("success")).set("reason", q("")).set("payload", p.raw)
				}))
			}
			return ps
		},
		func(e *env) []poison {
			var ps []poison
			for _, p := range payloads {
				raw := `{"order_id":"order-poison","sku":"sku-apple","qty":1,"extra":` + p.raw + `}`
				ps = append(ps, commandPoison(e.replies, p.what, []string{`"payload"`, "NUL"}, func(f fields) fields { return f.set("payload", raw) }))
			}
			return ps
		})
}

// NUL in a step name.
func TestPoisonNULInStepName(t *testing.T) {
	t.Parallel()
	step := func(f fields) fields { return f.set("step", q(orderapi.StepReserveInventory+`\u0000`)) }
	poisonRun(t, 173,
		func(e *env) []poison { return []poison{replyPoison("NUL in step", []string{`"step"`, "NUL"}, step)} },
		func(e *env) []poison {
			return []poison{commandPoison(e.replies, "NUL in step", []string{`"step"`, "NUL"}, step)}
		})
}

// NUL in a header: the saga-id, message-id and content-type headers with a
// NUL byte, and a header key with one, on well-formed bodies.
func TestPoisonNULInHeaderValue(t *testing.T) {
	t.Parallel()
	headers := func(body func(uuid.UUID, uuid.UUID) []byte) []poison {
		return []poison{
			headerPoison("NUL in the saga-id header", []string{`"saga-id"`, "NUL"}, body, func(_, s uuid.UUID, hs map[string]*string) {
				hs[message.HeaderSagaID] = ptr(s.String() + "\x00")
			}),
			headerPoison("NUL in the message-id header", []string{`"message-id"`, "NUL"}, body, func(m, _ uuid.UUID, hs map[string]*string) {
				hs[message.HeaderMessageID] = ptr(m.String()[:8] + "\x00" + m.String()[9:])
			}),
			headerPoison("NUL in the content-type header", []string{`"content-type"`, "NUL"}, body, func(_, _ uuid.UUID, hs map[string]*string) {
				hs[message.HeaderContentType] = ptr("application/json\x00")
			}),
			headerPoison("NUL in a header key", []string{"key", "NUL"}, body, func(_, _ uuid.UUID, hs map[string]*string) {
				hs["trace\x00id"] = ptr("x")
			}),
		}
	}
	poisonRun(t, 174,
		func(e *env) []poison { return headers(goodReply) },
		func(e *env) []poison { return headers(goodCommand(e.replies)) })
}

// Invalid UTF-8: a raw 0xff byte in a string of the value (reason,
// aggregate_id, step, a payload string) and in the saga-id header; and a
// lone surrogate escape, which encoding/json would read as U+FFFD.
func TestPoisonInvalidUTF8(t *testing.T) {
	t.Parallel()
	utf := []string{"UTF-8"}
	poisonRun(t, 175,
		func(e *env) []poison {
			return []poison{
				replyPoison("0xff in reason", append([]string{`"reason"`}, utf...), func(f fields) fields { return f.set("reason", q("declined\xffx")) }),
				replyPoison("0xff in step", append([]string{`"step"`}, utf...), func(f fields) fields { return f.set("step", q("reserve\xff")) }),
				replyPoison("0xff in a payload string", append([]string{`"payload"`}, utf...), func(f fields) fields {
					return f.set("outcome", q("success")).set("reason", q("")).set("payload", "{\"reservation_id\":\"r\xff1\"}")
				}),
				replyPoison("lone surrogate in reason", []string{`"reason"`, "surrogate"}, func(f fields) fields { return f.set("reason", q(`x\ud800y`)) }),
				headerPoison("0xff in the saga-id header", []string{`"saga-id"`, "UTF-8"}, goodReply, func(_, s uuid.UUID, hs map[string]*string) {
					hs[message.HeaderSagaID] = ptr(s.String()[:35] + "\xff")
				}),
			}
		},
		func(e *env) []poison {
			return []poison{
				commandPoison(e.replies, "0xff in aggregate_id", append([]string{`"aggregate_id"`}, utf...), func(f fields) fields { return f.set("aggregate_id", q("order\xff")) }),
				commandPoison(e.replies, "0xff in step", append([]string{`"step"`}, utf...), func(f fields) fields { return f.set("step", q("reserve\xff")) }),
				commandPoison(e.replies, "0xff in a payload string", append([]string{`"payload"`}, utf...), func(f fields) fields {
					return f.set("payload", "{\"order_id\":\"order-poison\",\"sku\":\"sku-\xffapple\",\"qty\":1}")
				}),
				headerPoison("0xff in the saga-id header", []string{`"saga-id"`, "UTF-8"}, goodCommand(e.replies), func(_, s uuid.UUID, hs map[string]*string) {
					hs[message.HeaderSagaID] = ptr(s.String()[:35] + "\xff")
				}),
			}
		})
}

// bigText is n bytes of text that is not a UUID.
func bigText(n int) string { return strings.Repeat("0123456789abcdef-", n/17+1)[:n] }

// An oversize header: a 700 KB saga-id header that disagrees with the body
// (the dead letter once copied it into its reason, and stalled everything
// behind it), a 700 KB header that is not one of the envelope's, and a
// 700 KB header key. The dead letters are small: the reason and the copied
// header values are cut.
func TestPoisonOversizeHeader(t *testing.T) {
	t.Parallel()
	const big = 700 << 10
	headers := func(body func(uuid.UUID, uuid.UUID) []byte) []poison {
		return []poison{
			headerPoison("700 KB saga-id header", []string{`"saga-id"`, strconv.Itoa(big) + " bytes"}, body, func(_, _ uuid.UUID, hs map[string]*string) {
				hs[message.HeaderSagaID] = ptr(bigText(big))
			}),
			headerPoison("700 KB other header", []string{"headers are", "bytes"}, body, func(_, _ uuid.UUID, hs map[string]*string) {
				hs["x-trace"] = ptr(bigText(big))
			}),
			headerPoison("700 KB header key", []string{"headers are", "bytes"}, body, func(_, _ uuid.UUID, hs map[string]*string) {
				hs[bigText(big)] = ptr("x")
			}),
		}
	}
	_, rd, cd := poisonRun(t, 176,
		func(e *env) []poison { return headers(goodReply) },
		func(e *env) []poison { return headers(goodCommand(e.replies)) })
	for _, dls := range []map[string]kafka.Message{rd, cd} {
		for k, m := range dls {
			size := len(m.Key) + len(m.Value)
			for _, h := range m.Headers {
				size += len(h.Key) + len(h.Value)
				if len(h.Value) > inbox.MaxDeadHeaderBytes {
					t.Errorf("dead letter %q: header %.40q copied with %d bytes, more than %d", k, h.Key, len(h.Value), inbox.MaxDeadHeaderBytes)
				}
				if len(h.Key) > 256 {
					t.Errorf("dead letter %q: header key copied with %d bytes", k, len(h.Key))
				}
			}
			if size > 16<<10 {
				t.Errorf("dead letter %q is %d bytes; the 700 KB header should not be in it", k, size)
			}
		}
	}
}

// An oversize value: over 1 MiB (the broker takes it compressed; the
// decoder's bound is message.MaxValueBytesDefault) and one within 1 MiB
// whose payload is over the payload bound (message.MaxPayloadBytesDefault).
// Both dead letters would be over inbox.DeadLetterBytesDefault: they are
// shortened (first KB of the value, marked).
func TestPoisonOversizeValue(t *testing.T) {
	t.Parallel()
	over := message.MaxValueBytesDefault + 512<<10
	payloadOver := message.MaxPayloadBytesDefault + 8<<10
	pad := func(n int) string { return `{"pad":"` + strings.Repeat("x", n) + `"}` }
	valueWant := []string{"too large", strconv.Itoa(message.MaxValueBytesDefault) + " allowed"}
	payloadWant := []string{`"payload"`, strconv.Itoa(message.MaxPayloadBytesDefault) + " allowed"}
	// The original values by key, per side (both sides use the same keys).
	replyValues, cmdValues := map[string][]byte{}, map[string][]byte{}
	keep := func(originals map[string][]byte, p poison) poison {
		mk := p.record
		p.record = func(key string) kafka.Message {
			m := mk(key)
			originals[key] = m.Value
			return m
		}
		return p
	}
	_, rd, cd := poisonRun(t, 177,
		func(e *env) []poison {
			success := func(f fields) fields { return f.set("outcome", q("success")).set("reason", q("")) }
			return []poison{
				keep(replyValues, replyPoison("value over 1 MiB", valueWant, func(f fields) fields { return success(f).set("payload", pad(over)) })),
				keep(replyValues, replyPoison("payload over its bound", payloadWant, func(f fields) fields { return success(f).set("payload", pad(payloadOver)) })),
			}
		},
		func(e *env) []poison {
			return []poison{
				keep(cmdValues, commandPoison(e.replies, "value over 1 MiB", valueWant, func(f fields) fields { return f.set("payload", pad(over)) })),
				keep(cmdValues, commandPoison(e.replies, "payload over its bound", payloadWant, func(f fields) fields { return f.set("payload", pad(payloadOver)) })),
			}
		})
	for _, side := range []struct {
		dls       map[string]kafka.Message
		originals map[string][]byte
	}{{rd, replyValues}, {cd, cmdValues}} {
		dls, originals := side.dls, side.originals
		for k, m := range dls {
			if s, _ := headerOf(m, inbox.HeaderDLQShortened); s != "true" {
				t.Errorf("dead letter %q of a %d-byte value: %s is %q, want true", k, len(originals[k]), inbox.HeaderDLQShortened, s)
			}
			if want := originals[k][:inbox.DeadLetterValueBytesDefault]; !bytes.Equal(m.Value, want) {
				t.Errorf("dead letter %q keeps %d bytes of the value, want its first %d: got %.80q want %.80q", k, len(m.Value), len(want), m.Value, want)
			}
		}
	}
}

// alterMaxMessageBytes sets topic's max.message.bytes on the broker.
func (e *env) alterMaxMessageBytes(topic string, n int) {
	e.t.Helper()
	cl := &kafka.Client{Addr: kafka.TCP(e.brokers...), Timeout: 10 * time.Second}
	res, err := cl.AlterConfigs(testkit.Context(e.t, 30*time.Second), &kafka.AlterConfigsRequest{Resources: []kafka.AlterConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: topic,
		Configs: []kafka.AlterConfigRequestConfig{{Name: "max.message.bytes", Value: strconv.Itoa(n)}},
	}}})
	if err != nil {
		e.t.Fatalf("alter %s: %v", topic, err)
	}
	for r, err := range res.Errors {
		if err != nil {
			e.t.Fatalf("alter %s (%v): %v", topic, r, err)
		}
	}
}

// A dead letter the broker refuses: both dead-letter topics take at most
// 4 KB per record batch (max.message.bytes), and the bad records carry 30 KB
// of payload, so the full dead letters are refused and the shortened ones
// (first KB of the value, headers cut, dlq-shortened: true) are taken; the
// partitions move on.
func TestPoisonDeadLetterRefusedByBroker(t *testing.T) {
	t.Parallel()
	const limit = 4 << 10
	pad := `{"order_id":"order-poison","sku":"sku-apple","qty":1,"pad":"` + strings.Repeat("p", 30<<10) + `"}`
	var e *env
	_, rd, cd := poisonRun(t, 178,
		func(*env) []poison {
			return []poison{replyPoison("NUL in reason, 30 KB payload", []string{`"reason"`, "NUL"}, func(f fields) fields {
				return f.set("reason", q(`declined\u0000x`)).set("payload", pad)
			})}
		},
		func(e *env) []poison {
			return []poison{commandPoison(e.replies, "NUL in aggregate_id, 30 KB payload", []string{`"aggregate_id"`, "NUL"}, func(f fields) fields {
				return f.set("aggregate_id", q(`order\u0000x`)).set("payload", pad)
			})}
		},
		func(env *env) {
			e = env
			env.alterMaxMessageBytes(env.replies+inbox.DLQSuffixDefault, limit)
			env.alterMaxMessageBytes(env.prefix+orderapi.Inventory+".commands"+inbox.DLQSuffixDefault, limit)
		})
	for _, dls := range []map[string]kafka.Message{rd, cd} {
		for k, m := range dls {
			if s, _ := headerOf(m, inbox.HeaderDLQShortened); s != "true" {
				t.Errorf("dead letter %q: %s is %q, want true (the full one is over the topic's %d bytes)", k, inbox.HeaderDLQShortened, s, limit)
			}
			if len(m.Value) != inbox.DeadLetterValueBytesDefault {
				t.Errorf("dead letter %q keeps %d bytes of the value, want %d", k, len(m.Value), inbox.DeadLetterValueBytesDefault)
			}
			for _, h := range []string{message.HeaderDLQOffset, inbox.HeaderDLQPartition, message.HeaderDLQTopic} {
				if _, ok := headerOf(m, h); !ok {
					t.Errorf("shortened dead letter %q has no %s header", k, h)
				}
			}
		}
	}
	if got, want := e.metric("sagaflow_dlq_shortened_total"), float64(len(rd)+len(cd)); got < want {
		t.Errorf("sagaflow_dlq_shortened_total is %v, want at least %v", got, want)
	}
	if lost := e.metric("sagaflow_dlq_lost_total"); lost != 0 {
		t.Errorf("sagaflow_dlq_lost_total is %v, want 0: the shortened dead letters fit", lost)
	}
}

// probeData is the data of the probe saga of TestPoisonPostgresRefusal.
type probeData struct {
	Label string `json:"label"`
}

const (
	probeType        = "poison-probe"
	probeStep        = "stamp"
	probeParticipant = "probe"
	// noteStep is the step the test adds to the shipping participant.
	noteStep = "note"
)

// probeDefinition is a one-step saga whose step output carries a
// percent-encoded label (label_pct) that OnSuccess decodes into the saga
// data: "a%00b" is plain ASCII to the message decoder, and a NUL in the
// data once decoded, which json.Marshal writes as \u0000 and jsonb refuses
// (SQLSTATE 22P05) when the reply's transition is written.
func probeDefinition() saga.Definition[probeData] {
	return saga.Definition[probeData]{Name: probeType, Version: 1, Steps: []saga.Step[probeData]{{
		Name: probeStep, Participant: probeParticipant, Kind: saga.Pivot, Timeout: time.Minute,
		Command: func(d probeData) (any, error) { return map[string]string{"label": d.Label}, nil },
		OnSuccess: func(d *probeData, out json.RawMessage) error {
			var r struct {
				Label string `json:"label_pct"`
			}
			if err := json.Unmarshal(out, &r); err != nil {
				return err
			}
			s, err := url.PathUnescape(r.Label)
			if err != nil {
				return err
			}
			d.Label = s
			return nil
		},
	}}}
}

// Content Postgres refuses although decode accepted it. The message
// decoder refuses everything in a reply or a command that Postgres text or
// jsonb would (NUL, invalid UTF-8, lone surrogates, numbers outside
// numeric, over-long fields), and the reference steps only copy decoded
// strings and numbers, so no reply of the reference saga gets a statement
// refused. What remains is a handler's own transformation of what it was
// given:
//
//   - reply side: a probe saga type (probeDefinition) whose OnSuccess
//     percent-decodes its step's output into the saga data. The test acts
//     as the probe participant: it answers six in-flight probe commands in
//     one batch on one partition, two with "a%00b"; the saga update of
//     those two is refused by Postgres (SQLSTATE 22P05), the inbox splits
//     the batch, dead-letters the two with the error and applies the four;
//     proper answers then complete the two.
//   - command side: the shipping participant gets a step of its own whose
//     handler percent-decodes a note and inserts it into a text column;
//     "a%00b" is refused (SQLSTATE 22021) and dead-lettered, the good notes
//     around it (same partitions) are inserted, and the shipping consumer
//     goes on serving the workload's create-shipment commands.
func TestPoisonPostgresRefusal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: poisonOrders, seed: 179, override: func(r *saga.Registry) error {
		d, err := probeDefinition().Build()
		if err != nil {
			return err
		}
		return r.Register(d)
	}})
	ctx := testkit.Context(t, 2*time.Minute)
	notes := pgx.Identifier{e.schemas.Shipping, "poison_notes"}.Sanitize()
	if _, err := e.check.Exec(ctx, `CREATE TABLE `+notes+` (saga_id uuid PRIMARY KEY, note text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	noteReplies := e.prefix + "notes.replies"
	if err := kafkaclient.EnsureTopics(ctx, e.brokers, 1, 1, noteReplies); err != nil {
		t.Fatal(err)
	}
	e.extraReplies = []string{noteReplies}
	set := e.participants()
	for _, p := range set.Participants() {
		if p.Name() != orderapi.Shipping {
			continue
		}
		err := p.Handle(noteStep, participants.One(func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
			in, err := participants.Decode[struct {
				Note string `json:"note_pct"`
			}](cmd)
			if err != nil {
				return participants.Result{}, err
			}
			note, err := url.PathUnescape(in.Note)
			if err != nil {
				return participants.Result{}, participants.InvalidField(cmd, "note_pct", err.Error())
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+notes+` (saga_id, note) VALUES ($1, $2)`, cmd.SagaID, note); err != nil {
				return participants.Result{}, err
			}
			return participants.Success(nil), nil
		}), nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	e.run("orchestrator", e.service(orchestrator.DefaultRun).Run)
	e.runParticipants(set)

	// Command side: notes on every partition, a bad one between good ones,
	// before the workload and again while it runs.
	shipTopic := e.prefix + orderapi.Shipping + ".commands"
	badNotes := 0
	goodNotes := map[uuid.UUID]string{}
	noteRecord := func(key, pct string) kafka.Message {
		c := message.Command{MessageID: uuid.New(), SagaID: uuid.New(), SagaType: probeType, AggregateID: "note", Step: noteStep,
			Action: message.Forward, Attempt: 1, ReplyTo: noteReplies, SentAt: time.Now(), Payload: json.RawMessage(`{"note_pct":"` + pct + `"}`)}
		b, err := message.EncodeCommand(c)
		if err != nil {
			t.Fatalf("a note command must pass the message checks: %v", err)
		}
		if pct == "a%00b" {
			badNotes++
		} else {
			goodNotes[c.SagaID], _ = url.PathUnescape(pct)
		}
		return record(key, b, stdHeaders(c.MessageID, c.SagaID))
	}
	// One key per partition: a bad note between two good ones, in order on
	// the partition. (The dead letters are told from the good notes by
	// their payload.)
	notesWave := func(wave int) []kafka.Message {
		var ms []kafka.Message
		for part := range poisonPartitions {
			k := keyOn(fmt.Sprintf("note-%d-p%d", wave, part), part)
			ms = append(ms, noteRecord(k, "hello%20world"), noteRecord(k, "a%00b"), noteRecord(k, "caf%C3%A9"))
		}
		return ms
	}
	e.produce(shipTopic, notesWave(0)...)
	e.startAll(ctx)
	e.produce(shipTopic, notesWave(1)...)

	// Reply side: six probe sagas, answered by the test in one batch.
	var probes []uuid.UUID
	for i := range 6 {
		in, _, err := e.engine.Start(ctx, orchestrator.StartRequest{Type: probeType, IdempotencyKey: fmt.Sprintf("probe-%d", i), AggregateID: fmt.Sprintf("probe-%d", i), Data: probeData{Label: "start"}})
		if err != nil {
			t.Fatal(err)
		}
		probes = append(probes, in.ID)
	}
	probeTopic := e.prefix + probeParticipant + ".commands"
	awaited := map[uuid.UUID]uuid.UUID{}
	testkit.Eventually(t, settle, "the probe commands published", func() (bool, error) {
		for _, s := range e.sentOn(probeTopic) {
			awaited[s.cmd.SagaID] = s.cmd.MessageID
		}
		var n int
		err := e.check.QueryRow(ctx, `SELECT count(*) FROM `+e.schemas.Orchestrator+`.outbox WHERE topic = $1 AND sent_at IS NOT NULL`, probeTopic).Scan(&n)
		return n == len(probes) && len(awaited) == len(probes), err
	})
	answer := func(id uuid.UUID, pct string) kafka.Message {
		in, _, err := e.engine.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if awaited[id] != in.CommandID(probeStep, message.Forward, 1) {
			t.Fatalf("probe %s awaits %s, not the first command's id", id, awaited[id])
		}
		m := replyRecord(t, message.Reply{MessageID: uuid.New(), InReplyTo: awaited[id], SagaID: id, Step: probeStep,
			Action: message.Forward, Outcome: message.Success, Payload: json.RawMessage(`{"label_pct":"` + pct + `"}`)})
		m.Key = []byte("probe") // one partition, one batch
		return m
	}
	poisoned := map[uuid.UUID]bool{probes[1]: true, probes[4]: true}
	var batch []kafka.Message
	badReplies := map[string]bool{}
	for _, id := range probes {
		pct := "ok%21"
		if poisoned[id] {
			pct = "a%00b"
		}
		m := answer(id, pct)
		if poisoned[id] {
			mid, _ := headerOf(m, message.HeaderMessageID)
			badReplies[mid] = true
		}
		batch = append(batch, m)
	}
	splits := e.metric("sagaflow_inbox_batch_splits_total")
	e.produce(e.replies, batch...)
	dls := e.deadLetters(e.replies+inbox.DLQSuffixDefault, len(badReplies))
	for _, m := range dls {
		mid, _ := headerOf(m, message.HeaderMessageID)
		reason, _ := headerOf(m, message.HeaderDLQReason)
		if !badReplies[mid] {
			t.Errorf("unexpected reply dead letter %s: %q", mid, reason)
			continue
		}
		delete(badReplies, mid)
		if !strings.Contains(reason, "SQLSTATE 22P05") {
			t.Errorf("reply dead letter %s: reason %q does not name Postgres' refusal (SQLSTATE 22P05)", mid, reason)
		}
		t.Logf("reply consumer: probe answer with a%%00b -> %q", reason)
	}
	if len(badReplies) != 0 {
		t.Fatalf("probe answers not dead-lettered: %v", badReplies)
	}
	testkit.Eventually(t, settle, "the four good probe answers applied", func() (bool, error) {
		n := e.count(`SELECT count(*) FROM `+e.schemas.Orchestrator+`.sagas WHERE type = $1 AND state = 'completed' AND data->>'label' = 'ok!'`, probeType)
		return n == len(probes)-len(poisoned), nil
	})
	t.Logf("reply consumer: batch splits during the probe batch: %v", e.metric("sagaflow_inbox_batch_splits_total")-splits)
	for id := range poisoned {
		in, _, err := e.engine.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if in.State != saga.Running || stepOf(in, probeStep).State != saga.StepRunning {
			t.Fatalf("probe %s whose answer was refused is %s (step %s), want running and still awaiting", id, in.State, stepOf(in, probeStep).State)
		}
	}
	var fixed []kafka.Message
	for id := range poisoned {
		fixed = append(fixed, answer(id, "fixed"))
	}
	e.produce(e.replies, fixed...)
	testkit.Eventually(t, settle, "every probe saga completed", func() (bool, error) {
		return e.count(`SELECT count(*) FROM `+e.schemas.Orchestrator+`.sagas WHERE type = $1 AND state = 'completed'`, probeType) == len(probes), nil
	})

	e.waitTerminal(poisonSettle)
	// The probe sagas are not orders of the plan: workload.Check counts
	// every saga, so they leave before the invariants are checked.
	if _, err := e.check.Exec(ctx, `DELETE FROM `+e.schemas.Orchestrator+`.journal WHERE saga_id IN (SELECT id FROM `+e.schemas.Orchestrator+`.sagas WHERE type = $1)`, probeType); err != nil {
		t.Fatal(err)
	}
	if _, err := e.check.Exec(ctx, `DELETE FROM `+e.schemas.Orchestrator+`.sagas WHERE type = $1`, probeType); err != nil {
		t.Fatal(err)
	}
	e.checkInvariants(false)

	// Command side results.
	cmdDLs := e.deadLetters(shipTopic+inbox.DLQSuffixDefault, badNotes)
	if len(cmdDLs) != badNotes {
		t.Errorf("%d dead letters on the shipping command topic, want %d", len(cmdDLs), badNotes)
	}
	for _, m := range cmdDLs {
		reason, _ := headerOf(m, message.HeaderDLQReason)
		if !strings.Contains(reason, "SQLSTATE 22021") {
			t.Errorf("command dead letter: reason %q does not name Postgres' refusal (SQLSTATE 22021)", reason)
		}
		c, err := message.DecodeCommand(m.Value)
		if err != nil || !strings.Contains(string(c.Payload), "a%00b") {
			t.Errorf("command dead letter is not a bad note: %v %s", err, m.Value)
		}
	}
	if len(cmdDLs) > 0 {
		r, _ := headerOf(cmdDLs[0], message.HeaderDLQReason)
		t.Logf("command consumer: note a%%00b -> %q", r)
	}
	rows, err := e.check.Query(ctx, `SELECT saga_id, note FROM `+notes)
	if err != nil {
		t.Fatal(err)
	}
	inserted := map[uuid.UUID]string{}
	for rows.Next() {
		var id uuid.UUID
		var note string
		if err := rows.Scan(&id, &note); err != nil {
			t.Fatal(err)
		}
		inserted[id] = note
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(inserted) != len(goodNotes) {
		t.Errorf("%d notes inserted, want the %d good ones", len(inserted), len(goodNotes))
	}
	for id, want := range goodNotes {
		if got, ok := inserted[id]; !ok || got != want {
			t.Errorf("note of %s is %q (inserted: %v), want %q", id, got, ok, want)
		}
	}
}

// A thousand bad records on one key (one partition) of the reply topic and
// of the inventory command topic, produced while the workload's sagas
// start: the sagas finish in bounded time (their replies and commands on
// the other partitions are not held up behind the bad ones, and the bad
// partition's own catch up), and all 1,000 of each end on the dead-letter
// topic, each with a reason.
func TestPoisonThousandBadRecordsOnOneKey(t *testing.T) {
	t.Parallel()
	const n = 1000
	e := newEnv(t, envOpts{orders: 16, seed: 180})
	ctx := testkit.Context(t, 2*time.Minute)
	e.runAll()
	cmdTopic := e.prefix + orderapi.Inventory + ".commands"
	replyKinds := []poison{
		replyPoison("NUL in reason", []string{"NUL"}, func(f fields) fields { return f.set("reason", q(`x\u0000`)) }),
		replyPoison("0xff in step", []string{"UTF-8"}, func(f fields) fields { return f.set("step", q("s\xff")) }),
		replyPoison("NUL in payload", []string{"NUL"}, func(f fields) fields { return f.set("payload", `{"a":"\u0000"}`) }),
		replyPoison("reason over 1 KB", []string{`"reason"`, "longer"}, func(f fields) fields { return f.set("reason", q(strings.Repeat("r", 2<<10))) }),
		headerPoison("NUL in saga-id header", []string{`"saga-id"`, "NUL"}, goodReply, func(_, s uuid.UUID, hs map[string]*string) {
			hs[message.HeaderSagaID] = ptr(s.String() + "\x00")
		}),
		replyPoison("unknown saga", []string{"unknown saga"}, func(f fields) fields { return f }),
	}
	cmdKinds := []poison{
		commandPoison(e.replies, "NUL in aggregate_id", []string{"NUL"}, func(f fields) fields { return f.set("aggregate_id", q(`x\u0000`)) }),
		commandPoison(e.replies, "0xff in step", []string{"UTF-8"}, func(f fields) fields { return f.set("step", q("s\xff")) }),
		commandPoison(e.replies, "NUL in payload", []string{"NUL"}, func(f fields) fields { return f.set("payload", `{"a":"\u0000"}`) }),
		commandPoison(e.replies, "bad reply_to", []string{`"reply_to"`}, func(f fields) fields { return f.set("reply_to", q("no/such topic")) }),
		headerPoison("NUL in saga-id header", []string{`"saga-id"`, "NUL"}, goodCommand(e.replies), func(_, s uuid.UUID, hs map[string]*string) {
			hs[message.HeaderSagaID] = ptr(s.String() + "\x00")
		}),
		commandPoison(e.replies, "unknown step", []string{"unknown step"}, func(f fields) fields { return f.set("step", q("no-such-step")) }),
	}
	build := func(kinds []poison) ([]kafka.Message, map[string]poison) {
		ms := make([]kafka.Message, n)
		byID := map[string]poison{}
		for i := range ms {
			p := kinds[i%len(kinds)]
			ms[i] = p.record("one-bad-key")
			id, _ := headerOf(ms[i], message.HeaderMessageID)
			byID[id] = p
		}
		return ms, byID
	}
	rs, replyIDs := build(replyKinds)
	cs, cmdIDs := build(cmdKinds)

	start := time.Now()
	started := make(chan error, 1)
	go func() {
		_, err := workload.StartAll(ctx, e.engine, e.plan, 4)
		started <- err
	}()
	e.produce(e.replies, rs...)
	e.produce(cmdTopic, cs...)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	// Both conditions are polled together, and what the other one was when
	// each became true is kept: the bad records are dead-lettered fast, so
	// how much the two overlap is logged, not asserted.
	var terminalAt, dlqAt time.Duration
	var dlqAtTerminal int64
	var terminalAtDLQ int
	testkit.Eventually(t, poisonSettle, "every saga terminal and 2x1,000 dead letters", func() (bool, error) {
		terminal := e.terminal()
		r, err := e.records(e.replies + inbox.DLQSuffixDefault)
		if err != nil {
			return false, err
		}
		c, err := e.records(cmdTopic + inbox.DLQSuffixDefault)
		if err != nil {
			return false, err
		}
		if terminalAt == 0 && terminal == len(e.plan.Orders) {
			terminalAt, dlqAtTerminal = time.Since(start), r+c
		}
		if dlqAt == 0 && r >= n && c >= n {
			dlqAt, terminalAtDLQ = time.Since(start), terminal
		}
		return terminalAt > 0 && dlqAt > 0, nil
	})
	t.Logf("all %d sagas terminal after %s (%d of the 2x%d dead letters published then); all dead letters published after %s (%d sagas terminal then)",
		len(e.plan.Orders), terminalAt.Round(time.Millisecond), dlqAtTerminal, n, dlqAt.Round(time.Millisecond), terminalAtDLQ)
	e.checkInvariants(false)
	for _, side := range []struct {
		name, topic string
		ids         map[string]poison
	}{{"reply consumer", e.replies, replyIDs}, {"command consumer", cmdTopic, cmdIDs}} {
		seen := map[string]bool{}
		for _, m := range e.readAll(side.topic+inbox.DLQSuffixDefault, n) {
			id, _ := headerOf(m, message.HeaderMessageID)
			p, ok := side.ids[id]
			if !ok {
				t.Errorf("%s: unexpected dead letter %s", side.name, id)
				continue
			}
			seen[id] = true
			reason, _ := headerOf(m, message.HeaderDLQReason)
			for _, w := range p.want {
				if !strings.Contains(reason, w) {
					t.Errorf("%s: %s: reason %q does not say %q", side.name, p.what, reason, w)
				}
			}
		}
		if len(seen) != n {
			t.Errorf("%s: %d of the %d bad records are on the dead-letter topic", side.name, len(seen), n)
		}
	}
}

// mustShowPlan is the seeded plan of the must-show test with only
// outcomes that do not depend on timing: no contested coupon, and the
// scarce item has no stock at all (so each of its orders is compensated
// whatever the order of arrival); declines are over the payment limit.
func mustShowPlan(n int, seed int64) workload.Plan {
	p := workload.NewPlan(workload.Mix{Orders: n, Seed: seed, OutOfStockRate: 0.15, CouponTakenRate: 0, DeclineRate: 0.2})
	for sku := range p.Stock {
		if strings.Contains(sku, "scarce") {
			p.Stock[sku] = 0
		}
	}
	return p
}

// mustShowRun runs the must-show workload (clean, or with the two bad
// replies) and returns the terminal state per order id.
func mustShowRun(t *testing.T, n int, seed int64, poisoned bool) map[string]string {
	// Reserve-inventory gets a long timeout in both runs: the poisoned run
	// holds the inventory participant back until the bad replies are
	// dead-lettered, and no timeout may decide an outcome meanwhile.
	e := newEnv(t, envOpts{orders: n, seed: seed, override: func(r *saga.Registry) error {
		return r.Override(orderapi.SagaType, orderapi.StepReserveInventory, saga.StepOverride{Timeout: 90 * time.Second})
	}})
	ctx := testkit.Context(t, 3*time.Minute)
	e.plan = mustShowPlan(n, seed)
	if err := workload.Seed(ctx, e.check, e.schemas, e.plan); err != nil {
		t.Fatal(err)
	}
	if !poisoned {
		e.runAll()
		e.startAll(ctx)
	} else {
		e.run("orchestrator", e.service(orchestrator.DefaultRun).Run)
		set := e.participants()
		e.runParticipants(set, orderapi.Inventory)
		ids := e.startAll(ctx)
		// Two orders that complete (a plain item, within the limit): a
		// failure applied to either would compensate it instead.
		var targets []int
		for i, o := range e.plan.Orders {
			if e.plan.Stock[o.SKU] > 0 && o.AmountCents <= workload.LimitCentsDefault && len(targets) < 2 {
				targets = append(targets, i)
			}
		}
		if len(targets) != 2 {
			t.Fatalf("the plan has %d orders that complete, want at least 2", len(targets))
		}
		a, b := ids[targets[0]], ids[targets[1]]
		invTopic := e.prefix + orderapi.Inventory + ".commands"
		first := map[uuid.UUID]uuid.UUID{}
		for _, id := range []uuid.UUID{a, b} {
			in, _, err := e.engine.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			first[id] = in.CommandID(orderapi.StepReserveInventory, message.Forward, 1)
		}
		testkit.Eventually(t, settle, "the first commands of the two sagas published", func() (bool, error) {
			var n int
			err := e.check.QueryRow(ctx, `SELECT count(*) FROM `+e.schemas.Orchestrator+`.outbox WHERE topic = $1 AND sent_at IS NOT NULL
				AND headers->>'message-id' IN ($2, $3)`, invTopic, first[a].String(), first[b].String()).Scan(&n)
			return n == 2, err
		})
		// A: a failure whose reason carries an escaped NUL (valid JSON).
		nulID := uuid.New()
		nul := record(a.String(), replyFields(nulID, a, first[a]).set("reason", q(`declined\u0000x`)).bytes(), stdHeaders(nulID, a))
		// B: a well-formed failure whose saga-id header is 700 KB that is
		// not B's id.
		hdr := replyRecord(t, message.Reply{MessageID: uuid.New(), InReplyTo: first[b], SagaID: b, Step: orderapi.StepReserveInventory,
			Action: message.Forward, Outcome: message.Failure, Reason: "declined"})
		for i, h := range hdr.Headers {
			if h.Key == message.HeaderSagaID {
				hdr.Headers[i].Value = []byte(bigText(700 << 10))
			}
		}
		e.produceLarge(e.replies, nul, hdr)
		dls := e.deadLetters(e.replies+inbox.DLQSuffixDefault, 2)
		want := map[string][]string{a.String(): {`"reason"`, "NUL"}, b.String(): {`"saga-id"`, "bytes"}}
		for _, m := range dls {
			reason, _ := headerOf(m, message.HeaderDLQReason)
			w, ok := want[string(m.Key)]
			if !ok {
				t.Errorf("unexpected dead letter key %q: %q", m.Key, reason)
				continue
			}
			delete(want, string(m.Key))
			for _, s := range w {
				if !strings.Contains(reason, s) {
					t.Errorf("dead letter of saga %s: reason %q does not say %q", m.Key, reason, s)
				}
			}
			t.Logf("dead letter of saga %s: %q", m.Key, reason)
		}
		if len(want) != 0 {
			t.Fatalf("bad replies not dead-lettered: %v", want)
		}
		for _, id := range []uuid.UUID{a, b} {
			in, _, err := e.engine.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if st := stepOf(in, orderapi.StepReserveInventory); in.State != saga.Running || st.State != saga.StepRunning || st.AwaitID != first[id] {
				t.Fatalf("saga %s after its bad reply: %s, reserve-inventory %s awaiting %s; want running, awaiting %s", id, in.State, st.State, st.AwaitID, first[id])
			}
		}
		for _, p := range set.Participants() {
			if p.Name() == orderapi.Inventory {
				e.run("participant "+p.Name(), p.Run)
			}
		}
	}
	e.waitTerminal(settle)
	e.checkInvariants(false)
	if poisoned {
		if n, err := e.records(e.replies + inbox.DLQSuffixDefault); err != nil || n != 2 {
			t.Errorf("reply dead-letter topic has %d records (%v), want the 2 bad replies only", n, err)
		}
	}
	rows, err := e.check.Query(ctx, `SELECT aggregate_id, state FROM `+e.schemas.Orchestrator+`.sagas`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var id, st string
		if err := rows.Scan(&id, &st); err != nil {
			t.Fatal(err)
		}
		out[id] = st
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Must show: the seeded workload runs twice, clean and with a participant
// (the test acting as the inventory participant) answering the first
// command of two in-flight sagas with a reply whose reason carries \u0000
// and with a reply whose saga-id header is 700 KB and not the saga's id,
// before the real inventory participant answers. Both bad replies are
// dead-lettered with a reason and change nothing; every saga, those two
// included (the real reply arrives; no timeout fires, see mustShowRun),
// ends exactly as in the clean run.
func TestMustShowNULReasonAnd700KBHeaderAreDeadLetteredAndOtherSagasEndAsWithout(t *testing.T) {
	t.Parallel()
	const n, seed = 16, 181
	var clean, poisoned map[string]string
	// One after the other, in this test's slot: parallel subtests would
	// wait for slots of their own behind the other parallel tests.
	if !t.Run("clean", func(t *testing.T) { clean = mustShowRun(t, n, seed, false) }) ||
		!t.Run("poisoned", func(t *testing.T) { poisoned = mustShowRun(t, n, seed, true) }) {
		return
	}
	if len(clean) != n || len(poisoned) != n {
		t.Fatalf("%d sagas clean, %d poisoned, want %d each", len(clean), len(poisoned), n)
	}
	byState := map[string]int{}
	for id, st := range clean {
		byState[st]++
		if poisoned[id] != st {
			t.Errorf("order %s: %s in the clean run, %s with the bad replies", id, st, poisoned[id])
		}
	}
	if byState["completed"] == 0 || byState["compensated"] == 0 {
		t.Fatalf("the plan should end both ways: %v", byState)
	}
	t.Logf("both runs: %v", byState)
}

// The bodies of the poison tests are well-formed messages but for the
// poison: without it they decode; with it the decoder refuses them naming
// the field and the problem.
func TestPoisonBodiesDifferOnlyByThePoison(t *testing.T) {
	t.Parallel()
	id, sagaID := uuid.New(), uuid.New()
	if _, err := message.DecodeReply(replyFields(id, sagaID, uuid.New()).bytes()); err != nil {
		t.Fatalf("the clean reply does not decode: %v", err)
	}
	if _, err := message.DecodeCommand(commandFields("f.saga.replies", id, sagaID).bytes()); err != nil {
		t.Fatalf("the clean command does not decode: %v", err)
	}
	for _, c := range []struct {
		name, raw string
		want      []string
	}{
		{"reason", q(`declined\u0000x`), []string{`"reason"`, "NUL"}},
		{"reason", q("declined\xffx"), []string{`"reason"`, "UTF-8"}},
		{"step", q(`s\u0000`), []string{`"step"`, "NUL"}},
		{"payload", `{"note":"a\u0000b"}`, []string{`"payload"`, "NUL"}},
	} {
		_, err := message.DecodeReply(replyFields(id, sagaID, uuid.New()).set(c.name, c.raw).bytes())
		if err == nil {
			t.Errorf("reply with %s %s decoded", c.name, c.raw)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("reply with %s %q: %v does not say %q", c.name, c.raw, err, w)
			}
		}
	}
}
