// Package participants is the participant SDK: it runs a service's step
// handlers behind the wire contract's barrier, in the service's own
// Postgres transaction, and answers through the service's own outbox.
//
// Create a participant, register a forward and a compensate handler per
// step, apply its migrations, and run it:
//
//	p, err := participants.New(pool, &participants.Config{
//		Name:    "hotel", // consumes hotel.commands; SDK tables in schema "hotel"
//		Brokers: []string{"127.0.0.1:9092"},
//	})
//	book := func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
//		b, err := participants.Decode[booking](cmd) // a bad payload: failure "invalid_payload"
//		if err != nil {
//			return participants.Result{}, err
//		}
//		tag, err := tx.Exec(ctx, `UPDATE hotel.rooms SET held_by = $1
//			WHERE room = $2 AND held_by IS NULL`, cmd.SagaID, b.Room)
//		if err != nil {
//			return participants.Result{}, err // rolled back, processed again
//		}
//		if tag.RowsAffected() == 0 {
//			return participants.Fail("room_taken"), nil // the saga compensates
//		}
//		return participants.Success(map[string]string{"room": b.Room}), nil
//	}
//	cancel := func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
//		_, err := tx.Exec(ctx, `UPDATE hotel.rooms SET held_by = NULL WHERE held_by = $1`, cmd.SagaID)
//		return participants.Success(nil), err
//	}
//	// A handler takes a batch of commands; One adapts a function of one.
//	err = p.Handle("book-room", participants.One(book), participants.One(cancel)) // nil compensate: pivot and later steps
//	sets, err := p.Migrations()               // outbox, inbox, barrier
//	_, err = migrations.Migrate(ctx, pool, sets...)
//	err = p.Run(ctx) // until ctx ends, then finishes the work in flight
//
// A handler writes through the transaction it is given and returns
// [Success] (its payload is merged into the saga's data), [Fail] (a
// definite business "no": its writes are rolled back) or [RetryLater]
// (transient: nothing is recorded and the orchestrator sends again). A
// returned error is an infrastructure problem: the transaction rolls back
// and the command is processed again. Keep a handler's effects in its
// transaction: it may run and be rolled back (a copy of a command found
// decided in the same round trip, a batch run again), and only what
// commits counts. A write whose result the handler does not need (an
// insert that records the booking) can go through [ExecLater]: it is sent
// with the COMMIT that records the barrier rows and the replies, so the
// command costs one round trip to Postgres instead of two; if it fails
// there, the batch runs again with nothing deferred and the handler gets
// the error from the same call.
//
// # Answer later
//
// A forward handler whose work outlasts a command (a call to an outside
// system, a human's check) records the work to do in its transaction and
// returns [Accepted]: its writes are kept, the barrier records the forward
// as accepted and the orchestrator stops re-sending, waiting up to the
// step's accepted deadline. Copies of the command are answered accepted
// again, and a query "accepted". Later, from any code path, settle the
// step by its reference ([RefOf] the command: the barrier key, saga id and
// step; [Ref.String] stores it) in your own transaction:
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		// ... your own writes: the outcome of the work ...
//		return p.Complete(ctx, tx, ref, map[string]string{"charge_id": id}) // or p.Fail(ctx, tx, ref, "declined")
//	})
//
// Complete and Fail record the outcome in the barrier and enqueue the
// final reply in that transaction, so the step is settled exactly when
// your writes commit. A compensation that meets the accepted step is held
// (answered retry) until it is settled; one that meets a step answered
// [AcceptedCancellable] settles it as failed (reason [ReasonCancelled])
// and is empty, and a later Complete or Fail returns [ErrCancelled]: undo
// or abandon the work instead of reporting it. Settling a step that is not
// accepted returns [ErrSettled] (or [ErrUnknownRef]). Package
// participants/external does this for a step that calls an outside system:
// the intent recorded in the handler's transaction, the call made after
// the commit with an idempotency key, retried, bounded and behind a
// circuit, and the step settled by the provider's answer.
// [Participant.OnAcceptedQuery] registers a step's hook for the
// orchestrator's query of an accepted step (a lookup at the provider).
//
// A [Handler] gets all the first-time forwards of its step in a consumed
// batch at once, so it can do them with one set-based statement; it only
// has to get the plain case right: unless every [Result] is a Success, the
// SDK undoes the batch's writes and runs each command alone.
// [WithBatch] pairs a function of one command with such a set-based form;
// [AnswerBatch] builds its results.
//
// Test a participant's handlers behind the real barrier with package
// participanttest, and check a participant (in any language) against the
// wire contract with package conformance.
//
// The SDK takes care of the rest of the wire contract: each (saga, step,
// action) executes at most once and every copy gets the recorded answer;
// a compensation that finds no forward is empty; a forward arriving after
// its compensation is refused; the query action is answered from the
// barrier; a record that cannot be decoded, or names a step never
// registered, is dead-lettered. The reference participants in the
// subfolders (inventory, coupon, payment, shipping, points) are complete
// examples.
//
// How it works (the tables it owns, the barrier protocol, the failure
// windows it covers): docs/DESIGN.md, "Inside the packages", package
// participants.
package participants
