package orchestrator_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
)

func TestReadyChecksSchemaAndBroker(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	brokers := testkit.Brokers(t)
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	svc, err := orchestrator.New(pool, reg, &orchestrator.Config{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, time.Minute)
	if err := svc.Ready(ctx); err == nil || !strings.Contains(err.Error(), "migrations pending") || orchestrator.ReadyReason(err) != orchestrator.ReasonMigrations {
		t.Fatalf("Ready before Prepare = %v (reason %q), want pending migrations", err, orchestrator.ReadyReason(err))
	}
	if err := svc.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if err := svc.Ready(ctx); err != nil {
		t.Fatalf("Ready after Prepare = %v, want nil", err)
	}

	// A broker address nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	sets, err := svc.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = orchestrator.Readiness(pool, []string{dead}, nil, sets)(context.Background())
	if err == nil || !strings.Contains(err.Error(), "kafka") || orchestrator.ReadyReason(err) != orchestrator.ReasonKafka {
		t.Errorf("Readiness with a dead broker = %v (reason %q), want a kafka error", err, orchestrator.ReadyReason(err))
	}
	if r := orchestrator.ReadyReason(err); strings.Contains(r, dead) {
		t.Errorf("the reason %q names the broker", r)
	}
	if d := time.Since(start); d > orchestrator.ReadyTimeoutDefault+time.Second {
		t.Errorf("Readiness with a dead broker took %s, want under %s", d, orchestrator.ReadyTimeoutDefault)
	}
	if err := orchestrator.PingBrokers(ctx, nil, brokers); err != nil {
		t.Errorf("PingBrokers on a live broker: %v", err)
	}
}
