// Package orchestrator wires one orchestrator process: the saga engine,
// the consumer of the reply topic (through the inbox), the relay of the
// orchestrator's outbox and the timer loop.
//
// Register the saga definitions, create the service, prepare it (migrations
// and topics) and run it:
//
//	reg := saga.NewRegistry()
//	def, err := steps.PlaceOrderDefinition().Build()
//	err = reg.Register(def)
//
//	svc, err := orchestrator.New(pool, reg, &orchestrator.Config{
//		Brokers: []string{"127.0.0.1:9092"},
//		Engine:  saga.Config{Schema: "sagaflow"},
//	})
//	err = svc.Prepare(ctx) // applies migrations, creates the topics
//	go svc.Run(ctx)        // replies, relay and timers until ctx ends
//
//	in, created, err := svc.Engine().Start(ctx, saga.StartRequest{
//		Type: "place-order", IdempotencyKey: "order-1001", AggregateID: "order-1001", Data: order,
//	})
//
// [Service.Engine] is the engine to start sagas and read them with (package
// api serves it over HTTP); [Service.Ready] reports readiness (Postgres,
// the brokers, no pending migration). Config.Run picks the components, so
// a deployment can split roles across processes.
//
// Several processes may run the same service on one database and consumer
// group: replies are applied with conditional updates, timers are claimed
// with SKIP LOCKED, and the relay publishes only while it holds the
// outbox's advisory lock. `orchestrator serve` is this package behind the
// HTTP API, configured from a file, the environment and flags.
package orchestrator
