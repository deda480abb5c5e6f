package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

type engineEnv struct {
	pool    *pgxpool.Pool
	eng     *orchestrator.Engine
	clock   *clock
	metrics *orchestrator.Metrics
	reg     *prometheus.Registry
}

func setupEngine(t *testing.T) *engineEnv {
	t.Helper()
	return setupEngineWith(t, nil)
}

// setupEngineWith is setupEngine with cfg given a chance to change the
// engine's configuration first.
func setupEngineWith(t *testing.T, cfg func(*orchestrator.EngineConfig)) *engineEnv {
	t.Helper()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("orch")))
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	preg := prometheus.NewRegistry()
	m, err := orchestrator.NewMetrics(preg, "sagaflow")
	if err != nil {
		t.Fatal(err)
	}
	ec := &orchestrator.EngineConfig{Schema: "orch", Now: c.now, Metrics: m}
	if cfg != nil {
		cfg(ec)
	}
	eng, err := orchestrator.NewEngine(pool, reg, ec)
	if err != nil {
		t.Fatal(err)
	}
	return &engineEnv{pool: pool, eng: eng, clock: c, metrics: m, reg: preg}
}

func order(id string) steps.Order {
	return steps.Order{OrderID: id, Customer: "c1", SKU: "sku-1", Qty: 1, AmountCents: 1000}
}

// pendingCommands reads the unsent commands of the orchestrator's outbox
// (not its outcome records).
func pendingCommands(t *testing.T, env *engineEnv) []message.Command {
	t.Helper()
	rows, err := env.pool.Query(context.Background(), `SELECT topic, value FROM orch.outbox WHERE topic <> $1 ORDER BY id`, orchestrator.OutcomeTopicDefault)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []message.Command
	for rows.Next() {
		var topic string
		var v []byte
		if err := rows.Scan(&topic, &v); err != nil {
			t.Fatal(err)
		}
		c, err := message.DecodeCommand(v)
		if err != nil {
			t.Fatalf("outbox holds an invalid command: %v", err)
		}
		if want := c.Step; topic == "" || want == "" {
			t.Fatalf("command without topic or step")
		}
		out = append(out, c)
	}
	return out
}

func lastCommand(t *testing.T, env *engineEnv) message.Command {
	t.Helper()
	cs := pendingCommands(t, env)
	if len(cs) == 0 {
		t.Fatal("no command in the outbox")
	}
	return cs[len(cs)-1]
}

func (env *engineEnv) reply(t *testing.T, c message.Command, outcome message.Outcome, payload any) error {
	t.Helper()
	var p json.RawMessage
	if payload != nil {
		p, _ = json.Marshal(payload)
	}
	r := message.Reply{MessageID: uuid.New(), InReplyTo: c.MessageID, SagaID: c.SagaID, Step: c.Step, Action: c.Action, Outcome: outcome, Reason: "test", Payload: p}
	return pgx.BeginFunc(context.Background(), env.pool, func(tx pgx.Tx) error {
		return env.eng.ApplyReply(context.Background(), tx, r)
	})
}

func mustReply(t *testing.T, env *engineEnv, c message.Command, outcome message.Outcome, payload any) {
	t.Helper()
	if err := env.reply(t, c, outcome, payload); err != nil {
		t.Fatalf("apply %s reply to %s/%s: %v", outcome, c.Step, c.Action, err)
	}
}

func get(t *testing.T, env *engineEnv, id uuid.UUID) (saga.Instance, []saga.JournalEntry) {
	t.Helper()
	in, j, err := env.eng.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return in, j
}

func TestEngineHappyPathCompletesAndJournals(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	in, created, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "k1", AggregateID: "o1", Data: order("o1")})
	if err != nil || !created {
		t.Fatalf("start: created=%v err=%v", created, err)
	}
	outputs := map[string]any{
		orderapi.StepReserveInventory: orderapi.ReserveInventoryResult{ReservationID: "r1"},
		orderapi.StepLockCoupon:       orderapi.LockCouponResult{},
		orderapi.StepChargePayment:    orderapi.ChargePaymentResult{PaymentID: "p1"},
		orderapi.StepCreateShipment:   orderapi.CreateShipmentResult{ShipmentID: "s1"},
		orderapi.StepAwardPoints:      orderapi.AwardPointsResult{Balance: 10},
		orderapi.StepConfirmStock:     orderapi.ConfirmStockResult{Sold: 1},
	}
	wantOrder := []string{orderapi.StepReserveInventory, orderapi.StepLockCoupon, orderapi.StepChargePayment, orderapi.StepCreateShipment, orderapi.StepAwardPoints, orderapi.StepConfirmStock}
	for i, step := range wantOrder {
		c := lastCommand(t, env)
		if c.Step != step || c.Action != message.Forward || c.AggregateID != "o1" || c.ReplyTo != orchestrator.ReplyTopicDefault {
			t.Fatalf("command %d = %s/%s aggregate %q reply_to %q; want %s/forward", i, c.Step, c.Action, c.AggregateID, c.ReplyTo, step)
		}
		env.clock.advance(time.Millisecond)
		mustReply(t, env, c, message.Success, outputs[step])
	}
	got, journal := get(t, env, in.ID)
	if got.State != saga.Completed || got.FinishedAt == nil {
		t.Fatalf("state = %s, want completed with finished_at", got.State)
	}
	var data steps.Order
	if err := json.Unmarshal(got.Data, &data); err != nil || data.PaymentID != "p1" || data.ShipmentID != "s1" || data.PointsBalance != 10 {
		t.Fatalf("outputs not merged into data: %s (%v)", got.Data, err)
	}
	if len(journal) != 7 || journal[0].Event != saga.JournalStarted || journal[6].To != saga.Completed {
		t.Fatalf("journal = %+v; want started + 6 step entries ending in completed", journal)
	}
	var wake *time.Time
	if err := env.pool.QueryRow(ctx, `SELECT next_wakeup_at FROM orch.sagas WHERE id = $1`, in.ID).Scan(&wake); err != nil || wake != nil {
		t.Fatalf("terminal saga keeps a wake-up time %v (%v)", wake, err)
	}
	if v := testutil.ToFloat64(env.metricsFinished(orderapi.SagaType, "completed")); v != 1 {
		t.Fatalf("sagas_finished_total{completed} = %v, want 1", v)
	}
	n, sum := env.sagaDuration(orderapi.SagaType, "completed")
	if want := got.FinishedAt.Sub(got.CreatedAt).Seconds(); n != 1 || sum != want || want <= 0 {
		t.Fatalf("saga_duration_seconds{completed} = %d observations, sum %v; want 1 of %v (start to finish)", n, sum, want)
	}
}

func (env *engineEnv) metricsFinished(typ, state string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
	if m := env.series("sagaflow_sagas_finished_total", typ, state); m != nil {
		g.Set(m.GetCounter().GetValue())
	}
	return g
}

// sagaDuration reads the count and sum of saga_duration_seconds{type,state}.
func (env *engineEnv) sagaDuration(typ, state string) (uint64, float64) {
	m := env.series("sagaflow_saga_duration_seconds", typ, state)
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// series is the gathered series name{type,state}, nil if there is none.
func (env *engineEnv) series(name, typ, state string) *dto.Metric {
	return env.labeled(name, map[string]string{"type": typ, "state": state})
}

// droppedTotal reads sagaflow_trace_context_dropped_total{where,header,reason}.
func (env *engineEnv) droppedTotal(where, header, reason string) float64 {
	m := env.labeled("sagaflow_trace_context_dropped_total", map[string]string{"where": where, "header": header, "reason": reason})
	return m.GetCounter().GetValue()
}

// labeled is the gathered series of name whose labels include want, nil
// if there is none.
func (env *engineEnv) labeled(name string, want map[string]string) *dto.Metric {
	mfs, _ := env.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

func TestEngineStartIsIdempotentUnderConcurrency(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	ids := make([]uuid.UUID, 8)
	createdN := atomic.Int32{}
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in, created, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "same", AggregateID: "o1", Data: order("o1")})
			if err != nil {
				t.Errorf("start %d: %v", i, err)
				return
			}
			if created {
				createdN.Add(1)
			}
			ids[i] = in.ID
		}()
	}
	wg.Wait()
	if createdN.Load() != 1 {
		t.Fatalf("%d starts reported created, want 1", createdN.Load())
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("starts with one key returned different sagas: %v", ids)
		}
	}
	if n := len(pendingCommands(t, env)); n != 1 {
		t.Fatalf("outbox holds %d commands, want 1", n)
	}
}

func TestEngineStartRejectsBadInput(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	cases := []struct {
		name string
		req  orchestrator.StartRequest
		want error
	}{
		{"unknown type", orchestrator.StartRequest{Type: "nope", IdempotencyKey: "k", AggregateID: "a", Data: order("o")}, saga.ErrUnknownType},
		{"no key", orchestrator.StartRequest{Type: orderapi.SagaType, AggregateID: "a", Data: order("o")}, orchestrator.ErrInvalidInput},
		{"no aggregate", orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "k", Data: order("o")}, orchestrator.ErrInvalidInput},
		{"data not object", orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "k", AggregateID: "a", Data: json.RawMessage(`[1]`)}, orchestrator.ErrInvalidInput},
		{"invalid order", orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "k", AggregateID: "a", Data: steps.Order{OrderID: "o"}}, orchestrator.ErrInvalidInput},
	}
	for _, c := range cases {
		if _, _, err := env.eng.Start(ctx, c.req); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
}

func TestEngineFailureBeforePivotCompensatesInReverse(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	in, _, err := env.eng.Start(context.Background(), orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "k", AggregateID: "o1", Data: order("o1")})
	if err != nil {
		t.Fatal(err)
	}
	mustReply(t, env, lastCommand(t, env), message.Success, orderapi.ReserveInventoryResult{ReservationID: "r"})
	mustReply(t, env, lastCommand(t, env), message.Success, orderapi.LockCouponResult{})
	mustReply(t, env, lastCommand(t, env), message.Failure, nil) // payment declined
	c := lastCommand(t, env)
	if c.Step != orderapi.StepLockCoupon || c.Action != message.Compensate {
		t.Fatalf("first compensation = %s/%s, want lock-coupon/compensate", c.Step, c.Action)
	}
	mustReply(t, env, c, message.Success, nil)
	c = lastCommand(t, env)
	if c.Step != orderapi.StepReserveInventory || c.Action != message.Compensate {
		t.Fatalf("second compensation = %s/%s, want reserve-inventory/compensate", c.Step, c.Action)
	}
	// A duplicate of an already applied reply is late, journaled, ignored.
	mustReply(t, env, lastCommand(t, env), message.Success, nil)
	mustReply(t, env, c, message.Success, nil)
	got, journal := get(t, env, in.ID)
	if got.State != saga.Compensated {
		t.Fatalf("state = %s, want compensated", got.State)
	}
	if !journal[len(journal)-1].Ignored || journal[len(journal)-1].Event != saga.JournalLate {
		t.Fatalf("last journal entry = %+v, want an ignored late reply", journal[len(journal)-1])
	}
}

func TestEngineTimersRetryAndTimeOut(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	in, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "k", AggregateID: "o1", Data: order("o1")})
	if err != nil {
		t.Fatal(err)
	}
	// Nothing is due yet.
	if n, err := env.eng.FireDue(ctx, 10); err != nil || n != 0 {
		t.Fatalf("FireDue before timeout = %d, %v; want 0", n, err)
	}
	// A retry answer schedules a re-send after backoff, fired by the timer.
	mustReply(t, env, lastCommand(t, env), message.Retry, nil)
	before := len(pendingCommands(t, env))
	env.clock.advance(time.Second)
	if n, err := env.eng.FireDue(ctx, 10); err != nil || n != 1 {
		t.Fatalf("FireDue after backoff = %d, %v; want 1", n, err)
	}
	cs := pendingCommands(t, env)
	if len(cs) != before+1 || cs[len(cs)-1].Attempt != 2 || cs[len(cs)-1].Step != orderapi.StepReserveInventory {
		t.Fatalf("after backoff want reserve-inventory attempt 2, got %+v", cs[len(cs)-1])
	}
	// No answer within the timeout before the pivot: outcome unknown, the
	// same action is re-sent after the backoff (nothing sent at the timeout).
	env.clock.advance(11 * time.Second)
	if n, err := env.eng.FireDue(ctx, 10); err != nil || n != 1 {
		t.Fatalf("FireDue after timeout = %d, %v", n, err)
	}
	if got := pendingCommands(t, env); len(got) != len(cs) {
		t.Fatalf("a timeout sent %+v at once, want a re-send only after the backoff", got[len(cs):])
	}
	env.clock.advance(5 * time.Second)
	if n, err := env.eng.FireDue(ctx, 10); err != nil || n != 1 {
		t.Fatalf("FireDue after the timeout's backoff = %d, %v", n, err)
	}
	if c := lastCommand(t, env); c.Step != orderapi.StepReserveInventory || c.Action != message.Forward || c.Attempt != 3 {
		t.Fatalf("after a pre-pivot timeout and its backoff want reserve-inventory attempt 3, got %s/%s attempt %d", c.Step, c.Action, c.Attempt)
	}
	// Out of time (the saga's 2-minute deadline before the pivot): compensate
	// the step too.
	env.clock.advance(2 * time.Minute)
	if n, err := env.eng.FireDue(ctx, 10); err != nil || n != 1 {
		t.Fatalf("FireDue after the deadline = %d, %v", n, err)
	}
	c := lastCommand(t, env)
	if c.Step != orderapi.StepReserveInventory || c.Action != message.Compensate {
		t.Fatalf("after the deadline want reserve-inventory/compensate, got %s/%s", c.Step, c.Action)
	}
	// The late success of a timed-out forward is ignored; the compensation
	// already sent undoes it at the participant.
	mustReply(t, env, cs[len(cs)-1], message.Success, orderapi.ReserveInventoryResult{})
	mustReply(t, env, c, message.Success, nil)
	got, _ := get(t, env, in.ID)
	if got.State != saga.Compensated {
		t.Fatalf("state = %s, want compensated", got.State)
	}
}

func TestEngineOperatorActionsAreJournaledOrRefused(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	in, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "k", AggregateID: "o1", Data: order("o1")})
	if err != nil {
		t.Fatal(err)
	}
	mustReply(t, env, lastCommand(t, env), message.Success, orderapi.ReserveInventoryResult{})
	mustReply(t, env, lastCommand(t, env), message.Success, orderapi.LockCouponResult{})
	mustReply(t, env, lastCommand(t, env), message.Success, orderapi.ChargePaymentResult{PaymentID: "p"})
	// Past the pivot: compensate is refused and leaves no trace.
	_, before := get(t, env, in.ID)
	_, err = env.eng.Operate(ctx, in.ID, saga.Operator{Action: saga.ActionCompensate, Actor: "alice", Reason: "customer asked"})
	var refused *saga.RefusedError
	if !errors.As(err, &refused) || !errors.Is(err, saga.ErrRefused) {
		t.Fatalf("compensate after the pivot: err = %v, want a RefusedError", err)
	}
	if _, after := get(t, env, in.ID); len(after) != len(before) {
		t.Fatalf("a refused action wrote %d journal entries", len(after)-len(before))
	}
	// A business failure after the pivot makes the saga failed.
	mustReply(t, env, lastCommand(t, env), message.Failure, nil)
	got, _ := get(t, env, in.ID)
	if got.State != saga.Failed {
		t.Fatalf("state = %s, want failed", got.State)
	}
	page, err := env.eng.List(ctx, orchestrator.Filter{Stuck: true})
	if err != nil || len(page.Sagas) != 1 || page.Sagas[0].ID != in.ID {
		t.Fatalf("List(stuck) = %+v, %v; want the failed saga", page, err)
	}
	got, err = env.eng.Operate(ctx, in.ID, saga.Operator{Action: saga.ActionResolve, Actor: "bob", Reason: "shipped by hand", Outcome: saga.Completed})
	if err != nil || got.State != saga.Completed {
		t.Fatalf("resolve: %v, state %s", err, got.State)
	}
	_, journal := get(t, env, in.ID)
	last := journal[len(journal)-1]
	if last.Actor != "bob" || last.Reason != "shipped by hand" || last.From != saga.Failed || last.To != saga.Completed {
		t.Fatalf("resolve journal entry = %+v", last)
	}
}

func TestEngineUnknownSagaOrStepIsInvalidMessage(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	c := message.Command{MessageID: uuid.New(), SagaID: uuid.New(), Step: orderapi.StepReserveInventory, Action: message.Forward}
	if err := env.reply(t, c, message.Success, nil); !errors.Is(err, message.ErrInvalid) {
		t.Fatalf("reply for unknown saga: err = %v, want message.ErrInvalid", err)
	}
	in, _, err := env.eng.Start(context.Background(), orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "k", AggregateID: "o1", Data: order("o1")})
	if err != nil {
		t.Fatal(err)
	}
	c = message.Command{MessageID: uuid.New(), SagaID: in.ID, Step: "no-such-step", Action: message.Forward}
	if err := env.reply(t, c, message.Success, nil); !errors.Is(err, message.ErrInvalid) {
		t.Fatalf("reply for unknown step: err = %v, want message.ErrInvalid", err)
	}
}

// Two replicas applying the same reply concurrently: the conditional update
// lets exactly one transition through; the loser reloads and sees it late.
func TestEngineConcurrentRepliesApplyOnce(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	other, err := orchestrator.NewEngine(env.pool, env.eng.Registry(), &orchestrator.EngineConfig{Schema: "orch", Now: env.clock.now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for round := range 10 {
		in, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: uuid.NewString(), AggregateID: "o", Data: order("o")})
		if err != nil {
			t.Fatal(err)
		}
		c := lastCommand(t, env)
		var wg sync.WaitGroup
		for _, e := range []*orchestrator.Engine{env.eng, other, env.eng, other} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := message.Reply{MessageID: uuid.New(), InReplyTo: c.MessageID, SagaID: in.ID, Step: c.Step, Action: c.Action, Outcome: message.Success, Payload: json.RawMessage(`{"reservation_id":"r"}`)}
				if err := pgx.BeginFunc(ctx, env.pool, func(tx pgx.Tx) error { return e.ApplyReply(ctx, tx, r) }); err != nil {
					t.Errorf("round %d: %v", round, err)
				}
			}()
		}
		wg.Wait()
		got, journal := get(t, env, in.ID)
		applied, late := 0, 0
		for _, j := range journal {
			switch {
			case j.Event == saga.JournalStepSucceeded:
				applied++
			case j.Ignored:
				late++
			}
		}
		if applied != 1 || late != 3 || got.Version != 2 {
			t.Fatalf("round %d: %d applied, %d late, version %d; want 1, 3, 2", round, applied, late, got.Version)
		}
		var lockCmds int
		for _, cmd := range pendingCommands(t, env) {
			if cmd.SagaID == in.ID && cmd.Step == orderapi.StepLockCoupon {
				lockCmds++
			}
		}
		if lockCmds != 1 {
			t.Fatalf("round %d: %d lock-coupon commands enqueued, want 1", round, lockCmds)
		}
	}
}

// A started saga stores a secret of its own, its commands carry the ids it
// keys, and no saga row may be without one.
func TestEngineStoresTheSecretAndKeysCommandIDs(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	in, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "sec", AggregateID: "o1", Data: order("o1")})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := get(t, env, in.ID)
	if len(got.Secret) != saga.SecretBytes {
		t.Fatalf("stored secret has %d bytes, want %d", len(got.Secret), saga.SecretBytes)
	}
	c := lastCommand(t, env)
	if c.MessageID != got.CommandID(c.Step, c.Action, 1) {
		t.Fatalf("first command id %s is not the secret-keyed id", c.MessageID)
	}
	// Every saga row has one (migration 016).
	if _, err := env.pool.Exec(ctx, `UPDATE orch.sagas SET secret = NULL WHERE id = $1`, in.ID); err == nil {
		t.Fatal("a saga row took an empty secret")
	}
}

// GetPage reads one page of the journal from Postgres: the newest entries
// first as pages, oldest first within a page, with the total and a cursor.
func TestEngineGetPageReadsTheJournalInPages(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	in, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "page", AggregateID: "o1", Data: order("o1")})
	if err != nil {
		t.Fatal(err)
	}
	c := lastCommand(t, env)
	for range 6 { // late duplicates: ignored, journaled
		mustReply(t, env, c, message.Retry, nil)
	}
	_, all := get(t, env, in.ID)
	if len(all) < 7 {
		t.Fatalf("journal has %d entries, want at least 7", len(all))
	}
	var got []saga.JournalEntry
	before := int64(0)
	for pages := 0; ; pages++ {
		_, js, err := env.eng.GetPage(ctx, in.ID, before, 3)
		if err != nil {
			t.Fatal(err)
		}
		if js.Total != len(all) || len(js.Entries) > 3 || len(js.Entries) == 0 {
			t.Fatalf("page %d: %d entries of total %d, want 1-3 of %d", pages, len(js.Entries), js.Total, len(all))
		}
		for i := 1; i < len(js.Entries); i++ {
			if js.Entries[i].ID <= js.Entries[i-1].ID {
				t.Fatalf("page %d is not oldest first", pages)
			}
		}
		got = append(append([]saga.JournalEntry(nil), js.Entries...), got...)
		if js.Next == 0 {
			break
		}
		if js.Next != js.Entries[0].ID {
			t.Fatalf("next cursor %d, want the page's oldest id %d", js.Next, js.Entries[0].ID)
		}
		before = js.Next
	}
	if len(got) != len(all) {
		t.Fatalf("pages gave %d entries, the journal has %d", len(got), len(all))
	}
	for i := range got {
		if got[i].ID != all[i].ID {
			t.Fatalf("entry %d: id %d from pages, %d in the journal", i, got[i].ID, all[i].ID)
		}
	}
	if _, _, err := env.eng.GetPage(ctx, in.ID, 0, 0); err == nil {
		t.Fatal("GetPage with limit 0 did not fail")
	}
}
