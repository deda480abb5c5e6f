package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/inventory"
	"github.com/sagaflow/sagaflow/participants/reference"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// testKey is a key of id whose secret is 32 copies of fill.
func testKey(id string, fill byte) message.Key {
	return message.Key{ID: id, Secret: []byte(strings.Repeat(string(fill), 32))}
}

// signEnv is an orchestrator signing its commands and checking its
// replies, and the reference participants verifying the commands and
// signing their replies, each participant run on its own so a test can
// leave one out and play it.
type signEnv struct {
	t          *testing.T
	pool       *pgxpool.Pool
	brokers    []string
	prefix     string
	replyTopic string
	svc        *orchestrator.Service
	parts      map[string]*participants.Participant
	partKeys   map[string]message.Key
	ctx        context.Context
}

type signOpts struct {
	// unsignedParticipants answer unsigned (no key of their own);
	// allowUnsigned is the orchestrator's migration setting.
	unsignedParticipants bool
	allowUnsigned        bool
}

func newSignEnv(t *testing.T, o signOpts) *signEnv {
	t.Helper()
	e := &signEnv{t: t, pool: testkit.Pool(t), brokers: testkit.Brokers(t), ctx: testkit.Context(t, 3*time.Minute)}
	e.prefix = "sg" + strings.ToLower(testkit.RandomSuffix(6)) + "."
	e.replyTopic = e.prefix + "saga.replies"
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	// The orchestrator rotated its key: the old one is still accepted.
	oldKey, orchKey := testKey("orch-1", 'o'), testKey("orch-2", 'O')
	signer, err := message.NewSigner(orchKey)
	if err != nil {
		t.Fatal(err)
	}
	ring := &message.Keyring{}
	e.partKeys = map[string]message.Key{}
	for i, name := range reference.Names {
		k := testKey(name+"-1", byte('a'+i))
		e.partKeys[name] = k
		if err := ring.Add(name, k); err != nil {
			t.Fatal(err)
		}
	}
	e.svc, err = orchestrator.New(e.pool, reg, &orchestrator.Config{
		Brokers: e.brokers, Partitions: 2, GroupID: e.prefix + "orchestrator",
		Engine: orchestrator.EngineConfig{TopicPrefix: e.prefix, ReplyTopic: e.replyTopic, TimerInterval: 50 * time.Millisecond,
			Signing: orchestrator.Signing{Commands: signer, Replies: ring, AllowUnsigned: o.allowUnsigned}},
	})
	if err != nil {
		t.Fatal(err)
	}
	replyKeys := e.partKeys
	if o.unsignedParticipants {
		replyKeys = nil
	}
	set, err := reference.New(e.pool, reference.Options{Brokers: e.brokers, TopicPrefix: e.prefix, ReplyTopics: []string{e.replyTopic},
		Partitions: 2, PaymentLimitCents: 100_000, CommandKeys: []message.Key{oldKey, orchKey}, ReplyKeys: replyKeys})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Prepare(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := set.Prepare(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := inventory.Seed(e.ctx, e.pool, reference.Options{}.Schema(orderapi.Inventory), map[string]int{"sku-apple": 10}); err != nil {
		t.Fatal(err)
	}
	e.parts = map[string]*participants.Participant{}
	for _, p := range set.Participants() {
		e.parts[p.Name()] = p
	}
	e.run("orchestrator", e.svc.Run)
	return e
}

// run runs fn until the returned stop (or the test's end).
func (e *signEnv) run(name string, fn func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, context.Canceled) {
					e.t.Errorf("%s: %v", name, err)
				}
			case <-time.After(30 * time.Second):
				e.t.Errorf("%s did not stop within 30s", name)
			}
		})
	}
	e.t.Cleanup(stop)
	return stop
}

// runParticipants runs the named participants.
func (e *signEnv) runParticipants(names ...string) (stop func()) {
	var stops []func()
	for _, n := range names {
		stops = append(stops, e.run(n, e.parts[n].Run))
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}

func (e *signEnv) start(orderID string, amount int64) uuid.UUID {
	e.t.Helper()
	in, _, err := e.svc.Engine().Start(e.ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: orderID, AggregateID: orderID,
		Data: map[string]any{"order_id": orderID, "customer": "c", "sku": "sku-apple", "qty": 1, "amount_cents": amount}})
	if err != nil {
		e.t.Fatal(err)
	}
	return in.ID
}

func (e *signEnv) saga(id uuid.UUID) saga.Instance {
	e.t.Helper()
	in, _, err := e.svc.Engine().Get(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return in
}

func (e *signEnv) waitState(id uuid.UUID, st saga.State) saga.Instance {
	e.t.Helper()
	testkit.Eventually(e.t, 90*time.Second, "saga "+string(st), func() (bool, error) {
		in, _, err := e.svc.Engine().Get(e.ctx, id)
		return err == nil && in.State == st, err
	})
	return e.saga(id)
}

// readCommand reads, as an eavesdropper on participant's command topic
// would, the first command of saga id for action.
func (e *signEnv) readCommand(participant string, id uuid.UUID, action message.Action) (message.Command, kafka.Message) {
	e.t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, GroupID: "spy-" + testkit.RandomSuffix(4), Topic: e.prefix + participant + ".commands",
		MaxWait: 50 * time.Millisecond, StartOffset: kafka.FirstOffset})
	defer r.Close()
	ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
	defer cancel()
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			e.t.Fatalf("read %s commands: %v", participant, err)
		}
		c, err := message.DecodeCommand(m.Value)
		if err == nil && c.SagaID == id && c.Action == action {
			return c, m
		}
	}
}

// forge writes a success reply to cmd on the reply topic with payload,
// signed by sign (nil: unsigned), as a client allowed to write there.
func (e *signEnv) forge(cmd message.Command, payload string, sign *message.Signer) uuid.UUID {
	e.t.Helper()
	rep := message.Reply{MessageID: uuid.New(), InReplyTo: cmd.MessageID, SagaID: cmd.SagaID, Step: cmd.Step, Action: cmd.Action, Outcome: message.Success}
	if payload != "" {
		rep.Payload = json.RawMessage(payload)
	}
	value, err := message.EncodeReply(rep)
	if err != nil {
		e.t.Fatal(err)
	}
	h := message.Headers(rep.MessageID, rep.SagaID)
	if sign != nil {
		sign.Sign(e.replyTopic, []byte(rep.SagaID.String()), value, h)
	}
	var hs []kafka.Header
	for k, v := range h {
		hs = append(hs, kafka.Header{Key: k, Value: []byte(v)})
	}
	w := &kafka.Writer{Addr: kafka.TCP(e.brokers...), Topic: e.replyTopic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	if err := w.WriteMessages(e.ctx, kafka.Message{Key: []byte(rep.SagaID.String()), Value: value, Headers: hs}); err != nil {
		e.t.Fatal(err)
	}
	return rep.MessageID
}

// waitDeadLettered waits until every reply of ids is on the reply topic's
// dead-letter topic and returns their reasons.
func (e *signEnv) waitDeadLettered(ids ...uuid.UUID) map[uuid.UUID]string {
	e.t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, GroupID: "dlq-" + testkit.RandomSuffix(4), Topic: e.replyTopic + ".dlq",
		MaxWait: 50 * time.Millisecond, StartOffset: kafka.FirstOffset})
	defer r.Close()
	ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
	defer cancel()
	out := map[uuid.UUID]string{}
	for len(out) < len(ids) {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			e.t.Fatalf("dead letters of the reply topic (have %d of %d): %v", len(out), len(ids), err)
		}
		rep, err := message.DecodeReply(m.Value)
		if err != nil {
			continue
		}
		for _, h := range m.Headers {
			if h.Key == message.HeaderDLQReason {
				out[rep.MessageID] = string(h.Value)
			}
		}
	}
	for _, id := range ids {
		if _, ok := out[id]; !ok {
			e.t.Fatalf("reply %s not dead-lettered (have %v)", id, out)
		}
	}
	return out
}

// A client that can read inventory's command topic and write the reply
// topic answers the reservation itself, with a reservation_id of its
// choosing: unsigned, signed with a key it made up under the inventory's
// key id, and signed with another participant's real key (a compromised
// coupon service). Each is dead-lettered with the reason and the saga
// stays at the reservation; once the real inventory answers, signed,
// the saga completes with the real reservation.
func TestForgedReplyFromSeenCommandIsRefused(t *testing.T) {
	t.Parallel()
	e := newSignEnv(t, signOpts{})
	e.runParticipants(orderapi.Coupon, orderapi.Payment, orderapi.Shipping, orderapi.Points)
	id := e.start("order-forge-1", 1000)
	cmd, rec := e.readCommand(orderapi.Inventory, id, message.Forward)
	if !hasHeader(rec, message.HeaderKeyID, "orch-2") || !hasHeader(rec, message.HeaderSignature, "") {
		t.Fatalf("the command on the topic is not signed with the active key orch-2: %v", rec.Headers)
	}
	madeUp, _ := message.NewSigner(testKey(e.partKeys[orderapi.Inventory].ID, 'x'))
	coupon, _ := message.NewSigner(e.partKeys[orderapi.Coupon])
	const forged = `{"reservation_id":"forged-reservation"}`
	unsigned := e.forge(cmd, forged, nil)
	wrongSecret := e.forge(cmd, forged, madeUp)
	otherParticipant := e.forge(cmd, forged, coupon)
	reasons := e.waitDeadLettered(unsigned, wrongSecret, otherParticipant)
	for id, want := range map[uuid.UUID]string{unsigned: "unsigned", wrongSecret: "does not match", otherParticipant: `signed with a key of "coupon"`} {
		if !strings.Contains(reasons[id], want) {
			t.Errorf("reply %s dead-lettered with %q, want it to say %q", id, reasons[id], want)
		}
	}
	in := e.saga(id)
	if in.State != saga.Running || in.CurrentStep() != orderapi.StepReserveInventory {
		t.Fatalf("after the forged replies the saga is %s at %q, want running at %s", in.State, in.CurrentStep(), orderapi.StepReserveInventory)
	}
	e.runParticipants(orderapi.Inventory)
	in = e.waitState(id, saga.Completed)
	var data steps.Order
	if err := json.Unmarshal(in.Data, &data); err != nil {
		t.Fatal(err)
	}
	if data.ReservationID != id.String() {
		t.Fatalf("reservation_id %q, want the real inventory's %q", data.ReservationID, id)
	}
}

// A compensation success forged from the compensation command seen on the
// topic does not make the saga compensated: the saga waits for the real
// inventory's answer.
func TestForgedCompensationSuccessIsRefused(t *testing.T) {
	t.Parallel()
	e := newSignEnv(t, signOpts{})
	e.runParticipants(orderapi.Coupon, orderapi.Payment)
	stopInventory := e.runParticipants(orderapi.Inventory)
	id := e.start("order-forge-2", 250_000) // declined by payment: compensated
	// The reservation is answered; then inventory goes away before its
	// compensation.
	testkit.Eventually(t, 60*time.Second, "reservation done", func() (bool, error) {
		in, _, err := e.svc.Engine().Get(e.ctx, id)
		return err == nil && in.CurrentStep() != orderapi.StepReserveInventory, err
	})
	stopInventory()
	cmd, _ := e.readCommand(orderapi.Inventory, id, message.Compensate)
	forgedID := e.forge(cmd, "", nil)
	e.waitDeadLettered(forgedID)
	if in := e.saga(id); in.State != saga.Compensating {
		t.Fatalf("after the forged compensation success the saga is %s, want compensating", in.State)
	}
	e.runParticipants(orderapi.Inventory)
	e.waitState(id, saga.Compensated)
}

// A participant that does not sign yet is refused, and works only with
// the orchestrator's migration setting (security.allow_unsigned_replies).
func TestUnsignedParticipantWorksOnlyWithMigrationSetting(t *testing.T) {
	t.Parallel()
	for _, allow := range []bool{false, true} {
		e := newSignEnv(t, signOpts{unsignedParticipants: true, allowUnsigned: allow})
		e.runParticipants(reference.Names...)
		id := e.start("order-unsigned", 1000)
		if allow {
			e.waitState(id, saga.Completed)
			continue
		}
		cmd, _ := e.readCommand(orderapi.Inventory, id, message.Forward)
		// The real inventory's unsigned answer is dead-lettered.
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, GroupID: "dlq-" + testkit.RandomSuffix(4), Topic: e.replyTopic + ".dlq",
			MaxWait: 50 * time.Millisecond, StartOffset: kafka.FirstOffset})
		ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
		m, err := r.ReadMessage(ctx)
		cancel()
		_ = r.Close()
		if err != nil {
			t.Fatalf("no dead letter for the unsigned reply: %v", err)
		}
		rep, err := message.DecodeReply(m.Value)
		if err != nil || rep.InReplyTo != cmd.MessageID {
			t.Fatalf("dead letter %v (%v), want the reply to %s", rep, err, cmd.MessageID)
		}
		if !hasHeader(m, message.HeaderDLQReason, "") || !strings.Contains(dlqReason(m), "is unsigned") {
			t.Fatalf("dead letter reason %q, want it to say the reply is unsigned", dlqReason(m))
		}
		if in := e.saga(id); in.State != saga.Running || in.CurrentStep() != orderapi.StepReserveInventory {
			t.Fatalf("the unsigned reply moved the saga: %s at %q", in.State, in.CurrentStep())
		}
	}
}

func hasHeader(m kafka.Message, key, value string) bool {
	for _, h := range m.Headers {
		if h.Key == key && (value == "" || string(h.Value) == value) {
			return true
		}
	}
	return false
}

func dlqReason(m kafka.Message) string {
	for _, h := range m.Headers {
		if h.Key == message.HeaderDLQReason {
			return string(h.Value)
		}
	}
	return ""
}
