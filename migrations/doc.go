// Package migrations applies the embedded, numbered SQL of sagaflow's
// tables. A [Set] is a named, ordered list of NNN_name.up.sql files applied
// into one Postgres schema (the SQL names it {{schema}}): [Orchestrator]
// returns the sets of the orchestrator's schema (messaging: outbox, inbox,
// dead_letters and ops_audit; orchestrator: sagas, journal and timers), [Participant] those the
// participant SDK needs in each participant's own schema (messaging and
// barrier), and [FromFS] builds a set from a participant's own files.
//
// [Migrate] applies every missing version, each in its own transaction,
// while holding a session advisory lock, so processes starting at once
// apply each version exactly once; the history is the schema_migrations
// table of each schema. [History] lists what was applied and [Pending]
// counts what is missing (the orchestrator's /readyz uses it). Migrations
// run at start and by `orchestrator migrate`; never inside a caller's
// transaction.
//
// Versions need not be contiguous, only unique within a set: they apply in
// order, and a missing lower version is applied after higher ones.
package migrations
