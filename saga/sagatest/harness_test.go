package sagatest_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/saga/sagatest"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

const (
	reserve  = orderapi.StepReserveInventory
	coupon   = orderapi.StepLockCoupon
	payment  = orderapi.StepChargePayment
	shipment = orderapi.StepCreateShipment
	points   = orderapi.StepAwardPoints
	confirm  = orderapi.StepConfirmStock
)

func newOrder(t sagatest.TB, opts ...sagatest.Option) *sagatest.Harness {
	t.Helper()
	return sagatest.New(t, placeOrder(), append([]sagatest.Option{sagatest.Data(order)}, opts...)...)
}

// toPayment succeeds the two steps before the pivot.
func toPayment(h *sagatest.Harness) {
	h.Start()
	h.Expect(reserve, sagatest.Forward)
	h.Succeed(orderapi.ReserveInventoryResult{ReservationID: "res-1"})
	h.Expect(coupon, sagatest.Forward)
	h.Succeed(orderapi.LockCouponResult{DiscountCents: 500})
	h.Expect(payment, sagatest.Forward)
}

// TestPlaceOrder is what a user's table test of a definition looks like.
func TestPlaceOrder(t *testing.T) {
	t.Parallel()
	rows := []struct {
		name  string
		run   func(t *testing.T, h *sagatest.Harness)
		state saga.State
		steps string // the steps' states, in order
	}{
		{"happy path", func(t *testing.T, h *sagatest.Harness) {
			toPayment(h)
			h.Succeed(nil)
			h.Expect(shipment, sagatest.Forward)
			h.Succeed(nil)
			h.Expect(points, sagatest.Forward)
			h.Succeed(nil)
			h.Expect(confirm, sagatest.Forward)
			h.Succeed(nil)
		}, saga.Completed, "succeeded succeeded succeeded succeeded succeeded succeeded"},
		{"stock out: nothing to undo", func(t *testing.T, h *sagatest.Harness) {
			h.Start()
			h.Expect(reserve, sagatest.Forward)
			h.Fail(orderapi.ReasonInsufficientStock)
			h.ExpectJournal("started", "step failed reserve-inventory")
		}, saga.Compensated, "failed pending pending pending pending pending"},
		{"payment declined: coupon then stock released", func(t *testing.T, h *sagatest.Harness) {
			toPayment(h)
			h.Fail(orderapi.ReasonPaymentDeclined)
			h.Expect(coupon, sagatest.Compensate)
			h.Succeed(nil)
			h.Expect(reserve, sagatest.Compensate)
			h.Succeed(nil)
		}, saga.Compensated, "compensated compensated failed pending pending pending"},
		{"compensation retried until done", func(t *testing.T, h *sagatest.Harness) {
			toPayment(h)
			h.Fail(orderapi.ReasonPaymentDeclined)
			h.Expect(coupon, sagatest.Compensate)
			h.Retry("busy")
			h.FireNextTimer()
			c := h.Expect(coupon, sagatest.Compensate)
			if c.Attempt != 2 {
				t.Fatalf("compensation attempt %d, want 2", c.Attempt)
			}
			h.FireNextTimer() // its timeout: retried again later
			h.FireNextTimer()
			h.Expect(coupon, sagatest.Compensate)
			h.Succeed(nil)
			h.Expect(reserve, sagatest.Compensate)
			h.Succeed(nil)
		}, saga.Compensated, "compensated compensated failed pending pending pending"},
		{"retry answers before the pivot give the step up", func(t *testing.T, h *sagatest.Harness) {
			h.Start()
			h.Expect(reserve, sagatest.Forward)
			h.Succeed(nil)
			h.Expect(coupon, sagatest.Forward)
			for range saga.RetryMaxAttemptsDefault - 1 {
				h.Retry("later")
				h.FireNextTimer()
				h.Expect(coupon, sagatest.Forward)
			}
			h.Retry("later")
			// Given up with an unknown outcome: the participant is asked
			// first; it answers nothing, so its own compensation runs first.
			h.Expect(coupon, sagatest.Query)
			h.QueriesUnanswered(coupon)
			h.Expect(coupon, sagatest.Compensate)
			h.Succeed(nil)
			h.Expect(reserve, sagatest.Compensate)
			h.Succeed(nil)
		}, saga.Compensated, "compensated compensated pending pending pending pending"},
		{"a given-up step the participant recorded done goes on", func(t *testing.T, h *sagatest.Harness) {
			h.Start()
			h.Expect(reserve, sagatest.Forward)
			h.Succeed(nil)
			h.Expect(coupon, sagatest.Forward)
			for range saga.RetryMaxAttemptsDefault - 1 {
				h.Retry("later")
				h.FireNextTimer()
				h.Expect(coupon, sagatest.Forward)
			}
			h.Retry("later")
			h.Expect(coupon, sagatest.Query)
			h.Reply(h.Sent()[len(h.Sent())-1], sagatest.Recorded(message.QueryDone, nil))
			h.Expect(orderapi.StepChargePayment, sagatest.Forward)
			h.Succeed(orderapi.ChargePaymentResult{PaymentID: "pay-1"})
			h.Expect(orderapi.StepCreateShipment, sagatest.Forward)
			h.Succeed(orderapi.CreateShipmentResult{ShipmentID: "sh-1"})
			h.Expect(orderapi.StepAwardPoints, sagatest.Forward)
			h.Succeed(nil)
			h.Expect(orderapi.StepConfirmStock, sagatest.Forward)
			h.Succeed(nil)
		}, saga.Completed, "succeeded succeeded succeeded succeeded succeeded succeeded"},
		{"coupon never answers: given up at the saga deadline", func(t *testing.T, h *sagatest.Harness) {
			h.Start()
			h.Expect(reserve, sagatest.Forward)
			h.Advance(5 * time.Second)
			h.Succeed(nil)
			h.Expect(coupon, sagatest.Forward)
			h.TimeoutUntilGivenUp(coupon)
			if !h.Now().Equal(sagatest.DefaultStart.Add(2 * time.Minute)) {
				t.Fatalf("given up at +%s, want the saga deadline +2m", h.Elapsed())
			}
			if e := h.Last().Journal[0].Event; e != saga.JournalDeadline {
				t.Fatal("given up by " + e)
			}
			h.Expect(coupon, sagatest.Compensate)
			h.Succeed(nil)
			h.Expect(reserve, sagatest.Compensate)
			h.Succeed(nil)
		}, saga.Compensated, "compensated compensated pending pending pending pending"},
		{"late success after giving up is ignored", func(t *testing.T, h *sagatest.Harness) {
			h.Start()
			first := h.Expect(reserve, sagatest.Forward)
			h.TimeoutUntilGivenUp(reserve)
			h.Expect(reserve, sagatest.Compensate)
			if d := h.Reply(first, sagatest.Succeeded(nil)); !d.Late {
				t.Fatal("a forward success after giving up was applied")
			}
			h.Succeed(nil) // the compensation's
			if ev := h.Events(); ev[len(ev)-2] != "late reply reserve-inventory" {
				t.Fatal(ev)
			}
		}, saga.Compensated, "compensated pending pending pending pending pending"},
		{"shipment retried forever after the pivot", func(t *testing.T, h *sagatest.Harness) {
			toPayment(h)
			h.Succeed(nil)
			h.Expect(shipment, sagatest.Forward)
			h.Advance(time.Hour) // timeouts and re-sends, never given up
			if s := h.Step(shipment); s.Attempts < 20 || h.Instance().Flag == "" {
				t.Fatalf("shipment: %d sends, flag %q; want many sends and a flag", s.Attempts, h.Instance().Flag)
			}
			if sent := h.ExpectSends(shipment, sagatest.Forward); len(sent) != h.Step(shipment).Attempts-1 {
				t.Fatalf("%d re-sends expected, %d sends", len(sent), h.Step(shipment).Attempts)
			}
			h.Succeed(nil)
			h.Expect(points, sagatest.Forward)
		}, saga.Running, "succeeded succeeded succeeded succeeded running pending"},
		{"failure after the pivot: failed, never compensated", func(t *testing.T, h *sagatest.Harness) {
			toPayment(h)
			h.Succeed(nil)
			h.Expect(shipment, sagatest.Forward)
			h.Fail("no such address")
			h.ExpectNoCommand()
		}, saga.Failed, "succeeded succeeded succeeded failed pending pending"},
		{"duplicate delivery of a reply is ignored", func(t *testing.T, h *sagatest.Harness) {
			h.Start()
			h.Expect(reserve, sagatest.Forward)
			h.Succeed(nil)
			if d := h.Redeliver(); !d.Late || d.Changed {
				t.Fatal("duplicate applied")
			}
		}, saga.Running, "succeeded running pending pending pending pending"},
		{"output rejected before the pivot: compensated", func(t *testing.T, h *sagatest.Harness) {
			h.Start()
			h.Expect(reserve, sagatest.Forward)
			h.Succeed(json.RawMessage(`{"reservation_id":7}`))
			h.Expect(reserve, sagatest.Compensate)
			h.Succeed(nil)
		}, saga.Compensated, "compensated pending pending pending pending pending"},
		{"operator compensates before the pivot", func(t *testing.T, h *sagatest.Harness) {
			h.Start()
			h.Expect(reserve, sagatest.Forward)
			if _, err := h.Operate(saga.Operator{Action: saga.ActionCompensate}); err != nil {
				t.Fatal(err)
			}
			h.Expect(reserve, sagatest.Compensate)
			h.Succeed(nil)
		}, saga.Compensated, "compensated pending pending pending pending pending"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			h := newOrder(t)
			row.run(t, h)
			if row.state == "" {
				return
			}
			h.ExpectState(row.state)
			var got []string
			for _, s := range h.Instance().Steps {
				got = append(got, string(s.State))
			}
			if g := strings.Join(got, " "); g != row.steps {
				t.Fatalf("steps %s, want %s", g, row.steps)
			}
		})
	}
}

func TestClock(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	h := newOrder(t, sagatest.StartAt(start), sagatest.SagaID(uuid.MustParse("00000000-0000-0000-0000-00000000abcd")))
	if n := h.FireTimers(); n != 0 {
		t.Fatalf("FireTimers before start fired %d", n)
	}
	h.Start()
	c := h.Expect(reserve, sagatest.Forward)
	if !c.SentAt.Equal(start) || c.SagaID.String() != "00000000-0000-0000-0000-00000000abcd" {
		t.Fatalf("first command %+v: want sent at the clock start by the given saga", c)
	}
	if n := h.Advance(9 * time.Second); n != 0 || h.Elapsed() != 9*time.Second {
		t.Fatalf("Advance(9s) fired %d timers, clock +%s", n, h.Elapsed())
	}
	if n := h.FireTimers(); n != 0 {
		t.Fatalf("FireTimers before the timeout fired %d", n)
	}
	// 10s timeout, then a re-send after a backoff under 100ms: two timers.
	if n := h.Advance(time.Second + 100*time.Millisecond); n != 2 {
		t.Fatalf("Advance over the timeout and the backoff fired %d timers, want 2 (journal %q)", n, h.Events())
	}
	if c := h.Expect(reserve, sagatest.Forward); c.Attempt != 2 {
		t.Fatalf("re-send attempt %d", c.Attempt)
	}
	w, ok := h.NextWakeup()
	if !ok || !w.After(h.Now()) {
		t.Fatalf("next wake-up %s (ok %v) not after now %s", w, ok, h.Now())
	}
	h.FireNextTimer()
	if !h.Now().Equal(w) {
		t.Fatalf("FireNextTimer moved the clock to %s, want the wake-up %s", h.Now(), w)
	}
	if got := len(h.Sent()); got != 2 {
		t.Fatalf("Sent() has %d commands, want 2", got)
	}
	if dl := h.DeadlineOf(reserve); !dl.Equal(start.Add(saga.StepDeadlineDefault)) {
		t.Fatalf("DeadlineOf = %s", dl)
	}
}

func TestTimeoutUntilGivenUpAtTheStepDeadline(t *testing.T) {
	t.Parallel()
	h := sagatest.New(t, tripDefinition(), sagatest.Data(trip{Traveller: "bob"}))
	h.Start()
	h.Expect("book-flight", sagatest.Forward)
	d := h.TimeoutUntilGivenUp("book-flight")
	if !h.Now().Equal(h.DeadlineOf("book-flight")) || d.Journal[0].Event != saga.JournalTimeout {
		t.Fatalf("given up at +%s by %q, want its deadline %s", h.Elapsed(), d.Journal[0].Event, h.DeadlineOf("book-flight"))
	}
	if got := h.Unexpected(); len(got) != 1 || got[0].Action != message.Query {
		t.Fatalf("left to expect: %+v; want only the step's query", got)
	}
	h.Expect("book-flight", sagatest.Query)
	h.QueriesUnanswered("book-flight")
	if got := h.Unexpected(); len(got) != 1 || got[0].Action != message.Compensate {
		t.Fatalf("left to expect: %+v; want only the step's compensation", got)
	}
	h.Expect("book-flight", sagatest.Compensate)
	h.Succeed(nil)
	h.ExpectState(saga.Compensated)
}

func TestDataAndSecretOptions(t *testing.T) {
	t.Parallel()
	a := sagatest.New(t, tripDefinition(), sagatest.Data(json.RawMessage(`{"traveller":"x"}`)), sagatest.Secret([]byte("s1")))
	b := sagatest.New(t, tripDefinition(), sagatest.Data([]byte(`{"traveller":"x"}`)), sagatest.Secret([]byte("s2")))
	a.Start()
	b.Start()
	ca, cb := a.Expect("book-flight", sagatest.Forward), b.Expect("book-flight", sagatest.Forward)
	if string(ca.Payload) != `{"traveller":"x"}` || string(cb.Payload) != string(ca.Payload) {
		t.Fatalf("payloads %s, %s", ca.Payload, cb.Payload)
	}
	if ca.MessageID == cb.MessageID {
		t.Fatal("different secrets, same command id")
	}
	if ca.AggregateID != "aggregate-1" {
		t.Fatalf("aggregate %q", ca.AggregateID)
	}
	var tr trip
	a.DecodeData(&tr)
	if tr.Traveller != "x" {
		t.Fatalf("data %+v", tr)
	}
}

func TestDeliverReturnsErrors(t *testing.T) {
	t.Parallel()
	h := newOrder(t)
	h.Start()
	c := h.Expect(reserve, sagatest.Forward)
	stray := &message.Reply{MessageID: uuid.New(), InReplyTo: uuid.New(), SagaID: c.SagaID, Step: reserve, Action: message.Forward, Outcome: message.Success}
	if _, err := h.Deliver(saga.Event{Kind: saga.EventReply, Reply: stray}); !errors.Is(err, saga.ErrStrayReply) {
		t.Fatalf("stray reply: %v", err)
	}
	if _, err := h.Operate(saga.Operator{Action: saga.ActionResolve, Outcome: saga.Completed}); !errors.Is(err, saga.ErrRefused) {
		t.Fatalf("resolve of a running saga: %v", err)
	}
	h.ExpectState(saga.Running)
	if len(h.Journal()) != 1 {
		t.Fatalf("journal %q after refused events", h.Events())
	}
}

// fakeT records the first failure and stops the goroutine, as testing does.
type fakeT struct{ msg string }

func (*fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// failure runs f with a fake TB and returns its failure message ("" if none).
func failure(f func(t sagatest.TB)) string {
	ft := &fakeT{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ft)
	}()
	<-done
	return ft.msg
}

func TestFailureMessages(t *testing.T) {
	t.Parallel()
	rows := []struct {
		name string
		f    func(t sagatest.TB)
		want []string // substrings of the message
	}{
		{"wrong command", func(t sagatest.TB) {
			h := newOrder(t)
			h.Start()
			h.Expect(coupon, sagatest.Forward)
		}, []string{"place-order saga", "Expect: want a forward command for step \"lock-coupon\", got forward for step \"reserve-inventory\" (attempt 1)", "at step \"reserve-inventory\" (running)"}},
		{"no command", func(t sagatest.TB) {
			h := newOrder(t)
			h.Start()
			h.Expect(reserve, sagatest.Forward)
			h.Expect(coupon, sagatest.Forward)
		}, []string{"none was sent since the last one expected (journal: started reserve-inventory)"}},
		{"unknown step", func(t sagatest.TB) {
			h := newOrder(t)
			h.Step("ship")
		}, []string{`place-order has no step "ship" (its steps: reserve-inventory, lock-coupon, charge-payment, create-shipment, award-points, confirm-stock)`}},
		{"unexpected commands left", func(t sagatest.TB) {
			h := newOrder(t)
			h.Start()
			h.ExpectNoCommand()
		}, []string{"1 commands sent and not expected: reserve-inventory forward #1"}},
		{"journal mismatch", func(t sagatest.TB) {
			h := newOrder(t)
			h.Start()
			h.Fail("x")
			h.ExpectJournal("started", "step succeeded")
		}, []string{"ExpectJournal: the journal since entry 1 is\n\tstarted reserve-inventory\n\tstep failed reserve-inventory\nwant"}},
		{"state", func(t sagatest.TB) {
			h := newOrder(t)
			h.Start()
			h.ExpectState(saga.Completed)
		}, []string{"the saga is running, want completed"}},
		{"nothing awaited", func(t sagatest.TB) {
			h := newOrder(t)
			h.Start()
			h.Fail("x")
			h.Succeed(nil)
		}, []string{"compensated", "Succeed: no command awaits an answer"}},
		{"no timer", func(t sagatest.TB) {
			newOrder(t).FireNextTimer()
		}, []string{"not started", "FireNextTimer: the saga has no wake-up"}},
		{"after the pivot nothing is given up", func(t sagatest.TB) {
			h := newOrder(t)
			toPayment(h)
			h.Succeed(nil)
			h.TimeoutUntilGivenUp(shipment)
		}, []string{`TimeoutUntilGivenUp("create-shipment"): the step runs after the pivot "charge-payment"`}},
		{"a command that cannot be built", func(t sagatest.TB) {
			h := newOrder(t, sagatest.Data(map[string]any{"order_id": "o"}))
			h.Start()
		}, []string{"start event at", "customer is required"}},
		{"no such attempt", func(t sagatest.TB) {
			h := newOrder(t)
			h.Start()
			h.AnswerEarlier(3, sagatest.Succeeded(nil))
		}, []string{`step "reserve-inventory" forward was sent 1 times, there is no attempt 3`}},
		{"bad data", func(t sagatest.TB) {
			newOrder(t, sagatest.Data(json.RawMessage(`{`)))
		}, []string{"place-order saga: Data: not JSON"}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			msg := failure(row.f)
			if msg == "" {
				t.Fatal("did not fail")
			}
			for _, w := range row.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q\nlacks %q", msg, w)
				}
			}
		})
	}
}

// TestCheckDecisionCatchesBrokenDecisions feeds CheckDecision decisions
// that break each promise.
func TestCheckDecisionCatchesBrokenDecisions(t *testing.T) {
	t.Parallel()
	def := placeOrder()
	// A real decision to break: the payment's failure, which sends the
	// coupon's compensation.
	h := newOrder(t)
	toPayment(h)
	prev := h.Instance()
	cmd, _ := h.Awaited()
	ev := saga.Event{Kind: saga.EventReply, At: h.Now(), Reply: &message.Reply{MessageID: uuid.New(), InReplyTo: cmd.MessageID, SagaID: prev.ID,
		Step: payment, Action: message.Forward, Outcome: message.Failure, Reason: "declined"}}
	good, err := saga.Decide(def, prev, ev)
	if err != nil {
		t.Fatal(err)
	}
	if msg := failure(func(tb sagatest.TB) { sagatest.CheckDecision(tb, def, prev, ev, good) }); msg != "" {
		t.Fatalf("a good decision fails: %s", msg)
	}
	clone := func(d saga.Decision) saga.Decision {
		d.Next.Steps = append([]saga.StepState(nil), d.Next.Steps...)
		d.Send = append([]saga.Outgoing(nil), d.Send...)
		d.Journal = append([]saga.JournalEntry(nil), d.Journal...)
		return d
	}
	rows := []struct {
		name   string
		prev   func(in *saga.Instance)
		break_ func(d *saga.Decision)
		want   string
	}{
		{"version", nil, func(d *saga.Decision) { d.Next.Version += 2 }, "version went 3 -> 6, want +1"},
		{"two commands", nil, func(d *saga.Decision) { d.Send = append(d.Send, d.Send[0]) }, "2 commands sent by one decision"},
		{"unchanged but sends", nil, func(d *saga.Decision) { d.Changed = false; d.Next = prev }, "nothing changed, yet 1 commands are sent"},
		{"wrong participant", nil, func(d *saga.Decision) { d.Send[0].Participant = "inventory" }, `goes to "inventory", want its participant "coupon"`},
		{"compensation out of order", nil, func(d *saga.Decision) {
			d.Next.Steps[1].State, d.Next.Steps[1].DueAt = saga.StepSucceeded, nil
			d.Next.Steps[0].State, d.Next.Steps[0].DueAt = saga.StepCompensating, good.Next.Steps[1].DueAt
			d.Send[0].Command.Step = reserve
			d.Send[0].Participant = orderapi.Inventory
			d.Send[0].Command.MessageID = prev.CommandID(reserve, message.Compensate, 1)
			d.Next.Steps[0].AwaitID = d.Send[0].Command.MessageID
		}, `a compensation for step "reserve-inventory" while the later step "lock-coupon" is succeeded`},
		{"compensating after the pivot", func(in *saga.Instance) { in.Steps[2].State = saga.StepSucceeded },
			nil, `the saga is compensating after its pivot "charge-payment" succeeded`},
		{"terminal moved", func(in *saga.Instance) { in.State = saga.Compensated }, nil, "the saga was compensated (terminal) and moved to compensating"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			p := prev
			p.Steps = append([]saga.StepState(nil), prev.Steps...)
			d := clone(good)
			if row.prev != nil {
				row.prev(&p)
				for i := range d.Journal {
					d.Journal[i].From = p.State
				}
			}
			if row.break_ != nil {
				row.break_(&d)
			}
			msg := failure(func(tb sagatest.TB) { sagatest.CheckDecision(tb, def, p, ev, d) })
			if !strings.Contains(msg, row.want) || !strings.Contains(msg, "reply failure to step \"charge-payment\" forward") {
				t.Fatalf("message %q\nwant %q, naming the saga and event", msg, row.want)
			}
		})
	}
}

// TestPackageDocExample is the package documentation's example, kept
// compiling and passing.
func TestPackageDocExample(t *testing.T) {
	t.Parallel()
	def, _ := steps.PlaceOrder()
	h := sagatest.New(t, def, sagatest.Data(steps.Order{OrderID: "o-1", Customer: "alice", SKU: "apple", Qty: 1, AmountCents: 1999}))
	h.Start()
	h.Expect("reserve-inventory", sagatest.Forward)
	h.Succeed(orderapi.ReserveInventoryResult{ReservationID: "r-1"})
	h.Expect("lock-coupon", sagatest.Forward)
	h.Succeed(nil)
	h.Expect("charge-payment", sagatest.Forward)
	h.Fail("payment_declined")
	h.Expect("lock-coupon", sagatest.Compensate)
	h.Succeed(nil)
	h.Expect("reserve-inventory", sagatest.Compensate)
	h.Succeed(nil)
	h.ExpectState(saga.Compensated)
}
