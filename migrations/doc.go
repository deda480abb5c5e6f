// Package migrations applies the embedded, numbered SQL of sagaflow's
// tables, and a service's own.
//
// Build the sets a process needs and apply them at start:
//
//	//go:embed sql/*.up.sql
//	var sqlFiles embed.FS
//
//	sets, err := migrations.Participant("hotel") // outbox, inbox, barrier
//	own, err := migrations.FromEmbedded("hotel", "hotel", sqlFiles, "sql")
//	applied, err := migrations.Migrate(ctx, pool, append(sets, own...)...)
//
// A [Set] is a named, ordered list of NNN_name.up.sql files applied into
// one Postgres schema (the SQL names it {{schema}}). [Orchestrator]
// returns the sets of the orchestrator's schema (messaging: outbox, inbox,
// dead letters and the operators' audit; orchestrator: sagas, journal and
// timers), [Participant] those of a participant's schema (messaging and
// barrier); [FromFS] and [FromEmbedded] build a set from a service's own
// files.
//
// [Migrate] applies every missing version, each in its own transaction,
// under a session advisory lock, so processes starting at once apply each
// version exactly once; the history is the schema_migrations table of each
// schema. [History] lists what was applied and [Pending] counts what is
// missing (the orchestrator's /readyz uses it). A file whose first line
// is [NoTransactionMarker] runs its statements one by one outside a
// transaction instead, for CREATE INDEX CONCURRENTLY on a large table
// (every statement must be safe to repeat). Run migrations at start
// (or with `orchestrator migrate`), never inside a caller's transaction.
// Versions need not be contiguous, only unique within a set: they apply in
// order, and a missing lower version is applied after higher ones.
package migrations
