package conformance

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/message"
)

// poisonKind makes a poison record for key from a well-formed command
// record of a new saga (mode succeed: executed, it would leave an effect).
type poisonKind func(r *run, cmd message.Command, m kafka.Message) (kafka.Message, error)

// nulMarker is replaced by a NUL escape (or a byte that is not UTF-8) in
// the encoded payload.
const nulMarker = "nul-marker-0000"

func poisonUndecodable(_ *run, cmd message.Command, m kafka.Message) (kafka.Message, error) {
	m.Value = fmt.Appendf(nil, `{"message_id":"%s","saga_id":"%s","step":"%s","action":`, cmd.MessageID, cmd.SagaID, StepName)
	return m, nil
}

func poisonHeaderMismatch(_ *run, cmd message.Command, m kafka.Message) (kafka.Message, error) {
	m.Headers = wireHeaders(cmd.MessageID, uuid.New()) // saga-id names another saga
	return m, nil
}

func poisonNoMessageID(_ *run, _ message.Command, m kafka.Message) (kafka.Message, error) {
	m.Headers = slices.DeleteFunc(slices.Clone(m.Headers), func(h kafka.Header) bool { return h.Key == message.HeaderMessageID })
	return m, nil
}

func poisonUnknownStep(r *run, cmd message.Command, _ kafka.Message) (kafka.Message, error) {
	cmd.Step = "no-such-step"
	return r.commandRecord(cmd)
}

func poisonNUL(r *run, cmd message.Command, _ kafka.Message) (kafka.Message, error) {
	cmd.Payload = mustJSON(Input{Key: nulMarker, Mode: ModeSucceed})
	m, err := r.commandRecord(cmd)
	if err != nil {
		return m, err
	}
	m.Value = bytes.Replace(m.Value, []byte(nulMarker), []byte(`bad\u0000key`), 1)
	return m, nil
}

func poisonUTF8(r *run, cmd message.Command, _ kafka.Message) (kafka.Message, error) {
	cmd.Payload = mustJSON(Input{Key: nulMarker, Mode: ModeSucceed})
	m, err := r.commandRecord(cmd)
	if err != nil {
		return m, err
	}
	m.Value = bytes.Replace(m.Value, []byte(nulMarker), []byte("bad\xffkey"), 1)
	return m, nil
}

func poisonReplyTo(r *run, cmd message.Command, _ kafka.Message) (kafka.Message, error) {
	cmd.ReplyTo = r.elsewhere
	return r.commandRecord(cmd)
}

// poison produces a poison record keyed K, then a good forward keyed K (so
// on the same partition, behind it): the good one must be answered (the
// partition moves on), the poison record must be on the dead-letter topic
// with its key, value and a dlq-reason header, and never answered or
// executed.
func (r *run) poison(kind poisonKind) func(context.Context) error { return r.poisonSigned(kind, true) }

// poisonSigned is poison; with resign the poison record is signed as sent
// (refused for its defect, not its signature), else kind's signature
// headers are left as they are.
func (r *run) poisonSigned(kind poisonKind, resign bool) func(context.Context) error {
	return func(ctx context.Context) error {
		key := newKey("poison")
		bad := r.newCommand(uuid.New(), key, message.Forward, 1, Input{Key: key, Mode: ModeSucceed})
		good, err := r.commandRecord(bad)
		if err != nil {
			return err
		}
		m, err := kind(r, bad, good)
		if err != nil {
			return fmt.Errorf("build the poison record: %w", err)
		}
		if resign {
			r.sign(&m, r.signer)
		}
		if err := r.produce(ctx, sent{cmd: bad, msg: m}); err != nil {
			return err
		}
		if err := r.probe(ctx, key, 1); err != nil {
			return fmt.Errorf("the good command behind the poison record on its partition: %w", err)
		}
		dl, err := r.col.wait(ctx, r.cfg.Timeout, r.dlqTopic, func(rec record) bool { return string(rec.key) == key })
		if err != nil {
			return fmt.Errorf("no record keyed %q on %s: %w", key, r.dlqTopic, err)
		}
		var problems []string
		if reason, _ := dl.header(message.HeaderDLQReason); strings.TrimSpace(reason) == "" {
			problems = append(problems, "no "+message.HeaderDLQReason+" header")
		}
		if !bytes.Equal(dl.value, m.Value) {
			problems = append(problems, fmt.Sprintf("value %.120q is not the original %.120q", dl.value, m.Value))
		}
		want, had := headerOf(m.Headers, message.HeaderMessageID)
		if got, _ := dl.header(message.HeaderMessageID); had && got != want {
			problems = append(problems, fmt.Sprintf("header %s %q, want the original's %s", message.HeaderMessageID, got, want))
		}
		if n := r.repliesTo(bad.MessageID); n > 0 {
			problems = append(problems, fmt.Sprintf("answered %d times on %s (want: not at all)", n, r.replyTopic))
		}
		if len(problems) > 0 {
			slices.Sort(problems)
			return fmt.Errorf("dead letter on %s: %s", r.dlqTopic, strings.Join(problems, "; "))
		}
		return nil
	}
}

func headerOf(hs []kafka.Header, key string) (string, bool) {
	return record{headers: hs}.header(key)
}
