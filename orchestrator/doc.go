// Package orchestrator runs sagas over Postgres and Kafka: the [Engine]
// (starts, replies, timers, operator actions, reads, reconciliation) and
// the [Service] that wires one orchestrator process around it (the
// consumer of the reply topic through the inbox, the relay of the
// orchestrator's outbox and the timer loop).
//
// Register the saga definitions (package saga), create the service,
// prepare it (migrations and topics) and run it:
//
//	reg := saga.NewRegistry()
//	def, err := steps.PlaceOrderDefinition().Build()
//	err = reg.Register(def)
//
//	svc, err := orchestrator.New(pool, reg, &orchestrator.Config{
//		Brokers: []string{"127.0.0.1:9092"},
//		Engine:  orchestrator.EngineConfig{Schema: "sagaflow"},
//	})
//	err = svc.Prepare(ctx) // applies migrations, creates the topics
//	go svc.Run(ctx)        // replies, relay and timers until ctx ends
//
//	in, created, err := svc.Engine().Start(ctx, orchestrator.StartRequest{
//		Type: "place-order", IdempotencyKey: "order-1001", AggregateID: "order-1001", Data: order,
//	})
//
// An engine alone (no reply consumer, no relay: another process runs
// them) is [NewEngine]; [Engine.StartTx] starts a saga inside the caller's
// own transaction, atomically with its writes:
//
//	eng, err := orchestrator.NewEngine(pool, reg, &orchestrator.EngineConfig{Schema: "sagaflow"})
//	in, created, err := eng.StartTx(ctx, tx, orchestrator.StartRequest{...})
//
// Over Kafka, other services start sagas on the start topic (saga.starts:
// the body of POST /sagas) and send external events on the event topic
// (saga.events: the body of POST /sagas/{id}/events, keyed by saga id),
// both consumed through the inbox by [Service.HandleIntake] and
// dead-lettered with the reason when bad; every end of a saga and every
// flag writes a record to the outcome topic (saga.outcomes, keyed by the
// aggregate id; message.SagaOutcome) through the outbox, in the
// transaction of the transition. The wire contract is docs/conformance.md.
//
// Reading: [Engine.Get] (one saga and its journal), [Engine.List]
// (filters, keyset pagination), [Engine.InFlight], [Engine.Stats];
// [Engine.Operate] and [Engine.OperateMatching] apply operator actions;
// [Engine.Request] applies one or, when [EngineConfig.FourEyes] asks for a
// second person, records a [Proposal] that [Engine.DecideProposal]
// approves or rejects; [Engine.Reconcile] looks for sagas that need one. [Metrics] registers
// the engine's Prometheus metrics.
//
// [Service.Engine] is the engine to start sagas and read them with (package
// api serves it over HTTP); [Service.Ready] reports readiness (Postgres,
// the brokers, no pending migration). Config.Run picks the components, so
// a deployment can split roles across processes.
//
// Several processes may run the same service on one database and consumer
// group: replies are applied with conditional updates, timers are claimed
// with SKIP LOCKED, and the relay publishes only while it holds the
// outbox's advisory lock. Each process keeps the sagas it last wrote
// (Advanced.SagaCache) and applies a batch of replies to them without
// loading them, in one round trip; the conditional update is what makes a
// copy another process outdated harmless. Another engine of the same
// process (an HTTP API's) shares them with [Engine.ShareSagaCache].
// `orchestrator serve` is this package behind the HTTP API, configured from
// a file, the environment and flags. How the
// engine works inside: docs/DESIGN.md, "Inside the packages", package
// orchestrator.
package orchestrator
