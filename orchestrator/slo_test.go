package orchestrator

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/saga"
)

func TestSLORules(t *testing.T) {
	for _, tc := range []struct {
		took, window time.Duration
		want         string
	}{
		{59 * time.Second, time.Minute, SLOMet},
		{time.Minute, time.Minute, SLOMet},
		{time.Minute + time.Millisecond, time.Minute, SLOMissed},
		{0, time.Second, SLOMet},
	} {
		if got := sloResult(tc.took, tc.window); got != tc.want {
			t.Errorf("sloResult(%s, %s) = %s, want %s", tc.took, tc.window, got, tc.want)
		}
	}
	if err := (SLO{"a": time.Second}).Validate(); err != nil {
		t.Errorf("a positive window refused: %v", err)
	}
	for _, bad := range []time.Duration{0, -time.Second} {
		if err := (SLO{"refund": bad}).Validate(); err == nil || !strings.Contains(err.Error(), "refund") {
			t.Errorf("window %s: err %v, want a refusal naming the type", bad, err)
		}
	}
}

// Open sagas past their type's window are counted per type (the gauge),
// the window is exported, and a type without a window has no series.
func TestSLOBreachesGauge(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("orch")))
	m, err := NewMetrics(prometheus.NewRegistry(), "sagaflow")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Millisecond)
	e, err := NewEngine(pool, saga.NewRegistry(), &EngineConfig{Schema: "orch", Metrics: m, Now: func() time.Time { return now },
		SLO: SLO{"place-order": time.Hour, "refund": 10 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	// place-order: open 2h, 90m and 30m old, one completed 3h old; refund:
	// open 5m old; signup (no window): open 5h old.
	_, err = pool.Exec(ctx, `
INSERT INTO orch.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, current_step, data, steps, version, created_at, updated_at, finished_at)
SELECT gen_random_uuid(), t, 1, 'a-' || n, 'k-' || n, st, '', '{}', '[]', 1, $1::timestamptz - age, $1::timestamptz, CASE WHEN st = 'completed' THEN $1::timestamptz END
FROM (VALUES (1, 'place-order', 'running', interval '2 hours'), (2, 'place-order', 'failed', interval '90 minutes'),
             (3, 'place-order', 'compensating', interval '30 minutes'), (4, 'place-order', 'completed', interval '3 hours'),
             (5, 'refund', 'running', interval '5 minutes'), (6, 'signup', 'running', interval '5 hours')) AS v(n, t, st, age)`, now)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := e.SLOBreaches(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 2 || bs[0].Type != "place-order" || bs[0].Open != 2 || bs[1].Type != "refund" || bs[1].Open != 0 {
		t.Fatalf("breaches %+v; want place-order 2, refund 0", bs)
	}
	if b, err := e.Backlog(ctx); err != nil || len(b.SLO) != 2 || b.SLO[0].Open != 2 || b.SLO[0].Window != time.Hour {
		t.Fatalf("backlog SLO %+v, %v; want place-order 2 past its hour", b.SLO, err)
	}
	if err := e.refreshGauges(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.sloBreaches.WithLabelValues("place-order")); got != 2 {
		t.Errorf("saga_slo_breaches{place-order} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.sloWindow.WithLabelValues("refund")); got != 600 {
		t.Errorf("saga_slo_seconds{refund} = %v, want 600", got)
	}
	if n := testutil.CollectAndCount(m.sloBreaches); n != 2 {
		t.Errorf("saga_slo_breaches has %d series, want 2 (signup has no window)", n)
	}
	if n := testutil.CollectAndCount(m.sloTotal); n != 4 {
		t.Errorf("sagas_slo_total has %d series, want met and missed of the two types", n)
	}
}
