package orchestrator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/saga"
)

func TestDeadClass(t *testing.T) {
	for _, tc := range []struct{ err, want string }{
		{"MESSAGE_TOO_LARGE: The request included a message larger than the max message size the server will accept.", "too_large"},
		{"record too large for the batch", "too_large"},
		{"UNKNOWN_TOPIC_OR_PARTITION: This server does not host this topic-partition.", "unknown_topic"},
		{"TOPIC_AUTHORIZATION_FAILED: Not authorized to access topics: [Topic authorization failed.]", "not_authorized"},
		{"CORRUPT_MESSAGE: This message has failed its CRC checksum", "invalid_record"},
		{"INVALID_RECORD: This record has failed the validation on broker", "invalid_record"},
		{"REQUEST_TIMED_OUT: the request exceeded the user-specified time limit", "timeout"},
		{"context deadline exceeded", "timeout"},
		{"i/o timeout", "timeout"},
		{"broker closed the connection", "other"},
		{"", "other"},
	} {
		if got := DeadClass(tc.err); got != tc.want {
			t.Errorf("DeadClass(%q) = %s, want %s", tc.err, got, tc.want)
		}
	}
	classes := DeadClasses()
	if len(classes) != len(deadClasses)+1 || classes[len(classes)-1] != DeadClassOther {
		t.Errorf("DeadClasses() = %v", classes)
	}
}

// TestBacklogCountsAndKeepsToIndexes: on 5,000 analyzed sagas and an
// outbox with 3,000 sent rows, the backlog counts unsent rows by topic, dead
// rows by class (the SQL classes agree with DeadClass), the oldest
// compensating and flagged saga by type; the gauges follow; and every
// query's plan reads a partial index, never the table.
func TestBacklogCountsAndKeepsToIndexes(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 60*time.Second)
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("orch")))
	m, err := NewMetrics(prometheus.NewRegistry(), "sagaflow")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Millisecond)
	e, err := NewEngine(pool, saga.NewRegistry(), &EngineConfig{Schema: "orch", Metrics: m, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	deadErrors := []string{"MESSAGE_TOO_LARGE: too big", "MESSAGE_TOO_LARGE: too big", "UNKNOWN_TOPIC_OR_PARTITION: no", "TOPIC_AUTHORIZATION_FAILED: no",
		"REQUEST_TIMED_OUT: slow", "broker said no", "CORRUPT_MESSAGE: crc"}
	_, err = pool.Exec(ctx, `
INSERT INTO orch.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, current_step, data, steps, version,
  flag, created_at, updated_at, finished_at)
SELECT gen_random_uuid(), (ARRAY['place-order', 'refund'])[1 + i % 2], 1, 'agg-' || i, 'key-' || i,
  CASE WHEN i % 100 = 0 THEN 'running' WHEN i % 100 = 2 THEN 'compensating' WHEN i % 100 = 4 THEN 'failed' ELSE 'completed' END,
  'charge-payment', '{}', '[]', 3,
  CASE WHEN i % 500 = 0 OR i % 500 = 4 THEN 'retrying beyond threshold' ELSE '' END,
  $1::timestamptz - (i || ' minutes')::interval, $1::timestamptz, CASE WHEN i % 100 IN (0, 2, 4) THEN NULL ELSE $1::timestamptz END
FROM generate_series(1, 5000) AS i`, now)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO orch.outbox (topic, key, value, created_at, dead_at, last_error) SELECT 'payments.commands', 'k', '\x00', now(), now(), e FROM unnest($1::text[]) e`, deadErrors)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, `
INSERT INTO orch.outbox (topic, key, value, sent_at) SELECT 'inventory.commands', 'k', '\x00', now() FROM generate_series(1, 3000);
INSERT INTO orch.outbox (topic, key, value, created_at) SELECT 'payments.commands', 'k', '\x00', now() - interval '90 seconds' FROM generate_series(1, 3);
INSERT INTO orch.outbox (topic, key, value, created_at) SELECT 'shipping.commands', 'k', '\x00', now() - interval '5 seconds' FROM generate_series(1, 2);
ANALYZE orch.sagas; ANALYZE orch.outbox;`)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.Backlog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Outbox) != 2 || b.Outbox[0].Topic != "payments.commands" || b.Outbox[0].Pending != 3 || b.Outbox[1].Pending != 2 ||
		b.Outbox[0].OldestUnsent < 85*time.Second || b.Outbox[0].OldestUnsent > 150*time.Second {
		t.Errorf("outbox by topic %+v; want payments 3 (90 s old), shipping 2", b.Outbox)
	}
	want := map[string]int64{}
	for _, msg := range deadErrors {
		want[DeadClass(msg)]++
	}
	if len(b.DeadByClass) != len(want) {
		t.Errorf("dead by class %v, want %v (DeadClass of each)", b.DeadByClass, want)
	}
	for c, n := range want {
		if b.DeadByClass[c] != n {
			t.Errorf("dead by class %v, want %v (DeadClass of each)", b.DeadByClass, want)
		}
	}
	// compensating: i % 100 = 2, place-order for even i: the oldest is
	// i = 4902 (place-order), 4802... refund never (i even).
	if len(b.OldestCompensating) != 1 || b.OldestCompensating[0].Type != "place-order" || b.OldestCompensating[0].Age != 4902*time.Minute || b.OldestCompensating[0].State != "compensating" {
		t.Errorf("oldest compensating %+v; want place-order 4902 minutes", b.OldestCompensating)
	}
	// flagged open sagas: i = 500k (running) and 500k+4 (failed), all even:
	// place-order, the oldest i = 5000.
	if len(b.OldestFlagged) != 1 || b.OldestFlagged[0].Age != 5000*time.Minute || b.OldestFlagged[0].Flag == "" {
		t.Errorf("oldest flagged %+v; want place-order 5000 minutes", b.OldestFlagged)
	}

	if err := e.refreshGauges(ctx); err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"pending payments", m.outboxTopicPending.WithLabelValues("payments.commands"), 3},
		{"pending shipping", m.outboxTopicPending.WithLabelValues("shipping.commands"), 2},
		{"dead too_large", m.outboxDeadByClass.WithLabelValues("too_large"), 2},
		{"dead other", m.outboxDeadByClass.WithLabelValues("other"), 1},
		{"dead invalid_record", m.outboxDeadByClass.WithLabelValues("invalid_record"), 1},
		{"oldest compensating", m.oldestCompensating.WithLabelValues("place-order"), (4902 * time.Minute).Seconds()},
		{"oldest flagged", m.oldestFlagged.WithLabelValues("place-order"), (5000 * time.Minute).Seconds()},
	} {
		if got := testutil.ToFloat64(g.c); got != g.want {
			t.Errorf("gauge %s = %v, want %v", g.name, got, g.want)
		}
	}
	if n := testutil.CollectAndCount(m.outboxTopicPending); n != 2 {
		t.Errorf("outbox_topic_pending has %d series, want 2 (topics with unsent rows)", n)
	}

	st, err := e.Stats(ctx, 0)
	if err != nil || len(st.Backlog.Outbox) != 2 {
		t.Fatalf("Stats backlog %+v, %v", st.Backlog, err)
	}

	// The SLO count reads the open sagas of a type past its window on
	// sagas_in_flight_idx and sagas_failed_idx, not the type's whole
	// history (sagas_type_created_idx),
	// with the planner's defaults.
	{
		rows, err := pool.Query(ctx, "EXPLAIN "+e.sloBreachSQL(), "place-order", now.Add(-time.Hour), 10001)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if plan := strings.Join(lines, "\n"); strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "sagas_in_flight_idx") || !strings.Contains(plan, "sagas_failed_idx") {
			t.Errorf("the SLO count does not keep to sagas_in_flight_idx and sagas_failed_idx:\n%s", plan)
		}
	}
	topicQ, deadQ, compQ, flagQ := e.backlogSQL()
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for _, set := range []string{"SET LOCAL enable_seqscan = off", "SET LOCAL enable_bitmapscan = off"} {
		if _, err := tx.Exec(ctx, set); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []struct{ name, sql, index string }{
		{"outbox by topic", topicQ, "outbox_unsent_idx"},
		{"dead by class", deadQ, "outbox_dead_idx"},
		{"oldest compensating", compQ, "sagas_compensating_idx"},
		{"oldest flagged", flagQ, "sagas_flagged_idx"},
	} {
		rows, err := tx.Query(ctx, "EXPLAIN "+q.sql)
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		plan := strings.Join(lines, "\n")
		if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, q.index) {
			t.Errorf("%s does not keep to %s:\n%s", q.name, q.index, plan)
		}
		// The oldest of a type is the first entry of its range, found by
		// skipping from type to type, not by reading every entry.
		if (q.sql == compQ || q.sql == flagQ) && (!strings.Contains(plan, "Recursive Union") || strings.Contains(plan, "sagas_in_flight_idx")) {
			t.Errorf("%s does not skip from type to type on its own index:\n%s", q.name, plan)
		}
	}
}
