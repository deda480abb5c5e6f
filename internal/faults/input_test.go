package faults_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// record builds a record with the standard headers (message-id, saga-id,
// content-type) unless hdr overrides them; a nil value in hdr drops one.
func record(key string, value []byte, hdr map[string]*string) kafka.Message {
	m := kafka.Message{Key: []byte(key), Value: value}
	for k, v := range hdr {
		if v != nil {
			m.Headers = append(m.Headers, kafka.Header{Key: k, Value: []byte(*v)})
		}
	}
	return m
}

func ptr(s string) *string { return &s }

func stdHeaders(msgID, sagaID uuid.UUID) map[string]*string {
	return map[string]*string{
		message.HeaderMessageID:   ptr(msgID.String()),
		message.HeaderSagaID:      ptr(sagaID.String()),
		message.HeaderContentType: ptr("application/json"),
	}
}

func replyRecord(t *testing.T, r message.Reply) kafka.Message {
	t.Helper()
	b, err := message.EncodeReply(r)
	if err != nil {
		t.Fatal(err)
	}
	return record(r.SagaID.String(), b, stdHeaders(r.MessageID, r.SagaID))
}

// dlqReasons reads the dead-letter topic until want records are there and
// returns their reasons.
func (e *env) dlqReasons(topic string, want int) []string {
	e.t.Helper()
	var got []kafka.Message
	testkit.Eventually(e.t, settle, fmt.Sprintf("%d records on %s", want, topic), func() (bool, error) {
		n, err := e.records(topic)
		return n >= int64(want), err
	})
	got = e.readAll(topic, want)
	var reasons []string
	for _, m := range got {
		reason := ""
		for _, h := range m.Headers {
			if h.Key == message.HeaderDLQReason {
				reason = string(h.Value)
			}
		}
		if reason == "" {
			e.t.Fatalf("dead letter at offset %d has no %s header", m.Offset, message.HeaderDLQReason)
		}
		reasons = append(reasons, reason)
	}
	return reasons
}

// Row: malformed message. Bad records on the reply topic and on a
// participant's command topic each land on "<topic>.dlq" with a reason,
// are counted, and the partitions move on: the sagas started after them
// all finish.
func TestWindowMalformedMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: 8, seed: 21})
	ctx := testkit.Context(t, 2*time.Minute)
	e.runAll()
	// One finished saga to aim stray replies at.
	o := e.plan.Orders[0]
	first, _, err := e.engine.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: o.OrderID, AggregateID: o.OrderID, Data: o})
	if err != nil {
		t.Fatal(err)
	}
	e.waitTerminal(settle)

	good := func() message.Reply {
		return message.Reply{MessageID: uuid.New(), InReplyTo: uuid.New(), SagaID: first.ID, Step: orderapi.StepReserveInventory,
			Action: message.Forward, Outcome: message.Success}
	}
	var bad []kafka.Message
	for _, key := range []string{"a", "b", "c", "d"} { // spread over partitions
		// Each record has its own message id: the inbox drops a second
		// record under an id it has seen, even one it dead-lettered.
		id := uuid.New
		bad = append(bad,
			record(key, []byte(`{"message_id":`), stdHeaders(id(), first.ID)),                                               // malformed JSON
			record(key, []byte(`{"message_id":"`+uuid.NewString()+`"}`), stdHeaders(id(), first.ID)),                        // missing fields
			record(key, []byte(`{"message_id":"`+uuid.NewString()+`","saga_id":42,"step":[]}`), stdHeaders(id(), first.ID)), // wrong types
			record(key, []byte(`[1,2,3]`), stdHeaders(id(), first.ID)),                                                      // not an object
			record(key, []byte(`{}`), map[string]*string{message.HeaderContentType: ptr("application/json")}),               // no message-id header
			record(key, []byte(`{}`), map[string]*string{message.HeaderMessageID: ptr("not-a-uuid")}),                       // bad message-id header
			record(key, []byte(`{"pad":"`+strings.Repeat("x", 200<<10)+`"}`), stdHeaders(uuid.New(), first.ID)),             // large and invalid
		)
		unknownSaga := good()
		unknownSaga.SagaID = uuid.New()
		unknownStep := good()
		unknownStep.Step = "no-such-step"
		disagree := replyRecord(t, good())
		for i, h := range disagree.Headers {
			if h.Key == message.HeaderSagaID {
				disagree.Headers[i].Value = []byte(uuid.NewString())
			}
		}
		bad = append(bad, replyRecord(t, unknownSaga), replyRecord(t, unknownStep), disagree)
	}
	dlqBefore := e.metric("sagaflow_dlq_messages_total")
	e.produce(e.replies, bad...)

	// Command topic of a participant.
	cmdTopic := e.prefix + orderapi.Inventory + ".commands"
	cmd := message.Command{MessageID: uuid.New(), SagaID: uuid.New(), SagaType: orderapi.SagaType, AggregateID: "x", Step: "no-such-step",
		Action: message.Forward, Attempt: 1, ReplyTo: e.replies, SentAt: time.Now(), Payload: json.RawMessage(`{}`)}
	// Each bad record carries its own message id, as for the replies: the
	// inbox dedupes by message id, so records sharing one are one message
	// (whether a repeat is dropped or dead-lettered again would depend on
	// how the records fall into batches).
	encode := func() (message.Command, []byte) {
		c := cmd
		c.MessageID = uuid.New()
		b, err := message.EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		return c, b
	}
	unknownStepCmd, unknownStepBytes := encode()
	disagreeCmd, disagreeBytes := encode()
	_, noHeadersBytes := encode()
	id1, id2, id3 := uuid.New(), uuid.New(), uuid.New()
	badCmds := []kafka.Message{
		record("k1", []byte(`not json`), stdHeaders(id1, id1)),
		record("k2", []byte(`{"message_id":"`+id2.String()+`"}`), stdHeaders(id2, id2)),
		record("k3", []byte(`{"message_id":"`+id3.String()+`","attempt":"one"}`), stdHeaders(id3, id3)),
		record("k4", unknownStepBytes, stdHeaders(unknownStepCmd.MessageID, unknownStepCmd.SagaID)), // unknown step
		record("k5", disagreeBytes, stdHeaders(disagreeCmd.MessageID, uuid.New())),                  // headers disagree with the body
		record("k6", noHeadersBytes, nil),                                                           // no headers at all
	}
	e.produce(cmdTopic, badCmds...)

	// Sagas started after the bad records still flow on every partition.
	e.startAll(ctx)
	e.waitTerminal(settle)
	e.checkInvariants(false)

	reasons := e.dlqReasons(e.replies+".dlq", len(bad))
	if len(reasons) != len(bad) {
		t.Fatalf("%d dead letters on the reply DLQ, want %d: %q", len(reasons), len(bad), reasons)
	}
	cmdReasons := e.dlqReasons(cmdTopic+".dlq", len(badCmds))
	if len(cmdReasons) != len(badCmds) {
		t.Fatalf("%d dead letters on the command DLQ, want %d: %q", len(cmdReasons), len(badCmds), cmdReasons)
	}
	for _, want := range []string{"unknown saga", "no-such-step"} {
		if !containsAny(reasons, want) {
			t.Errorf("no reply dead letter says %q: %q", want, reasons)
		}
	}
	if got := e.metric("sagaflow_dlq_messages_total") - dlqBefore; got < float64(len(bad)+len(badCmds)) {
		t.Fatalf("dlq metric grew by %v, want >= %d", got, len(bad)+len(badCmds))
	}
	t.Logf("reply DLQ reasons: %q", reasons[:10])
	t.Logf("command DLQ reasons: %q", cmdReasons)
}

func containsAny(ss []string, sub string) bool {
	for _, s := range ss {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// Late and stray replies that parse: a second reply to an applied command
// (new message id) and a success for a step of a saga already compensated
// are journaled as late and change nothing; a reply whose action is not the
// one the step awaits is journaled and ignored too.
func TestStrayRepliesJournaledLate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: 8, seed: 22, override: nil})
	ctx := testkit.Context(t, 2*time.Minute)
	e.runAll()
	e.startAll(ctx)
	e.waitTerminal(settle)
	e.checkInvariants(false)
	var completed, compensated uuid.UUID
	if err := e.check.QueryRow(ctx, `SELECT id FROM `+e.schemas.Orchestrator+`.sagas WHERE state = 'completed' LIMIT 1`).Scan(&completed); err != nil {
		t.Fatal(err)
	}
	if err := e.check.QueryRow(ctx, `SELECT id FROM `+e.schemas.Orchestrator+`.sagas WHERE state = 'compensated' LIMIT 1`).Scan(&compensated); err != nil {
		t.Fatalf("the plan has no compensated saga: %v", err)
	}
	versions := e.count(`SELECT sum(version)::int FROM ` + e.schemas.Orchestrator + `.sagas`)
	// Rows ever enqueued (the relay deletes published ones): the sequence.
	enqueued := `SELECT CASE WHEN is_called THEN last_value ELSE 0 END::int FROM ` + e.schemas.Orchestrator + `.outbox_id_seq`
	outbox := e.count(enqueued)
	ignored := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.journal WHERE ignored`)
	// The ids of the commands the sagas sent (keyed by each saga's secret).
	cmd := func(id uuid.UUID, step string, action message.Action) uuid.UUID {
		in, _, err := e.engine.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return in.CommandID(step, action, 1)
	}
	late := []message.Reply{
		// duplicate answer to an applied command, under a new message id
		{MessageID: uuid.New(), InReplyTo: cmd(completed, orderapi.StepChargePayment, message.Forward), SagaID: completed, Step: orderapi.StepChargePayment, Action: message.Forward, Outcome: message.Success, Payload: json.RawMessage(`{"payment_id":"other"}`)},
		// late success of a pre-pivot step after the saga was compensated
		{MessageID: uuid.New(), InReplyTo: cmd(compensated, orderapi.StepReserveInventory, message.Forward), SagaID: compensated, Step: orderapi.StepReserveInventory, Action: message.Forward, Outcome: message.Success},
		// a failure arriving after success
		{MessageID: uuid.New(), InReplyTo: cmd(completed, orderapi.StepAwardPoints, message.Forward), SagaID: completed, Step: orderapi.StepAwardPoints, Action: message.Forward, Outcome: message.Failure, Reason: "late"},
	}
	// Stray: answers to commands the saga never sent (an action the step
	// never awaited, an unknown in_reply_to) go to the dead-letter topic.
	stray := []message.Reply{
		{MessageID: uuid.New(), InReplyTo: cmd(completed, orderapi.StepCreateShipment, message.Compensate), SagaID: completed, Step: orderapi.StepCreateShipment, Action: message.Compensate, Outcome: message.Success},
		{MessageID: uuid.New(), InReplyTo: uuid.New(), SagaID: completed, Step: orderapi.StepChargePayment, Action: message.Forward, Outcome: message.Success},
	}
	var recs []kafka.Message
	for _, r := range append(late, stray...) {
		recs = append(recs, replyRecord(t, r))
	}
	e.produce(e.replies, recs...)
	testkit.Eventually(t, settle, "late replies journaled as ignored", func() (bool, error) {
		return e.count(`SELECT count(*) FROM `+e.schemas.Orchestrator+`.journal WHERE ignored`) >= ignored+len(late), nil
	})
	reasons := e.dlqReasons(e.replies+inbox.DLQSuffixDefault, len(stray))
	for _, r := range reasons {
		if !strings.Contains(r, "stray reply") {
			t.Fatalf("stray reply dead-lettered with reason %q, want it to say stray reply", r)
		}
	}
	// Their dead letters are marked stray, for retention to purge.
	testkit.Eventually(t, settle, "stray dead letters marked stray", func() (bool, error) {
		return e.count(`SELECT count(*) FROM `+e.schemas.Orchestrator+`.dead_letters WHERE stray`) == len(stray), nil
	})
	if got := e.count(`SELECT sum(version)::int FROM ` + e.schemas.Orchestrator + `.sagas`); got != versions {
		t.Fatalf("late or stray replies moved sagas: versions %d -> %d", versions, got)
	}
	if got := e.count(enqueued); got != outbox {
		t.Fatalf("late or stray replies sent %d commands", got-outbox)
	}
	e.checkInvariants(false)
}

// Unforgeable replies: a saga's command ids are keyed by a secret of its
// own, so a reply whose in_reply_to was computed from the saga id alone
// (as every id was before) answers nothing the saga sent: it is
// dead-lettered as stray and the saga does not move. The real answer,
// which echoes the command's id, then completes it.
func TestForgedReplyFromSagaIDAloneIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: 2, seed: 23})
	ctx := testkit.Context(t, 2*time.Minute)
	e.run("orchestrator", e.service(orchestrator.DefaultRun).Run)
	parts := e.participants()
	e.runParticipants(parts, orderapi.Inventory) // inventory is away
	ids := e.startAll(ctx)
	invTopic := e.prefix + orderapi.Inventory + ".commands"
	testkit.Eventually(t, settle, "the first commands sent", func() (bool, error) {
		return len(e.sentOn(invTopic)) >= len(ids), nil
	})
	target := ids[0]
	before, _, err := e.engine.Get(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	// The id computed from the saga id alone (as before sagas had secrets).
	guessed := uuid.NewSHA1(target, []byte(orderapi.StepReserveInventory+"\x00"+string(message.Forward)+"\x001"))
	if guessed == before.CommandID(orderapi.StepReserveInventory, message.Forward, 1) {
		t.Fatal("the command id is still the one computed from the saga id")
	}
	forged := message.Reply{MessageID: uuid.New(), InReplyTo: guessed, SagaID: target, Step: orderapi.StepReserveInventory,
		Action: message.Forward, Outcome: message.Success, Payload: json.RawMessage(`{"reservation_id":"FAKE"}`)}
	e.produce(e.replies, replyRecord(t, forged))
	reasons := e.dlqReasons(e.replies+inbox.DLQSuffixDefault, 1)
	if !strings.Contains(reasons[0], "stray reply") {
		t.Fatalf("the forged reply was dead-lettered with reason %q, want it called a stray reply", reasons[0])
	}
	after, _, err := e.engine.Get(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if after.Version != before.Version || after.State != saga.Running || after.Steps[0].State != before.Steps[0].State {
		t.Fatalf("the forged reply moved the saga: version %d -> %d, state %s, first step %s -> %s",
			before.Version, after.Version, after.State, before.Steps[0].State, after.Steps[0].State)
	}
	if strings.Contains(string(after.Data), "FAKE") {
		t.Fatalf("the forged payload reached the saga's data: %s", after.Data)
	}
	// Inventory comes back and answers the real commands.
	for _, p := range parts.Participants() {
		if p.Name() == orderapi.Inventory {
			e.run("participant "+p.Name(), p.Run)
		}
	}
	e.waitTerminal(settle)
	e.checkInvariants(false)
}

// A reply forged from a command id seen on the command topic is not taken
// once the saga re-sent: a client that reads inventory.commands takes the
// first command's id, lets the step time out and be re-sent (attempt 2),
// then writes a success with a reservation of its choosing, answering
// attempt 1, on the reply topic. The saga awaits only its latest send: the
// forged reply is journaled as ignored, the payload goes nowhere, and the
// real participant's answer (to the latest send) completes the step.
func TestForgedReplyToEarlierAttemptIsNotTaken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: 1, seed: 23, override: func(r *saga.Registry) error {
		return r.Override(orderapi.SagaType, orderapi.StepReserveInventory, saga.StepOverride{Timeout: 300 * time.Millisecond, Deadline: 5 * time.Minute})
	}})
	ctx := testkit.Context(t, 2*time.Minute)
	e.run("orchestrator", e.service(orchestrator.DefaultRun).Run)
	parts := e.participants()
	e.runParticipants(parts, orderapi.Inventory) // inventory is away: the step is re-sent
	ids := e.startAll(ctx)
	target := ids[0]
	invTopic := e.prefix + orderapi.Inventory + ".commands"
	testkit.Eventually(t, settle, "the reservation re-sent on the command topic", func() (bool, error) {
		n, err := e.records(invTopic)
		return n >= 2, err
	})
	var seen message.Command
	for _, m := range e.readAll(invTopic, 2) {
		c, err := message.DecodeCommand(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		if c.SagaID == target && c.Action == message.Forward && c.Attempt == 1 {
			seen = c
		}
	}
	if seen.Attempt != 1 {
		t.Fatal("the first reservation command is not on the command topic")
	}
	before, _, err := e.engine.Get(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if before.Steps[0].Attempts < 2 {
		t.Fatalf("reservation sent %d times, want a re-send before the forgery", before.Steps[0].Attempts)
	}
	forged := message.Reply{MessageID: uuid.New(), InReplyTo: seen.MessageID, SagaID: target, Step: orderapi.StepReserveInventory,
		Action: message.Forward, Outcome: message.Success, Payload: json.RawMessage(`{"reservation_id":"FAKE"}`)}
	e.produce(e.replies, replyRecord(t, forged))
	testkit.Eventually(t, settle, "the forged reply journaled as ignored", func() (bool, error) {
		return e.count(`SELECT count(*) FROM `+e.schemas.Orchestrator+`.journal WHERE saga_id = $1 AND ignored AND message_id = $2 AND reason LIKE '%answers attempt 1;%'`,
			target, forged.MessageID) == 1, nil
	})
	after, _, err := e.engine.Get(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if s := after.Steps[0]; s.State == saga.StepSucceeded || len(s.Output) != 0 || strings.Contains(string(after.Data), "FAKE") {
		t.Fatalf("the forged reply was taken: step %s, output %s, data %s", s.State, s.Output, after.Data)
	}
	// Inventory comes back and answers the latest send.
	for _, p := range parts.Participants() {
		if p.Name() == orderapi.Inventory {
			e.run("participant "+p.Name(), p.Run)
		}
	}
	e.waitTerminal(settle)
	e.checkInvariants(false)
	final, _, err := e.engine.Get(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(final.Data), "FAKE") || strings.Contains(string(final.Steps[0].Output), "FAKE") {
		t.Fatalf("the forged reservation reached the saga: data %s, output %s", final.Data, final.Steps[0].Output)
	}
}
