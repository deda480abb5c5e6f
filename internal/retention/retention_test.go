package retention_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/retention"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
)

const wait = 30 * time.Second

func count(t *testing.T, pool *pgxpool.Pool, q string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func exec(t *testing.T, pool *pgxpool.Pool, q string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func TestPurgeOnceDeletesOnlyExpiredRowsInBatches(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("orch")), testkit.MustSets(t)(migrations.Participant("part")))
	now := time.Now()
	old, recent := now.Add(-48*time.Hour), now.Add(-time.Hour)

	// Outbox: 7 old sent, 2 recent sent, 3 old unsent (one dead): only the
	// 7 go.
	for _, s := range []string{"orch", "part"} {
		ob := pgx.Identifier{s, "outbox"}.Sanitize()
		exec(t, pool, `INSERT INTO `+ob+` (topic, key, value, created_at, sent_at) SELECT 't', 'k', 'v', $1, $1 FROM generate_series(1, 7)`, old)
		exec(t, pool, `INSERT INTO `+ob+` (topic, key, value, created_at, sent_at) SELECT 't', 'k', 'v', $1, $1 FROM generate_series(1, 2)`, recent)
		exec(t, pool, `INSERT INTO `+ob+` (topic, key, value, created_at) SELECT 't', 'k', 'v', $1 FROM generate_series(1, 2)`, old)
		exec(t, pool, `INSERT INTO `+ob+` (topic, key, value, created_at, dead_at) VALUES ('t', 'k', 'v', $1, $1)`, old)
		ib := pgx.Identifier{s, "inbox"}.Sanitize()
		exec(t, pool, `INSERT INTO `+ib+` (message_id, topic, received_at) SELECT gen_random_uuid(), 't', $1 FROM generate_series(1, 5)`, old)
		exec(t, pool, `INSERT INTO `+ib+` (message_id, topic, received_at) SELECT gen_random_uuid(), 't', $1 FROM generate_series(1, 4)`, recent)
	}
	// Sagas: 3 old completed/compensated (2 journal rows each), one old
	// failed, one old running, one recently completed.
	type sg struct {
		state    string
		finished *time.Time
	}
	var keep []uuid.UUID
	var gone []uuid.UUID
	for i, s := range []sg{{"completed", &old}, {"compensated", &old}, {"completed", &old}, {"failed", &old}, {"running", nil}, {"completed", &recent}} {
		id := uuid.New()
		exec(t, pool, `INSERT INTO orch.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, data, steps, version, created_at, updated_at, finished_at)
			VALUES ($1, 'place-order', 1, 'a', $2, $3, '{}', '[]', 1, $4, $4, $5)`, id, id.String(), s.state, old.Add(-time.Minute), s.finished)
		exec(t, pool, `INSERT INTO orch.journal (saga_id, at, event) VALUES ($1, $2, 'start'), ($1, $2, 'reply')`, id, old)
		// A finished saga has no timer row; one written by hand goes
		// with its saga.
		exec(t, pool, `INSERT INTO orch.timers (saga_id, due_at) VALUES ($1, $2)`, id, now)
		if i < 3 {
			gone = append(gone, id)
		} else {
			keep = append(keep, id)
		}
	}

	reg := prometheus.NewRegistry()
	m, err := retention.NewMetrics(reg, "sagaflow")
	if err != nil {
		t.Fatal(err)
	}
	p, err := retention.New(pool, &retention.Config{
		Schemas: []string{"orch", "part"}, OrchestratorSchema: "orch",
		SentOutboxAfter: 24 * time.Hour, InboxAfter: 24 * time.Hour, FinishedSagaAfter: 24 * time.Hour,
		BatchSize: 2, Metrics: m,
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.PurgeOnce(context.Background(), now)
	if err != nil {
		t.Fatalf("PurgeOnce: %v", err)
	}
	want := map[string]int64{"orch.outbox": 7, "part.outbox": 7, "orch.inbox": 5, "part.inbox": 5, "orch.sagas": 3, "orch.journal": 6}
	for table, n := range want {
		if got[table] != n {
			t.Errorf("purged %s = %d, want %d (all %v)", table, got[table], n, got)
		}
		if v := testutil.ToFloat64(m.Purged(table)); v != float64(n) {
			t.Errorf("sagaflow_retention_purged_total{table=%q} = %v, want %d", table, v, n)
		}
	}
	for _, s := range []string{"orch", "part"} {
		if n := count(t, pool, `SELECT count(*) FROM `+s+`.outbox WHERE sent_at IS NULL`); n != 3 {
			t.Errorf("%s: %d unsent outbox rows left, want 3 (unsent and dead rows are never purged)", s, n)
		}
		if n := count(t, pool, `SELECT count(*) FROM `+s+`.outbox`); n != 5 {
			t.Errorf("%s: %d outbox rows left, want 5", s, n)
		}
		if n := count(t, pool, `SELECT count(*) FROM `+s+`.inbox`); n != 4 {
			t.Errorf("%s: %d inbox rows left, want the 4 inside the window", s, n)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM orch.sagas WHERE id = ANY($1)`, keep); n != 3 {
		t.Errorf("%d of the failed/running/recent sagas left, want 3", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM orch.journal WHERE saga_id = ANY($1)`, keep); n != 6 {
		t.Errorf("%d journal rows of kept sagas, want 6", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM orch.journal WHERE saga_id = ANY($1)`, gone); n != 0 {
		t.Errorf("%d journal rows of purged sagas left, want 0", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM orch.timers WHERE saga_id = ANY($1)`, gone); n != 0 {
		t.Errorf("%d timer rows of purged sagas left, want 0", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM orch.timers WHERE saga_id = ANY($1)`, keep); n != 3 {
		t.Errorf("%d timer rows of kept sagas, want 3", n)
	}
	// A second cycle finds nothing.
	again, err := p.PurgeOnce(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	for table, n := range again {
		if n != 0 {
			t.Errorf("second cycle purged %d from %s, want 0", n, table)
		}
	}
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	for _, tc := range []struct {
		cfg  retention.Config
		want string
	}{
		{retention.Config{}, "nothing to purge"},
		{retention.Config{Schemas: []string{""}}, "Config.Schemas[0]"},
		{retention.Config{Schemas: []string{"a"}, InboxAfter: -time.Second}, "Config.InboxAfter"},
		{retention.Config{Schemas: []string{"a"}, BatchSize: -1}, "Config.BatchSize"},
		{retention.Config{OrchestratorSchema: "a", Interval: -time.Second}, "Config.Interval"},
	} {
		_, err := retention.New(pool, &tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	if _, err := retention.New(pool, &retention.Config{Schemas: []string{"a"}}); err != nil {
		t.Errorf("New with defaults: %v", err)
	}
}

// TestDedupeHoldsInsideWindow runs a real inbox consumer: a message whose
// inbox row is inside the window survives retention and its redelivery is
// still skipped as a duplicate; a message past the window is purged.
func TestDedupeHoldsInsideWindow(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Participant("p")))
	exec(t, pool, `CREATE TABLE effects (message_id uuid NOT NULL)`)
	brokers := testkit.Brokers(t)
	topic := testkit.Topic(t, brokers, "retention", 1)
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	t.Cleanup(func() { _ = w.Close() })
	produce := func(ids ...uuid.UUID) {
		t.Helper()
		msgs := make([]kafka.Message, len(ids))
		for i, id := range ids {
			msgs[i] = kafka.Message{Key: []byte("k"), Value: []byte("v"), Headers: []kafka.Header{{Key: message.HeaderMessageID, Value: []byte(id.String())}}}
		}
		if err := w.WriteMessages(testkit.Context(t, wait), msgs...); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	im, err := inbox.NewMetrics(prometheus.NewRegistry(), "sagaflow")
	if err != nil {
		t.Fatal(err)
	}
	c, err := inbox.New(pool, inbox.EachMessage(func(ctx context.Context, tx pgx.Tx, m message.Record) error {
		var id string
		for _, h := range m.Headers {
			if h.Key == message.HeaderMessageID {
				id = string(h.Value)
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO effects (message_id) VALUES ($1)`, id)
		return err
	}), &inbox.Config{Brokers: brokers, GroupID: "g-" + testkit.RandomSuffix(4), Topics: []string{topic}, Schema: "p", Name: "ret", Metrics: im})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	var runErr error
	go func() { defer wg.Done(); runErr = c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if runErr != nil {
			t.Errorf("inbox Run: %v", runErr)
		}
	})

	inside, outside := uuid.New(), uuid.New()
	produce(inside, outside)
	testkit.Eventually(t, wait, "both messages handled", func() (bool, error) {
		return count(t, pool, `SELECT count(*) FROM effects`) == 2, nil
	})
	// inside was received 1h ago (window 2h), outside 3h ago.
	exec(t, pool, `UPDATE p.inbox SET received_at = now() - interval '1 hour' WHERE message_id = $1`, inside)
	exec(t, pool, `UPDATE p.inbox SET received_at = now() - interval '3 hours' WHERE message_id = $1`, outside)
	p, err := retention.New(pool, &retention.Config{Schemas: []string{"p"}, InboxAfter: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.PurgeOnce(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got["p.inbox"] != 1 {
		t.Fatalf("purged %d inbox rows, want 1 (only the one past the window)", got["p.inbox"])
	}
	if n := count(t, pool, `SELECT count(*) FROM p.inbox WHERE message_id = $1`, inside); n != 1 {
		t.Fatalf("inbox row inside the window was purged")
	}

	produce(inside) // a redelivery inside the window
	testkit.Eventually(t, wait, "redelivery skipped as a duplicate", func() (bool, error) {
		return testutil.ToFloat64(im.Duplicates("ret")) == 1, nil
	})
	if n := count(t, pool, `SELECT count(*) FROM effects WHERE message_id = $1`, inside); n != 1 {
		t.Errorf("message inside the window handled %d times, want 1", n)
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Participant("p")))
	exec(t, pool, `INSERT INTO p.inbox (message_id, topic, received_at) VALUES (gen_random_uuid(), 't', now() - interval '10 days')`)
	p, err := retention.New(pool, &retention.Config{Schemas: []string{"p"}, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	testkit.Eventually(t, wait, "Run purges the expired inbox row", func() (bool, error) {
		return count(t, pool, `SELECT count(*) FROM p.inbox`) == 0, nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel = %v, want nil", err)
		}
	case <-time.After(wait):
		t.Fatal("Run did not return after cancel")
	}
}

// Barrier rows go after BarrierAfter (default 90 days), only in schemas
// that have a barrier table; failed sagas and sagas an operator or the
// reconciler acted on (a journal entry with an actor) are kept for
// FailedSagaAfter (default 180 days), the others for FinishedSagaAfter.
func TestPurgeBarrierAndAuditedSagasLater(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("orch")), testkit.MustSets(t)(migrations.Participant("part")))
	now := time.Now()
	days := func(n int) time.Time { return now.Add(-time.Duration(n) * 24 * time.Hour) }

	for _, b := range []struct {
		step string
		at   time.Time
	}{{"old-1", days(100)}, {"old-2", days(91)}, {"recent", days(60)}} {
		exec(t, pool, `INSERT INTO part.barrier (saga_id, step, action, outcome, closed, created_at) VALUES (gen_random_uuid(), $1, 'forward', 'success', false, $2)`, b.step, b.at)
	}
	// Holds settled before the barrier window go with the barrier rows; a
	// hold still held stays, however old.
	for _, h := range []struct {
		step, state string
		since       time.Time
		settled     *time.Time
	}{
		{"confirmed-long-ago", "confirmed", days(120), ptr(days(100))},
		{"released-long-ago", "released", days(120), ptr(days(95))},
		{"settled-recently", "confirmed", days(120), ptr(days(10))},
		{"held-long", "held", days(300), nil},
	} {
		exec(t, pool, `INSERT INTO part.holds (saga_id, step, resource, quantity, state, since, settled_at) VALUES (gen_random_uuid(), $1, 'sku', 1, $2, $3, $4)`, h.step, h.state, h.since, h.settled)
	}
	type sg struct {
		state    string
		finished time.Time
		actor    string
		gone     bool
	}
	cases := []sg{
		{"failed", days(200), "", true},
		{"failed", days(100), "", false},
		{"completed", days(60), "alice@ops", false},    // operator-resolved: audited
		{"compensated", days(60), "reconciler", false}, // repaired by the reconciler
		{"completed", days(60), "", true},
		{"completed", days(200), "alice@ops", true},
	}
	ids := make([]uuid.UUID, len(cases))
	for i, c := range cases {
		ids[i] = uuid.New()
		exec(t, pool, `INSERT INTO orch.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, data, steps, version, created_at, updated_at, finished_at)
			VALUES ($1, 'place-order', 1, 'a', $2, $3, '{}', '[]', 1, $4, $4, $4)`, ids[i], ids[i].String(), c.state, c.finished)
		exec(t, pool, `INSERT INTO orch.journal (saga_id, at, event, actor) VALUES ($1, $2, 'started', ''), ($1, $2, 'operator resolve', $3)`, ids[i], c.finished, c.actor)
	}
	p, err := retention.New(pool, &retention.Config{Schemas: []string{"orch", "part"}, OrchestratorSchema: "orch"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.PurgeOnce(context.Background(), now)
	if err != nil {
		t.Fatalf("PurgeOnce: %v", err)
	}
	if got["part.barrier"] != 2 || got["orch.sagas"] != 3 || got["part.holds"] != 2 {
		t.Errorf("purged %v; want 2 part.barrier rows, 2 part.holds rows and 3 sagas", got)
	}
	if n := count(t, pool, `SELECT count(*) FROM part.holds WHERE step IN ('held-long', 'settled-recently')`); n != 2 {
		t.Errorf("%d of the held hold and the recently settled one are left, want both", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM part.barrier WHERE step = 'recent'`); n != 1 {
		t.Errorf("the barrier row inside the window is gone")
	}
	for i, c := range cases {
		n := count(t, pool, `SELECT count(*) FROM orch.sagas WHERE id = $1`, ids[i])
		if gone := n == 0; gone != c.gone {
			t.Errorf("saga %+v: purged = %v, want %v", c, gone, c.gone)
		}
	}
	// The failed sagas' count by type (kept by triggers, migration 020)
	// follows the purge: the one failed saga left.
	if n := count(t, pool, `SELECT coalesce(sum(n), 0) FROM orch.failed_counts WHERE type = 'place-order'`); n != 1 {
		t.Errorf("failed_counts has %d failed place-order sagas after the purge, want 1", n)
	}
}

// TestPurgeRedrivenDeadLettersAndOldAudit: redriven dead letters go after
// DeadLetterAfter from their redrive, open ones never; audit entries go
// after AuditAfter; in every schema.
func TestPurgeRedrivenDeadLettersAndOldAudit(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("orch")), testkit.MustSets(t)(migrations.Participant("part")))
	now := time.Now()
	days := func(n int) time.Time { return now.Add(-time.Duration(n) * 24 * time.Hour) }
	for _, s := range []string{"orch", "part"} {
		dl := pgx.Identifier{s, "dead_letters"}.Sanitize()
		for _, d := range []struct {
			reason   string
			dead     time.Time
			redriven *time.Time
		}{
			{"open, very old", days(400), nil},
			{"redriven long ago", days(100), ptr(days(40))},
			{"redriven lately", days(100), ptr(days(10))},
			{"redriven just past the window", days(31), ptr(days(31))},
		} {
			exec(t, pool, `INSERT INTO `+dl+` (topic, partition, "offset", value, reason, dead_at, redriven_at) VALUES ('t', 0, 1, 'v', $1, $2, $3)`, d.reason, d.dead, d.redriven)
		}
		au := pgx.Identifier{s, "ops_audit"}.Sanitize()
		exec(t, pool, `INSERT INTO `+au+` (at, actor, reason, action, target) VALUES ($1, 'a', 'r', 'redrive', 'x'), ($2, 'a', 'r', 'redrive', 'y'), ($3, 'a', 'r', 'requeue', 'z')`, days(200), days(181), days(20))
	}
	reg := prometheus.NewRegistry()
	m, err := retention.NewMetrics(reg, "sagaflow")
	if err != nil {
		t.Fatal(err)
	}
	p, err := retention.New(pool, &retention.Config{Schemas: []string{"orch", "part"}, OrchestratorSchema: "orch", BatchSize: 1, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.PurgeOnce(context.Background(), now)
	if err != nil {
		t.Fatalf("PurgeOnce: %v", err)
	}
	for _, s := range []string{"orch", "part"} {
		if got[s+".dead_letters"] != 2 || got[s+".ops_audit"] != 2 {
			t.Errorf("purged %v; want 2 %s.dead_letters and 2 %s.ops_audit rows", got, s, s)
		}
		var left []string
		rows, err := pool.Query(context.Background(), `SELECT reason FROM `+pgx.Identifier{s, "dead_letters"}.Sanitize()+` ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		if left, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		if strings.Join(left, "; ") != "open, very old; redriven lately" {
			t.Errorf("%s dead letters left: %q; want the open one and the one redriven lately", s, left)
		}
		if n := count(t, pool, `SELECT count(*) FROM `+pgx.Identifier{s, "ops_audit"}.Sanitize()+` WHERE target = 'z'`); n != 1 {
			t.Errorf("%s: the recent audit entry is gone", s)
		}
		if c := testutil.ToFloat64(m.Purged(s + ".dead_letters")); c != 2 {
			t.Errorf("purged counter of %s.dead_letters = %v, want 2", s, c)
		}
	}
	// Nothing more is due: a second cycle deletes nothing.
	if again, err := p.PurgeOnce(context.Background(), now); err != nil || again["orch.dead_letters"]+again["orch.ops_audit"] != 0 {
		t.Fatalf("second PurgeOnce = %v, %v; want nothing purged", again, err)
	}
}

func ptr[T any](v T) *T { return &v }

// Stray replies' dead letters go StrayDeadLetterAfter after they were
// dead-lettered, open or not; other open dead letters stay.
func TestPurgeStrayDeadLetters(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("orch")))
	now := time.Now()
	days := func(n int) time.Time { return now.Add(-time.Duration(n) * 24 * time.Hour) }
	for _, d := range []struct {
		reason string
		dead   time.Time
		stray  bool
	}{
		{"stray, old", days(8), true},
		{"stray, older", days(300), true},
		{"stray, recent", days(6), true},
		{"not stray, old", days(300), false},
	} {
		exec(t, pool, `INSERT INTO orch.dead_letters (topic, partition, "offset", value, reason, dead_at, stray) VALUES ('t', 0, 1, 'v', $1, $2, $3)`, d.reason, d.dead, d.stray)
	}
	p, err := retention.New(pool, &retention.Config{Schemas: []string{"orch"}, BatchSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.PurgeOnce(context.Background(), now)
	if err != nil {
		t.Fatalf("PurgeOnce: %v", err)
	}
	if got["orch.dead_letters"] != 2 {
		t.Errorf("purged %v; want 2 orch.dead_letters rows", got)
	}
	rows, err := pool.Query(context.Background(), `SELECT reason FROM orch.dead_letters ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(left, "; ") != "stray, recent; not stray, old" {
		t.Errorf("dead letters left: %q; want the recent stray one and the open one that is not stray", left)
	}
}

func TestRetentionWindowsAreOrdered(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	for _, tc := range []struct {
		cfg  retention.Config
		want string
	}{
		{retention.Config{Schemas: []string{"a"}, InboxAfter: 100 * 24 * time.Hour}, "BarrierAfter"},
		{retention.Config{OrchestratorSchema: "a", FinishedSagaAfter: 200 * 24 * time.Hour}, "FailedSagaAfter"},
		{retention.Config{Schemas: []string{"a"}, DeadLetterAfter: 200 * 24 * time.Hour}, "AuditAfter"},
	} {
		if _, err := retention.New(pool, &tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

// The operator audit goes after AuditAfter only once its saga is deleted;
// four-eyes proposals AuditAfter past their expiry.
func TestPurgeOperatorAuditAndProposals(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("orch")))
	now := time.Now()
	days := func(n int) time.Time { return now.Add(-time.Duration(n) * 24 * time.Hour) }
	kept := "11111111-1111-1111-1111-111111111111"
	exec(t, pool, `INSERT INTO orch.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, current_step, data, steps, version, created_at, updated_at)
VALUES ($1, 'place-order', 1, 'a', 'k', 'failed', '', '{}', '[]', 3, $2, $2)`, kept, days(300))
	gone := "22222222-2222-2222-2222-222222222222"
	for _, a := range []struct {
		saga string
		at   time.Time
	}{{kept, days(200)}, {gone, days(200)}, {gone, days(20)}} {
		exec(t, pool, `INSERT INTO orch.operator_audit (saga_id, saga_type, at, action, actor, reason, before, after) VALUES ($1, 'place-order', $2, 'force-fail', 'a', 'r', '{}', '{}')`, a.saga, a.at)
	}
	for _, exp := range []time.Time{days(200), days(20)} {
		exec(t, pool, `INSERT INTO orch.operator_proposals (saga_id, saga_type, action, args, reason, proposer, created, expires, state) VALUES ($1, 'place-order', 'force-fail', '{}', 'r', 'a', $2, $2, 'rejected')`, gone, exp)
	}
	p, err := retention.New(pool, &retention.Config{OrchestratorSchema: "orch", BatchSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.PurgeOnce(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	if got["orch.operator_audit"] != 1 || got["orch.operator_proposals"] != 1 {
		t.Fatalf("purged %v; want 1 operator_audit row (old, saga gone) and 1 proposal (expired long ago)", got)
	}
	if n := count(t, pool, `SELECT count(*) FROM orch.operator_audit WHERE saga_id = $1`, kept); n != 1 {
		t.Errorf("the old audit row of a saga still kept is gone (%d left)", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM orch.operator_proposals WHERE expires > $1`, days(30)); n != 1 {
		t.Errorf("the recent proposal is gone (%d left)", n)
	}
}
