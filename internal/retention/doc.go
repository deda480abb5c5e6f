// Package retention deletes what the runtime no longer needs: outbox rows
// already published, inbox (dedupe) rows and participants' barrier rows past
// their windows, the saga and journal rows of sagas that finished long
// ago, dead letters redriven long ago and old entries of the repairs'
// audit.
//
// Every delete is a bounded batch (DELETE ... WHERE id IN (SELECT ... LIMIT
// n)), one statement per transaction, so no lock is held for long and the
// relay, the inbox and the engine keep running beside it. A cycle repeats a
// table's batch until one comes back short, then moves on; cycles run every
// Config.Interval. Saga batches go oldest first, each from the last saga
// the batch before it deleted (keyset on created_at, id), so a cycle does
// not pass again over what it deleted.
//
// # Guarantees
//
//   - Unsent outbox rows are never deleted, whatever their age (only rows
//     with sent_at before the cutoff go; dead rows stay for an operator).
//   - Inbox rows younger than InboxAfter are kept, so a redelivered message
//     inside the window is still caught as a duplicate. InboxAfter must
//     therefore be longer than the longest time a message can be redelivered
//     (the Kafka retention of the consumed topics, or the longest consumer
//     lag you tolerate); the participant barrier keeps protecting the
//     business effect after that, but the orchestrator's dedupe does not.
//   - Only sagas in completed or compensated state whose finished_at is
//     older than FinishedSagaAfter lose their row and journal, unless a
//     journal entry has an actor (an operator's action, a reconciler's
//     repair): those, and failed sagas, wait for FailedSagaAfter (longer).
//     Running and compensating sagas are never purged. A saga row and its
//     journal go in one transaction.
//   - Barrier rows (participants' schemas) go after BarrierAfter, at least
//     InboxAfter: a barrier row is what refuses a forward that arrives after
//     its compensation and answers a re-sent command without executing it
//     again, so it must outlast every redelivery of its command. Holds
//     (participants/holds) settled before the same cutoff go with them; a
//     hold still held is never purged.
//   - Dead letters go DeadLetterAfter after their redrive; open ones (not
//     redriven) are never deleted, but for stray replies' (marked stray:
//     a reply that answers nothing the orchestrator sent), which go
//     StrayDeadLetterAfter after they were dead-lettered. ops_audit entries go after AuditAfter,
//     at least DeadLetterAfter.
//   - The orchestrator's operator_audit rows go after AuditAfter once their
//     saga is deleted (the evidence outlives the saga); four-eyes
//     proposals AuditAfter past their expiry.
//
// Every purged row counts in sagaflow_retention_purged_total{table}, with
// table the qualified name ("<schema>.outbox", "<schema>.inbox",
// "<schema>.barrier", "<schema>.holds", "<schema>.sagas", "<schema>.journal",
// "<schema>.dead_letters", "<schema>.ops_audit", "<schema>.operator_audit",
// "<schema>.operator_proposals").
package retention
