package payment

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/internal/refstep"
	"github.com/sagaflow/sagaflow/participants/participanttest"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

const schema = "payment"

type fixture = participanttest.Fixture[refstep.Handlers]

func setup(t *testing.T, opts Options) fixture {
	t.Helper()
	return participanttest.NewFixture(t, schema, Migrations, func(schema string) (refstep.Handlers, error) { return refstep.Build(step(schema, opts)) })
}

func cmd(t *testing.T, saga uuid.UUID, customer string, cents int64) message.Command {
	return participanttest.Command(t, saga, orderapi.StepChargePayment, message.Forward, 1,
		orderapi.ChargePayment{OrderID: "order-" + saga.String()[:8], Customer: customer, AmountCents: cents})
}

func TestChargeOnceAndDeclineOverLimit(t *testing.T) {
	t.Parallel()
	f := setup(t, Options{})
	ok, big := uuid.New(), uuid.New()

	res := participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, ok, "ann", LimitCentsDefault))
	participanttest.WantOutcome(t, res, message.Success, "")
	first := participanttest.Payload[orderapi.ChargePaymentResult](t, res).PaymentID
	if first == "" {
		t.Fatal("payment id is empty")
	}
	// A repeated forward charges nothing more and answers the same payment.
	res = participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, ok, "ann", LimitCentsDefault))
	participanttest.WantOutcome(t, res, message.Success, "")
	if again := participanttest.Payload[orderapi.ChargePaymentResult](t, res).PaymentID; again != first {
		t.Fatalf("repeated charge answered payment %q, want %q", again, first)
	}

	participanttest.WantOutcome(t, participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, big, "bob", LimitCentsDefault+1)), message.Failure, orderapi.ReasonPaymentDeclined)

	if got := participanttest.Read(t, f.Pool, schema, Charges); len(got) != 1 || got[ok] != 1 {
		t.Fatalf("charges = %v, want exactly one for %s", got, ok)
	}
	sums, err := Charged(testkit.Context(t, 30*time.Second), f.Pool, schema)
	if err != nil {
		t.Fatalf("charged: %v", err)
	}
	if len(sums) != 1 || sums["ann"] != LimitCentsDefault {
		t.Fatalf("charged = %v, want ann=%d only", sums, LimitCentsDefault)
	}
}

func TestCustomLimitAndFreeOrder(t *testing.T) {
	t.Parallel()
	f := setup(t, Options{LimitCents: 1000})
	participanttest.WantOutcome(t, participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, uuid.New(), "ann", 1001)), message.Failure, orderapi.ReasonPaymentDeclined)
	free := uuid.New()
	participanttest.WantOutcome(t, participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, free, "ann", 0)), message.Success, "")
	if got := participanttest.Read(t, f.Pool, schema, Charges); len(got) != 1 || got[free] != 1 {
		t.Fatalf("charges = %v, want one for the free order %s", got, free)
	}
}

func TestInvalidPayloads(t *testing.T) {
	t.Parallel()
	f := setup(t, Options{})
	for name, c := range map[string]struct {
		field   string
		payload any
	}{
		"empty":           {"payload", nil},
		"not json":        {"payload", []byte(`{"amount_cents": 1.5}`)},
		"no order":        {"order_id", orderapi.ChargePayment{Customer: "ann", AmountCents: 1}},
		"no customer":     {"customer", orderapi.ChargePayment{OrderID: "o1", AmountCents: 1}},
		"negative amount": {"amount_cents", orderapi.ChargePayment{OrderID: "o1", Customer: "ann", AmountCents: -1}},
	} {
		t.Run(name, func(t *testing.T) {
			participanttest.WantInvalid(t, f.Pool, f.H.Forward, participanttest.Command(t, uuid.New(), orderapi.StepChargePayment, message.Forward, 1, c.payload), c.field)
		})
	}
	if got := participanttest.Read(t, f.Pool, schema, Charges); len(got) != 0 {
		t.Fatalf("charges after invalid commands = %v, want none", got)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	if got := (Options{}).WithDefaults().LimitCents; got != LimitCentsDefault {
		t.Fatalf("default limit = %d, want %d", got, LimitCentsDefault)
	}
	err := (Options{LimitCents: -1}).validate()
	if err == nil || !strings.Contains(err.Error(), "LimitCents") {
		t.Fatalf("negative limit: err = %v, want an error naming LimitCents", err)
	}
	p, err := participants.New(testkit.Pool(t), &participants.Config{Name: orderapi.Payment})
	if err != nil {
		t.Fatalf("participants.New: %v", err)
	}
	if err := Register(p, Options{LimitCents: -5}); err == nil {
		t.Fatal("Register with a negative limit: err = nil")
	}
	if err := Register(p, Options{}); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if err := Register(p, Options{}); err == nil {
		t.Fatal("second Register: err = nil, want duplicate step error")
	}
}

func TestChargeBatchChargesOnceAndLeavesTheRestToCharge(t *testing.T) {
	t.Parallel()
	f := setup(t, Options{})
	prior := uuid.New()
	first := participanttest.Payload[orderapi.ChargePaymentResult](t, participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, prior, "ann", 100))).PaymentID

	a, b := uuid.New(), uuid.New()
	res := participanttest.ExecBatch(t, f.Pool, f.H.ForwardMany, cmd(t, a, "ann", 200), cmd(t, b, "bob", 300))
	for i := range res {
		participanttest.WantOutcome(t, res[i], message.Success, "")
		if id := participanttest.Payload[orderapi.ChargePaymentResult](t, res[i]).PaymentID; id == "" || id == first {
			t.Fatalf("result %d: payment id %q, want a new one", i, id)
		}
	}
	// A saga already charged, or an amount over the limit, is left to
	// charge; nothing of such a batch is committed.
	for name, c := range map[string]message.Command{"charged": cmd(t, prior, "ann", 100), "over the limit": cmd(t, uuid.New(), "cy", LimitCentsDefault+1)} {
		res = participanttest.ExecBatch(t, f.Pool, f.H.ForwardMany, cmd(t, uuid.New(), "dee", 1), c)
		if res[1].Outcome == message.Success {
			t.Fatalf("%s: outcome success, want it left to charge", name)
		}
	}
	sums, err := Charged(testkit.Context(t, 30*time.Second), f.Pool, schema)
	if err != nil {
		t.Fatal(err)
	}
	if len(sums) != 2 || sums["ann"] != 300 || sums["bob"] != 300 {
		t.Fatalf("charged = %v, want ann=300 bob=300 (the declined batches left nothing)", sums)
	}
}
