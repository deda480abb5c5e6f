package history

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sagaflow/sagaflow/internal/bench"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/saga/sagatest"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// shape is one template saga: a real run of a real definition through
// saga.Decide (package sagatest), which the fill copies under new ids,
// keys and times.
type shape struct {
	name    string
	weight  int // share among the finished (or the running) shapes
	running bool
	in      saga.Instance
	journal []saga.JournalEntry
	start   time.Time
}

// shapes drives the place-order saga and the bench's generic saga through
// the outcomes a production history holds: mostly completed, some
// compensated at different steps, some with retries, and running sagas
// waiting on a step.
func shapes() ([]shape, error) {
	po, err := steps.PlaceOrder()
	if err != nil {
		return nil, err
	}
	gen, err := bench.GenericDefinition(3)
	if err != nil {
		return nil, err
	}
	order := steps.Order{OrderID: "order-0", Customer: "customer-042", SKU: "sku-fig", Qty: 3, AmountCents: 18684}
	var out []shape
	add := func(name string, weight int, running bool, def *saga.Def, data any, script func(h *sagatest.Harness)) error {
		var failure error
		func() {
			defer func() {
				if r := recover(); r != nil {
					failure = fmt.Errorf("history: template %s: %v", name, r)
				}
			}()
			h := sagatest.New(sagatest.PanicT{}, def, sagatest.Data(data))
			h.Start()
			script(h)
			out = append(out, shape{name: name, weight: weight, running: running, in: h.Instance(), journal: h.Journal(), start: sagatest.DefaultStart})
		}()
		return failure
	}
	succeed := func(h *sagatest.Harness, step string, payload any) {
		h.Advance(40 * time.Millisecond)
		h.Expect(step, sagatest.Forward)
		h.Succeed(payload)
	}
	forwardAll := func(h *sagatest.Harness) {
		succeed(h, orderapi.StepReserveInventory, orderapi.ReserveInventoryResult{ReservationID: "ca69d35b-4598-43f5-8601-2c0b69e22e09"})
		succeed(h, orderapi.StepLockCoupon, orderapi.LockCouponResult{DiscountCents: 0})
		succeed(h, orderapi.StepChargePayment, orderapi.ChargePaymentResult{PaymentID: "167"})
	}
	tail := func(h *sagatest.Harness) {
		succeed(h, orderapi.StepCreateShipment, orderapi.CreateShipmentResult{ShipmentID: "5ec908d1-a789-437d-86a5-8597d8b6cca2"})
		succeed(h, orderapi.StepAwardPoints, orderapi.AwardPointsResult{Balance: 186})
		succeed(h, orderapi.StepConfirmStock, orderapi.ConfirmStockResult{Sold: 3})
	}
	undo := func(h *sagatest.Harness, steps ...string) {
		for _, s := range steps {
			h.Expect(s, sagatest.Compensate)
			h.Succeed(nil)
		}
	}
	errs := []error{
		add("order-completed", 70, false, po, order, func(h *sagatest.Harness) { forwardAll(h); tail(h) }),
		add("order-completed-after-retries", 6, false, po, order, func(h *sagatest.Harness) {
			forwardAll(h)
			h.Expect(orderapi.StepCreateShipment, sagatest.Forward)
			h.Retry("carrier busy")
			h.FireNextTimer()
			h.Expect(orderapi.StepCreateShipment, sagatest.Forward)
			h.Succeed(orderapi.CreateShipmentResult{ShipmentID: "5ec908d1-a789-437d-86a5-8597d8b6cca2"})
			succeed(h, orderapi.StepAwardPoints, orderapi.AwardPointsResult{Balance: 186})
			succeed(h, orderapi.StepConfirmStock, orderapi.ConfirmStockResult{Sold: 3})
		}),
		add("order-payment-declined", 10, false, po, order, func(h *sagatest.Harness) {
			succeed(h, orderapi.StepReserveInventory, orderapi.ReserveInventoryResult{ReservationID: "r-1"})
			succeed(h, orderapi.StepLockCoupon, orderapi.LockCouponResult{})
			h.Expect(orderapi.StepChargePayment, sagatest.Forward)
			h.Fail("payment_declined")
			undo(h, orderapi.StepLockCoupon, orderapi.StepReserveInventory)
		}),
		add("order-out-of-stock", 4, false, po, order, func(h *sagatest.Harness) {
			h.Expect(orderapi.StepReserveInventory, sagatest.Forward)
			h.Fail("out_of_stock")
		}),
		add("order-payment-unknown", 1, false, po, order, func(h *sagatest.Harness) {
			succeed(h, orderapi.StepReserveInventory, orderapi.ReserveInventoryResult{ReservationID: "r-1"})
			succeed(h, orderapi.StepLockCoupon, orderapi.LockCouponResult{})
			h.Expect(orderapi.StepChargePayment, sagatest.Forward)
			h.TimeoutUntilGivenUp(orderapi.StepChargePayment)
			h.QueriesUnanswered(orderapi.StepChargePayment)
		}),
		add("generic-completed", 9, false, gen, bench.GenericData{ID: "item-0"}, func(h *sagatest.Harness) {
			for i := 1; i <= 3; i++ {
				succeed(h, bench.GenericStep(i), nil)
			}
		}),
		add("order-awaiting-payment", 2, true, po, order, func(h *sagatest.Harness) {
			succeed(h, orderapi.StepReserveInventory, orderapi.ReserveInventoryResult{ReservationID: "r-1"})
			succeed(h, orderapi.StepLockCoupon, orderapi.LockCouponResult{})
		}),
		add("order-shipping-retried", 1, true, po, order, func(h *sagatest.Harness) {
			forwardAll(h)
			h.Expect(orderapi.StepCreateShipment, sagatest.Forward)
			h.Retry("carrier busy")
		}),
		add("generic-running", 1, true, gen, bench.GenericData{ID: "item-0"}, func(h *sagatest.Harness) {
			succeed(h, bench.GenericStep(1), nil)
		}),
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	for _, s := range out {
		if s.in.State.Terminal() == s.running {
			return nil, fmt.Errorf("history: template %s ended %s, want running=%v", s.name, s.in.State, s.running)
		}
	}
	return out, nil
}

// row is a template as the fill's SQL takes it.
type row struct {
	Name        string          `json:"name"`
	Type        string          `json:"type"`
	Version     int             `json:"version"`
	Changes     int64           `json:"changes"` // the saga row's version
	State       string          `json:"state"`
	CurrentStep string          `json:"current_step"`
	Data        json.RawMessage `json:"data"`
	Steps       json.RawMessage `json:"steps"`
	Duration    float64         `json:"duration_s"` // start to finish (or to the last change)
	Wakeup      *float64        `json:"wakeup_s"`   // running: next wake-up after the start
	Journal     []journalRow    `json:"journal"`
}

type journalRow struct {
	Offset  float64 `json:"offset_s"`
	Event   string  `json:"event"`
	From    string  `json:"from_state"`
	To      string  `json:"to_state"`
	Step    string  `json:"step"`
	Action  string  `json:"action"`
	HasMsg  bool    `json:"has_message"`
	Actor   string  `json:"actor"`
	Reason  string  `json:"reason"`
	Ignored bool    `json:"ignored"`
}

func (s shape) row() (row, error) {
	stepsJSON, err := json.Marshal(s.in.Steps)
	if err != nil {
		return row{}, fmt.Errorf("history: template %s: steps: %w", s.name, err)
	}
	r := row{
		Name: s.name, Type: s.in.Type, Version: s.in.DefVersion, Changes: s.in.Version, State: string(s.in.State),
		CurrentStep: s.in.CurrentStep(), Data: s.in.Data, Steps: stepsJSON,
		Duration: s.in.UpdatedAt.Sub(s.start).Seconds(),
	}
	if w := s.in.NextWakeup(); w != nil && s.running {
		// A running copy waits a day: the history does not wake the timer
		// loop of an orchestrator measured beside it.
		d := w.Sub(s.start).Seconds() + 86400
		r.Wakeup = &d
	}
	for _, e := range s.journal {
		r.Journal = append(r.Journal, journalRow{
			Offset: e.At.Sub(s.start).Seconds(), Event: e.Event, From: string(e.From), To: string(e.To),
			Step: e.Step, Action: e.Action, HasMsg: e.MessageID != nil, Actor: e.Actor, Reason: e.Reason, Ignored: e.Ignored,
		})
	}
	return r, nil
}
