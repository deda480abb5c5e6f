// Package dlq repairs messages that could not be delivered: the dead
// letters an inbox consumer set aside (kept in the dead_letters table of
// its schema beside the <topic>.dlq record) and the outbox rows a relay
// parked dead after its publish attempts ran out. It works on any schema
// the messaging migrations created: the orchestrator's and each
// participant's.
//
// List what is dead, fix the cause, then send it through again, audited:
//
//	s, err := dlq.New(pool, "inventory", "inventory.commands")
//	dead, total, err := s.List(ctx, dlq.Filter{Topic: "inventory.commands", Match: "invalid_payload"})
//	ids, err := s.Redrive(ctx, []int64{dead[0].ID}, dlq.Audit{Actor: "alice", Reason: "fixed the payload bug"})
//
//	rows, err := s.DeadOutbox(ctx, 0, 50) // outbox rows parked dead
//	ids, err = s.Requeue(ctx, []int64{rows[0].ID}, dlq.Audit{Actor: "alice", Reason: "topic created"})
//
// A redrive puts the original record (topic, key, value, headers, message
// id) back into the same schema's outbox, in one transaction with the mark
// on the dead letter and a row of the ops_audit table; the relay publishes
// it and it takes the normal consumer path, so it is handled once. A dead
// letter is redriven at most once; [Store.RedriveMatching] redrives every
// one a [Filter] selects. A requeue makes dead outbox rows due again
// ([Store.RequeueAll] for all). Nothing here deletes a dead letter or an
// outbox row; [Store.AuditLog] lists the repairs. The same operations are
// behind `orchestrator dlq` and the HTTP API's /dlq and /outbox/dead.
//
// Why a redrive keeps the guarantees: docs/DESIGN.md, "Inside the
// packages", package inbox/dlq.
//
// A redrive publishes only to the topics the schema's consumer reads (given
// to New): a dead letter naming any other topic is refused with
// ErrTopicNotConsumed, and a bulk redrive that matches one redrives nothing.
package dlq
