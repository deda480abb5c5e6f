// Package sagatest tests saga definitions without Postgres or Kafka: a
// [Harness] drives one saga of a built definition through [saga.Decide],
// the same pure state machine the engine runs, with the test playing the
// participants (scripted answers), the timer loop (a clock the test moves)
// and the operator. Decide is deterministic, so a test is exact: no
// sleeps, no polling, the same command ids and backoffs on every run.
//
//	func TestPlaceOrder(t *testing.T) {
//		def, _ := steps.PlaceOrder()
//		h := sagatest.New(t, def, sagatest.Data(steps.Order{OrderID: "o-1", Customer: "alice", SKU: "apple", Qty: 1, AmountCents: 1999}))
//		h.Start()
//		h.Expect("reserve-inventory", sagatest.Forward)
//		h.Succeed(orderapi.ReserveInventoryResult{ReservationID: "r-1"})
//		h.Expect("lock-coupon", sagatest.Forward)
//		h.Succeed(nil)
//		h.Expect("charge-payment", sagatest.Forward)
//		h.Fail("payment_declined")
//		h.Expect("lock-coupon", sagatest.Compensate)
//		h.Succeed(nil)
//		h.Expect("reserve-inventory", sagatest.Compensate)
//		h.Succeed(nil)
//		h.ExpectState(saga.Compensated)
//	}
//
// # Commands and answers
//
// [Harness.Start] sends the first command. Every command the saga sends is
// queued; [Harness.Expect] takes the oldest and asserts its step and
// action, [Harness.ExpectSends] a command and its re-sends,
// [Harness.ExpectNoCommand] that none is left; [Harness.Sent] lists all.
// [Harness.Succeed], [Harness.Fail] and [Harness.Retry] answer the command
// the saga awaits ([Harness.Awaited]); [Harness.Reply] answers any command
// it sent and [Harness.AnswerEarlier] an earlier send of the awaited one
// (a slow participant), [Harness.Redeliver] repeats the last reply.
// [Harness.Accept] answers the awaited forward accepted ([AcceptedLater]:
// the participant settles it later); [Harness.Succeed] or [Harness.Fail]
// then gives its final answer, and [Harness.Advance] past the step's
// accepted deadline drives what follows (a query, or a re-send after the
// pivot). An
// answer the saga no longer awaits is journaled as a late reply and
// ignored, as in production. [Harness.Operate] applies an operator action
// and [Harness.Deliver] any event, returning Decide's error instead of
// failing the test.
//
// # Groups, events and cancel
//
// A parallel group's members are sent by one decision:
// [Harness.ExpectTogether] takes their commands and asserts that, and
// [Harness.Answer] answers the command a named step awaits
// ([Harness.AwaitedBy]), in any order. [Harness.SendEvent] sends an
// external event (its refusal, a *saga.EventError, is returned; a
// duplicate event_id returns a decision with Duplicate set) and
// [Harness.Cancel] the client's cancel (a refusal is returned).
// [Harness.ExpectStepState] asserts steps' states (skipped, waiting) and
// [Harness.CompletionOrder] lists the steps in the order they succeeded,
// which compensation reverses.
//
// # Time
//
// The clock starts at [DefaultStart] (see [StartAt]) and moves only when
// the test says. Answers happen at the current time. [Harness.Advance]
// moves it and fires the saga's timer at each wake-up on the way (step
// timeouts, ends of backoffs, deadlines), as a punctual timer loop would;
// [Harness.FireNextTimer] jumps to the next wake-up and fires it;
// [Harness.FireTimers] fires what is due now. A timeout is not a failure:
// the same action is re-sent after the backoff, and only an answer to the
// latest send is taken (one to an earlier send is a late reply: the
// participant's barrier answers the latest with the same outcome).
// [Harness.TimeoutUntilGivenUp] plays a participant that never
// answers a step until the saga gives it up at its deadline
// ([Harness.DeadlineOf]): before the pivot it is then compensated, at the
// pivot the saga is failed.
//
// # Assertions
//
// [Harness.State], [Harness.Step], [Harness.Instance] and
// [Harness.DecodeData] show the saga; [Harness.Journal] and
// [Harness.Events] its history, [Harness.ExpectJournal] asserts the
// entries since its last call. After every event the harness runs
// [CheckDecision]: versions move by one, at most one command per decision,
// nothing is compensated once the pivot succeeded, compensations run in
// reverse order, terminal states absorb every event but an operator's
// resolve, and so on. A failure names the saga, its clock, its state and
// step, and the event.
//
// The harness takes a [TB]: a *testing.T, B or F, or [PanicT] outside a
// test (the examples use it).
package sagatest
