package orchestrator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/saga"
)

// TestStatusQueriesUseIndexes checks with EXPLAIN, on 5,000 analyzed sagas,
// that every list filter and the stats queries read an index, never the
// whole table.
func TestStatusQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	pool, e := orchEngine(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
INSERT INTO orch.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, current_step, data, steps, version,
  flag, deadline_at, next_wakeup_at, created_at, updated_at, finished_at)
SELECT gen_random_uuid(), (ARRAY['place-order', 'refund', 'signup', 'transfer'])[1 + i % 4], 1, 'agg-' || i, 'key-' || i,
  CASE WHEN i % 100 = 0 THEN 'running' WHEN i % 100 = 1 THEN 'failed' WHEN i % 100 = 2 THEN 'compensating'
       WHEN i % 10 = 3 THEN 'compensated' ELSE 'completed' END,
  (ARRAY['reserve-inventory', 'charge-payment', 'create-shipment'])[1 + i % 3], '{}', '[]', 3,
  CASE WHEN i % 500 = 0 THEN 'retrying beyond threshold' ELSE '' END, NULL, NULL,
  now() - (i || ' minutes')::interval, now() - (i || ' minutes')::interval,
  CASE WHEN i % 100 IN (0, 2) THEN NULL ELSE now() - (i || ' minutes')::interval END
FROM generate_series(1, 5000) AS i;
ANALYZE orch.sagas;
INSERT INTO orch.journal (saga_id, at, event, from_state, to_state)
SELECT id, created_at + make_interval(secs => n), 'step succeeded', 'running', 'running'
FROM orch.sagas, generate_series(1, 4) AS n ORDER BY created_at, n;
ANALYZE orch.journal;`)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.List(ctx, Filter{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	filters := map[string]Filter{
		"state=running":         {State: saga.Running},
		"state=failed":          {State: saga.Failed},
		"state=completed":       {State: saga.Completed},
		"type":                  {Type: "refund"},
		"type+state":            {Type: "refund", State: saga.Compensating},
		"step":                  {Step: "charge-payment"},
		"stuck":                 {Stuck: true},
		"stuck+type":            {Stuck: true, Type: "signup"},
		"older_than":            {OlderThan: time.Hour, State: saga.Failed},
		"no filter":             {},
		"state=failed + cursor": {State: saga.Failed, Cursor: p.Next},
		"stuck + cursor":        {Stuck: true, Cursor: p.Next},
		"aggregate_id":          {AggregateID: "agg-42"},
		"aggregate_id+state":    {AggregateID: "agg-42", State: saga.Completed},
		"idempotency_key":       {IdempotencyKey: "key-42"},
		"idempotency_key+type":  {IdempotencyKey: "key-42", Type: "refund"},
	}
	for name, f := range filters {
		plan, err := e.explainList(ctx, f)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("plan of list %s:\n%s", name, plan)
		if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "Index") {
			t.Errorf("list %s reads the whole table:\n%s", name, plan)
		}
		// A filter of the open sagas of every state (step, stuck) reads a
		// page from each of their two indexes.
		if f.State == "" && (f.Step != "" || f.Stuck) && (!strings.Contains(plan, "sagas_in_flight_idx") || !strings.Contains(plan, "sagas_failed_idx")) {
			t.Errorf("list %s does not read sagas_in_flight_idx and sagas_failed_idx:\n%s", name, plan)
		}
		// A business key is found through its own index, not by walking
		// every saga by creation time.
		for key, idx := range map[string]string{"aggregate_id": "sagas_aggregate_idx", "idempotency_key": "sagas_idempotency_key_idx"} {
			if name == key && !strings.Contains(plan, idx) {
				t.Errorf("list %s does not use %s:\n%s", name, idx, plan)
			}
		}
	}
	plans, err := e.explainStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, plan := range plans {
		// failed_counts has a row a type: read whole.
		if strings.Contains(plan, "Seq Scan on sagas") || !strings.Contains(plan, "Index") {
			t.Errorf("a stats query reads the whole table:\n%s", plan)
		}
	}
	// The open counts read the sagas in flight on their index and the
	// failed ones from failed_counts, not sagas_failed_idx; the oldest saga
	// in flight is the first row of sagas_in_flight_idx, and the scan stops
	// there.
	if open := plans[0]; !strings.Contains(open, "sagas_in_flight_idx") || !strings.Contains(open, "failed_counts") || strings.Contains(open, "sagas_failed_idx") {
		t.Errorf("the open counts do not read sagas_in_flight_idx and failed_counts:\n%s", open)
	}
	if oldest := plans[2]; !strings.Contains(oldest, "sagas_in_flight_idx") || !strings.Contains(oldest, "Limit") {
		t.Errorf("the oldest in-flight saga is not the first row of sagas_in_flight_idx:\n%s", oldest)
	}
	st, err := e.Stats(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var want time.Time
	if err := pool.QueryRow(ctx, `SELECT min(created_at) FROM orch.sagas WHERE state IN ('running', 'compensating')`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	if got := e.cfg.Now().Sub(want); st.OldestInFlight < got-time.Second || st.OldestInFlight > got+time.Second {
		t.Fatalf("Stats.OldestInFlight = %v, want %v (the oldest running or compensating saga)", st.OldestInFlight, got)
	}
	// The reconciler's stuck sagas are read from the open sagas' index.
	plan, err := e.explain(ctx, `SELECT id FROM orch.sagas WHERE `+stuckWhere, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "sagas_in_flight_idx") {
		t.Errorf("the reconciler's stuck query does not read sagas_in_flight_idx:\n%s", plan)
	}
	// So are its failed sagas; the finished ones it judges are read from
	// sagas_finished_idx and journal_after_finish_idx, never the table.
	for _, c := range []struct{ where, index string }{
		{failedWhere, "sagas_failed_idx"},
		{finishedInWindow + brokenRules, "sagas_finished_idx"},
		{strings.Replace(movedAfterFinish, "{journal}", "orch.journal", 1) + brokenRules, "journal_from_end_idx"},
	} {
		q := `SELECT id FROM orch.sagas WHERE ` + c.where
		var args []any
		if strings.Contains(c.where, "$1") {
			args = []any{time.Now().Add(-time.Hour)}
		}
		plan, err := e.explain(ctx, q, args...)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, c.index) {
			t.Errorf("the reconciler's query does not read %s:\n%s\n%s", c.index, q, plan)
		}
	}
	// and the answers are right on this data set
	for _, f := range []Filter{{AggregateID: "agg-42"}, {IdempotencyKey: "key-42"}} {
		got, err := e.List(ctx, f)
		if err != nil || len(got.Sagas) != 1 || got.Sagas[0].AggregateID != "agg-42" || got.Sagas[0].IdempotencyKey != "key-42" {
			t.Fatalf("List(%+v) = %+v, %v; want exactly the saga of agg-42", f, got.Sagas, err)
		}
	}
	l, err := e.List(ctx, Filter{Stuck: true, Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Sagas {
		if s.State == saga.Completed || s.State == saga.Compensated {
			t.Fatalf("stuck lists a %s saga", s.State)
		}
	}
	if len(l.Sagas) != 150 { // 50 running + 50 compensating (unmoved for over a minute) + 50 failed
		t.Fatalf("stuck lists %d sagas, want 150", len(l.Sagas))
	}
	// A step's open sagas, page by page from both indexes: those of the
	// table, newest first, each once.
	var wantIDs []string
	idRows, err := pool.Query(ctx, `SELECT id::text FROM orch.sagas WHERE state IN ('running', 'compensating', 'failed') AND current_step = 'charge-payment' ORDER BY created_at DESC, id DESC`)
	if err != nil {
		t.Fatal(err)
	}
	if wantIDs, err = pgx.CollectRows(idRows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	var got []string
	for f := (Filter{Step: "charge-payment", Limit: 7}); ; {
		p, err := e.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range p.Sagas {
			got = append(got, s.ID.String())
		}
		if p.Next == "" || len(got) > len(wantIDs) {
			break
		}
		f.Cursor = p.Next
	}
	if len(wantIDs) == 0 || strings.Join(got, ",") != strings.Join(wantIDs, ",") {
		t.Fatalf("the step's list: %d sagas, want the %d of the table in order", len(got), len(wantIDs))
	}
	// The in-flight gauge (an index scan of the open sagas) counts them
	// by state, twice the same.
	for range 2 {
		in, err := e.InFlight(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(in) != 3 || in[saga.Running] != 50 || in[saga.Failed] != 50 || in[saga.Compensating] != 50 {
			t.Fatalf("InFlight = %v, want 50 running, 50 failed, 50 compensating", in)
		}
	}
}

// TestSagaIndexesAreLean pins the indexes a saga writes entries to: each
// one costs an entry at the saga's start, and another at every update that
// changes an indexed column (the last one changes the state), so an index
// more is a cost on the hot path and needs a reason in its migration.
func TestSagaIndexesAreLean(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("orch")))
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT tablename || ': ' || indexdef FROM pg_indexes WHERE schemaname = 'orch' AND tablename IN ('sagas', 'journal') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"journal: CREATE INDEX journal_at_brin ON orch.journal USING brin (at)",
		"journal: CREATE INDEX journal_from_end_idx ON orch.journal USING btree (at) WHERE ((from_state = ANY (ARRAY['completed'::text, 'compensated'::text, 'failed'::text])) AND (NOT ignored))",
		"journal: CREATE INDEX journal_reconcile_idx ON orch.journal USING btree (event, at) WHERE (event = ANY (ARRAY['difference'::text, 'check sent'::text]))",
		"journal: CREATE UNIQUE INDEX journal_pkey ON orch.journal USING btree (saga_id, id)",
		"sagas: CREATE INDEX sagas_aggregate_idx ON orch.sagas USING btree (aggregate_id, created_at DESC, id DESC)",
		"sagas: CREATE INDEX sagas_compensating_idx ON orch.sagas USING btree (type, created_at, id) WHERE (state = 'compensating'::text)",
		"sagas: CREATE INDEX sagas_created_idx ON orch.sagas USING btree (created_at DESC, id DESC)",
		"sagas: CREATE INDEX sagas_failed_idx ON orch.sagas USING btree (created_at, id) INCLUDE (state, type) WHERE (state = 'failed'::text)",
		"sagas: CREATE INDEX sagas_finished_idx ON orch.sagas USING btree (finished_at) WHERE (finished_at IS NOT NULL)",
		"sagas: CREATE INDEX sagas_finished_state_idx ON orch.sagas USING btree (state, created_at DESC, id DESC) INCLUDE (type) WHERE (state = ANY (ARRAY['completed'::text, 'compensated'::text]))",
		"sagas: CREATE INDEX sagas_flagged_idx ON orch.sagas USING btree (type, created_at, id) WHERE ((flag <> ''::text) AND (state <> ALL (ARRAY['completed'::text, 'compensated'::text])))",
		"sagas: CREATE INDEX sagas_in_flight_idx ON orch.sagas USING btree (created_at, id) INCLUDE (state, type) WHERE (state = ANY (ARRAY['running'::text, 'compensating'::text]))",
		"sagas: CREATE INDEX sagas_type_created_idx ON orch.sagas USING btree (type, created_at DESC, id DESC)",
		"sagas: CREATE UNIQUE INDEX sagas_idempotency_key_idx ON orch.sagas USING btree (idempotency_key, type)",
		"sagas: CREATE UNIQUE INDEX sagas_pkey ON orch.sagas USING btree (id)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("indexes of sagas and journal:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The triggers that keep failed_counts (migration 020) fire only on
	// the transitions into and out of failed: their WHEN conditions keep
	// the hot path (a start, a step, running to completed) from queuing
	// any trigger event; deletes (retention) are counted once a statement.
	rows, err = pool.Query(ctx, `SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = 'orch.sagas'::regclass AND NOT tgisinternal ORDER BY tgname`)
	if err != nil {
		t.Fatal(err)
	}
	if got, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	want = []string{
		"CREATE TRIGGER sagas_failed_delete AFTER DELETE ON orch.sagas REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION orch.count_failed_deleted()",
		"CREATE TRIGGER sagas_failed_insert AFTER INSERT ON orch.sagas FOR EACH ROW WHEN ((new.state = 'failed'::text)) EXECUTE FUNCTION orch.count_failed()",
		"CREATE TRIGGER sagas_failed_truncate AFTER TRUNCATE ON orch.sagas FOR EACH STATEMENT EXECUTE FUNCTION orch.count_failed_truncate()",
		"CREATE TRIGGER sagas_failed_update AFTER UPDATE OF state, type ON orch.sagas FOR EACH ROW WHEN ((((old.state = 'failed'::text) OR (new.state = 'failed'::text)) AND ((old.state IS DISTINCT FROM new.state) OR (old.type IS DISTINCT FROM new.type)))) EXECUTE FUNCTION orch.count_failed()",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("triggers of sagas:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestReconcilerReadsTheJournalWindow: the reconciler's journal query reads
// only its findings (differences, transitions out of an end state) through
// their partial indexes, neither the whole history nor the whole window
// (here 30 days of entries, a window of one).
func TestReconcilerReadsTheJournalWindow(t *testing.T) {
	t.Parallel()
	pool, e := orchEngine(t)
	ctx := context.Background()
	now := time.Now()
	if _, err := pool.Exec(ctx, `INSERT INTO orch.journal (saga_id, at, event, from_state, to_state)
SELECT gen_random_uuid(), $1::timestamptz - make_interval(secs => (60000 - i) * 43.2), 'step succeeded', 'running', 'running'
FROM generate_series(1, 60000) AS i`, now); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE orch.journal`); err != nil {
		t.Fatal(err)
	}
	plan, err := e.explain(ctx, e.journalFindingsSQL(), now.Add(-24*time.Hour), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plan, "Seq Scan on journal") || strings.Contains(plan, "journal_at_brin") ||
		!strings.Contains(plan, "journal_reconcile_idx") || !strings.Contains(plan, "journal_from_end_idx") {
		t.Errorf("the reconciler's journal query does not read its findings through journal_reconcile_idx and journal_from_end_idx:\n%s", plan)
	}
}

// TestReconcileFindsFinishedSagasChangedInItsWindow: a finished saga whose
// steps break the rules is found when it finished in the window, or when a
// transition moved it in the window after it had finished long before; not
// when it has not changed since before the window.
func TestReconcileFindsFinishedSagasChangedInItsWindow(t *testing.T) {
	t.Parallel()
	pool, e := orchEngine(t)
	ctx := context.Background()
	now := time.Now()
	hourAgo, longAgo := now.Add(-time.Hour), now.Add(-72*time.Hour)
	broken := `[{"kind": "compensable", "name": "a", "state": "succeeded", "attempts": 1, "started_at": "2026-01-01T00:00:00Z"},
{"kind": "retryable", "name": "b", "state": "running", "attempts": 1, "started_at": "2026-01-01T00:00:00Z"}]`
	ids := map[string]uuid.UUID{}
	for _, c := range []struct {
		name              string
		finished, updated time.Time
		moved             bool // a transition journaled after the finish, in the window
	}{
		{"finished in the window", hourAgo, hourAgo, false},
		{"finished long ago, moved in the window", longAgo, hourAgo, true},
		{"finished long ago, unmoved", longAgo, longAgo, false},
	} {
		id := uuid.New()
		ids[c.name] = id
		if _, err := pool.Exec(ctx, `INSERT INTO orch.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, current_step, data, steps, version, created_at, updated_at, finished_at)
VALUES ($1, 'x', 1, 'a', $5, 'completed', 'b', '{}', $2, 5, $3, $4, $3)`, id, broken, c.finished, c.updated, id.String()); err != nil {
			t.Fatal(err)
		}
		if c.moved {
			if _, err := pool.Exec(ctx, `INSERT INTO orch.journal (saga_id, at, event, from_state, to_state, actor) VALUES ($1, $2, 'operator check', 'completed', 'completed', 'alice')`, id, c.updated); err != nil {
				t.Fatal(err)
			}
		}
	}
	rep, err := e.Reconcile(ctx, ReconcileOptions{DryRun: true, Since: 24 * time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := map[uuid.UUID]bool{}
	for _, d := range rep.List {
		if d.Kind == KindActiveAfterTerminal {
			found[d.SagaID] = true
		}
	}
	for name, want := range map[string]bool{"finished in the window": true, "finished long ago, moved in the window": true, "finished long ago, unmoved": false} {
		if found[ids[name]] != want {
			t.Errorf("%s: found = %v, want %v (report %+v)", name, found[ids[name]], want, rep.List)
		}
	}
}

// orchEngine is an engine over a fresh database migrated with the
// orchestrator's schema "orch".
func orchEngine(t *testing.T) (*pgxpool.Pool, *Engine) {
	t.Helper()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("orch")))
	e, err := NewEngine(pool, saga.NewRegistry(), &EngineConfig{Schema: "orch"})
	if err != nil {
		t.Fatal(err)
	}
	return pool, e
}
