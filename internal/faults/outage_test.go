package faults_test

import (
	"context"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/internal/testkit"
)

// outageLength is how long each outage lasts at least.
const outageLength = 3 * time.Second

// Postgres and broker outages: the orchestrator service and the reference
// participants reach Postgres and the broker only through fault proxies.
// While sagas flow, Postgres is cut for 3s and restored, then the broker is
// cut for 3s and restored; new sagas are started during each cut. No
// component's Run returns during or after the outages, they retry (warnings
// logged, error metrics counted, at a bounded rate: no spinning), the
// service reports not ready during each cut and ready after it, and every
// saga then finishes with no lost or duplicated effect and drained outboxes.
func TestOutagePostgresAndBroker(t *testing.T) {
	t.Parallel()
	const n = 90
	began := time.Now()
	p := newProxiedEnv(t, envOpts{orders: n, seed: 31})
	t.Logf("%s: environment ready", time.Since(began).Round(time.Millisecond))
	ctx := testkit.Context(t, 3*time.Minute)
	svc := p.service()
	orch := p.run("orchestrator", svc.Run)
	parts := p.run("participants", p.participants().Run)
	running := func(when string) {
		t.Helper()
		for _, c := range []*component{orch, parts} {
			if err, done := c.exited(); done {
				t.Fatalf("%s: %s returned (%v); it must keep running through an outage", when, c.name, err)
			}
		}
	}
	ready := func() error {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return svc.Ready(rctx)
	}
	if err := ready(); err != nil {
		t.Fatalf("not ready before any outage: %v", err)
	}

	// Wave 1 flows, then Postgres goes away.
	if _, err := startPlan(ctx, p.env, 0, n/3); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "first sagas finished", func() (bool, error) { return p.terminal() >= 5, nil })
	outage(t, p, "postgres", p.pg.Cut, p.pg.Restore, ready, func() {
		// Sagas keep arriving (started by a process that still reaches
		// the database): they wait in the outbox.
		if _, err := startPlan(ctx, p.env, n/3, 2*n/3); err != nil {
			t.Fatal(err)
		}
	}, running)
	testkit.Eventually(t, time.Minute, "progress after the Postgres outage", func() (bool, error) { return p.terminal() >= n/3, nil })
	t.Logf("%s: progress after the Postgres outage", time.Since(began).Round(time.Millisecond))

	// Then the broker goes away.
	outage(t, p, "broker", p.kafka.Cut, p.kafka.Restore, ready, func() {
		if _, err := startPlan(ctx, p.env, 2*n/3, n); err != nil {
			t.Fatal(err)
		}
	}, running)

	t.Logf("%s: both outages over, %d of %d sagas terminal", time.Since(began).Round(time.Millisecond), p.terminal(), n)
	p.waitTerminal(2 * time.Minute)
	t.Logf("%s: every saga terminal", time.Since(began).Round(time.Millisecond))
	if rows, err := p.check.Query(ctx, `SELECT event, count(*) FROM `+p.schemas.Orchestrator+`.journal GROUP BY 1 ORDER BY 1`); err == nil {
		for rows.Next() {
			var ev string
			var c int
			_ = rows.Scan(&ev, &c)
			t.Logf("journal %s: %d", ev, c)
		}
		rows.Close()
	}
	running("after both outages")
	rep := p.checkInvariants(false)
	if rep.Sagas != n {
		t.Fatalf("report %+v, want %d sagas", rep, n)
	}
	if s := p.pg.Stats(); s.Cuts < 1 {
		t.Fatalf("postgres proxy stats %+v: no cut happened", s)
	}
	if s := p.kafka.Stats(); s.Cuts < 1 {
		t.Fatalf("broker proxy stats %+v: no cut happened", s)
	}
	t.Logf("report %+v; warnings/errors logged by message: %v", rep, p.logs.summary())
}

// startPlan starts orders [from, to) of the env's plan through the env's
// engine (on the test's direct pool).
func startPlan(ctx context.Context, e *env, from, to int) (int, error) {
	ids, err := startOrders(ctx, e, from, to)
	return len(ids), err
}

// outage cuts a dependency, checks what must hold while it is away, keeps
// it away for outageLength and until the components were seen retrying,
// restores it and waits for readiness.
func outage(t *testing.T, p *proxied, what string, cut, restore func(), ready func() error, during func(), running func(string)) {
	t.Helper()
	warnBefore := p.logs.count()
	errsBefore := p.metric("sagaflow_inbox_handle_errors_total") + p.metric("sagaflow_relay_publish_errors_total")
	cut()
	cutAt := time.Now()
	during()
	testkit.Eventually(t, 30*time.Second, "not ready while "+what+" is cut", func() (bool, error) { return ready() != nil, nil })
	testkit.Eventually(t, 30*time.Second, what+" cut for "+outageLength.String()+" and retries seen", func() (bool, error) {
		running("during the " + what + " outage")
		return time.Since(cutAt) >= outageLength && p.logs.count() > warnBefore, nil
	})
	if err := ready(); err == nil {
		t.Fatalf("ready while %s is still cut", what)
	}
	restore()
	length := time.Since(cutAt)
	retries := p.logs.count() - warnBefore
	testkit.Eventually(t, 30*time.Second, "ready after "+what+" is restored", func() (bool, error) { return ready() == nil, nil })
	running("after the " + what + " outage")
	// Retrying, with backoff: a handful of warnings per component and
	// second, not a spin of thousands.
	if perSec := float64(retries) / length.Seconds(); perSec > 100 {
		t.Fatalf("%d warnings in %s of %s outage (%.0f/s): components spin instead of backing off: %v", retries, length.Round(time.Millisecond), what, perSec, p.logs.summary())
	}
	errsAfter := p.metric("sagaflow_inbox_handle_errors_total") + p.metric("sagaflow_relay_publish_errors_total")
	t.Logf("%s outage %s: %d warnings/errors logged, error metrics +%.0f", what, length.Round(time.Millisecond), retries, errsAfter-errsBefore)
}
