// Package saga defines sagas in Go and decides their every move.
//
// Define a saga over its data type, build it (the pivot rules are checked
// there) and register it; package orchestrator's Engine starts and runs
// the registered sagas over Postgres:
//
//	type Transfer struct {
//		From, To string
//		Cents    int64
//	}
//
//	def, err := saga.Definition[Transfer]{
//		Name: "transfer",
//		Steps: []saga.Step[Transfer]{
//			{Name: "debit", Participant: "ledger", Kind: saga.Compensable,
//				Command: debit, Compensation: refund, Timeout: 5 * time.Second},
//			{Name: "credit", Participant: "ledger", Kind: saga.Pivot, Command: credit},
//			{Name: "notify", Participant: "mailer", Kind: saga.Retryable, Command: notify},
//		},
//	}.Build()
//	reg := saga.NewRegistry()
//	err = reg.Register(def)
//
//	eng, err := orchestrator.NewEngine(pool, reg, &orchestrator.EngineConfig{Schema: "sagaflow"})
//	in, created, err := eng.Start(ctx, orchestrator.StartRequest{
//		Type: "transfer", IdempotencyKey: "tx-1", AggregateID: "alice",
//		Data: Transfer{From: "alice", To: "bob", Cents: 500},
//	})
//	// or eng.StartTx(ctx, tx, req), inside the caller's own transaction
//
// A step's Command (and Compensation) builds the payload sent to its
// participant on "<prefix><participant>.commands"; OnSuccess merges the
// participant's answer into the saga's data. Package saga does no I/O: it
// imports neither Postgres, Kafka nor OpenTelemetry. Package orchestrator
// runs the engine with its reply consumer, relay and timer loop; package
// saga/sagatest drives a definition through every answer, timeout and
// operator action in a unit test, without Postgres or Kafka.
//
// # Definitions
//
// A [Definition] lists steps, each with a stable external name, a
// participant, a [Kind] ([Compensable], [Pivot] or [Retryable]), builders,
// a timeout and a [RetryPolicy]. [Definition.Build] checks the pivot rules
// (at most one pivot, a compensation for every step before it and none at
// or after it, only retryable steps after it, unique names) and returns a
// *[DefinitionError] naming the saga and step otherwise. A [Registry]
// holds built definitions by name and version; [Registry.Override] changes
// per-step timeouts and retry policies from configuration.
//
// Steps sharing a Group (see [Parallel]) run at once; a step's When
// predicate skips it; a [Wait] step waits for a named external event
// (Event, Deadline, OnDeadline, OnEvent) sent with an [External] event,
// kept when it comes early. The rules are checked by Build, with errors
// naming the saga and group.
//
// # Running sagas
//
// Every state change goes through the pure function [Decide] (definition,
// instance, event in; next instance, commands and journal entries out).
// The orchestrator's engine wraps it in one Postgres transaction per
// event. A saga is [Running], then [Completed], or [Compensating] then
// [Compensated]; or [Failed], which needs an operator ([Operator]: retry,
// compensate, resolve); a saga that has sent [Definition] MaxSends
// commands stops there too. The saga's client may cancel it ([Cancel])
// until its pivot is sent. A reply is taken only when it answers the
// latest send of its step's action; an answer to an earlier send is
// journaled as late and ignored.
//
// How it works (the transition table, timeouts and deadlines, what it
// guarantees): docs/DESIGN.md, "Inside the packages", package saga.
package saga
