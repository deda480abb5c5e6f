package orchestrator_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/saga"
)

// fakeClock is the engine's clock: real time moved on by the test.
type fakeClock struct{ offset atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *fakeClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

type laterData struct {
	Order  string `json:"order"`
	Charge string `json:"charge,omitempty"`
}

// TestAcceptedStepCompletesLater: through the real pipeline (the
// orchestrator, the Kafka protocol on the in-process broker, a participant
// behind its barrier on Postgres) a step whose participant answers
// accepted, with a 1 s step timeout, is completed 30 s later (the engine's
// clock moved on, its timers fired): nothing is re-sent after the accepted
// reply, the saga completes with the output of the completion, and the
// journal shows the step accepted, then succeeded.
func TestAcceptedStepCompletesLater(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	brokers := testkit.Brokers(t)
	prefix := "al" + strings.ToLower(testkit.RandomSuffix(6)) + "."
	replyTopic := prefix + "saga.replies"
	const participant, sagaType = "gateway", "answer-later"
	def, err := saga.Definition[laterData]{Name: sagaType, Steps: []saga.Step[laterData]{
		{Name: "charge", Participant: participant, Kind: saga.Pivot, Timeout: time.Second,
			Command:   func(d laterData) (any, error) { return map[string]string{"order": d.Order}, nil },
			OnSuccess: mergeCharge},
		{Name: "notify", Participant: participant, Kind: saga.Retryable, Timeout: time.Second,
			Command: func(d laterData) (any, error) { return map[string]string{"charge": d.Charge}, nil }},
	}}.Build()
	if err != nil {
		t.Fatal(err)
	}
	reg := saga.NewRegistry()
	if err := reg.Register(def); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{}
	svc, err := orchestrator.New(pool, reg, &orchestrator.Config{
		Brokers: brokers, Partitions: 1, GroupID: prefix + "orchestrator",
		Engine: orchestrator.EngineConfig{TopicPrefix: prefix, ReplyTopic: replyTopic, TimerInterval: 20 * time.Millisecond, Now: clock.Now},
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := participants.New(pool, &participants.Config{Name: participant, Brokers: brokers, ReplyTopics: []string{replyTopic},
		CommandTopic: message.CommandTopic(prefix, participant), GroupID: prefix + participant})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var accepted []participants.Ref // the work the gateway took on, to finish later
	var charges atomic.Int32
	if err := p.Handle("charge", participants.One(func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
		charges.Add(1)
		mu.Lock()
		accepted = append(accepted, participants.RefOf(cmd))
		mu.Unlock()
		return participants.Accepted(), nil
	}), nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Handle("notify", participants.One(func(context.Context, pgx.Tx, message.Command) (participants.Result, error) {
		return participants.Success(nil), nil
	}), nil); err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 2*time.Minute)
	if err := svc.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	sets, err := p.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	testkit.Migrate(t, pool, sets)
	if err := kafkaclient.EnsureTopics(ctx, brokers, 1, 1, message.CommandTopic(prefix, participant)+inbox.DLQSuffixDefault); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	errc := make(chan error, 2)
	go func() { errc <- svc.Run(runCtx) }()
	go func() { errc <- p.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		for range 2 {
			if err := <-errc; err != nil {
				t.Errorf("run: %v", err)
			}
		}
	})
	eng := svc.Engine()
	in, _, err := eng.Start(ctx, orchestrator.StartRequest{Type: sagaType, IdempotencyKey: "o-1", AggregateID: "o-1", Data: laterData{Order: "o-1"}})
	if err != nil {
		t.Fatal(err)
	}
	get := func() (saga.Instance, []saga.JournalEntry) {
		t.Helper()
		in, journal, err := eng.Get(ctx, in.ID)
		if err != nil {
			t.Fatal(err)
		}
		return in, journal
	}
	testkit.Eventually(t, 60*time.Second, "the charge step accepted", func() (bool, error) {
		in, _ := get()
		return in.Steps[0].State == saga.StepAccepted, nil
	})
	acceptedAt, _ := get()
	sends := acceptedAt.Steps[0].Attempts

	// 30 s pass on the engine's clock, 30 step timeouts: the timers run
	// (FireDue at the new time too) and send nothing.
	for range 30 {
		clock.Advance(time.Second)
		if _, err := eng.FireDue(ctx, 100); err != nil {
			t.Fatal(err)
		}
	}
	if in, _ := get(); in.Steps[0].State != saga.StepAccepted || in.Steps[0].Attempts != sends {
		t.Fatalf("after 30 s accepted: charge %s with %d sends, want still accepted with %d", in.Steps[0].State, in.Steps[0].Attempts, sends)
	}
	mu.Lock()
	ref := accepted[0]
	mu.Unlock()
	if ref != (participants.Ref{SagaID: in.ID, Step: "charge"}) {
		t.Fatalf("reference %v, want saga %s step charge", ref, in.ID)
	}
	// The gateway finishes the work and completes the step from its own
	// code path, in its own transaction.
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return p.Complete(ctx, tx, ref, map[string]string{"charge": "ch-42"})
	}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, "the saga completed", func() (bool, error) {
		in, _ := get()
		return in.State == saga.Completed, nil
	})
	final, journal := get()
	if final.Steps[0].Attempts != sends || charges.Load() != 1 {
		t.Fatalf("charge sent %d times (%d when accepted), handler ran %d times; want no re-send after accepted, one run", final.Steps[0].Attempts, sends, charges.Load())
	}
	var data laterData
	if err := json.Unmarshal(final.Data, &data); err != nil || data.Charge != "ch-42" {
		t.Fatalf("saga data %s (%v), want the completion's output merged", final.Data, err)
	}
	var charge []string
	acceptedIdx := -1
	for i, j := range journal {
		if j.Step != "charge" || j.Ignored {
			continue
		}
		charge = append(charge, j.Event)
		if j.Event == saga.JournalStepAccepted && acceptedIdx < 0 {
			acceptedIdx = i
		}
		if acceptedIdx >= 0 && (j.Event == saga.JournalResent || j.Event == saga.JournalTimeout) {
			t.Fatalf("journal %q after the accepted reply: %v", j.Event, charge)
		}
	}
	if n := len(charge); n < 2 || charge[n-2] != saga.JournalStepAccepted || charge[n-1] != saga.JournalStepSucceeded {
		t.Fatalf("charge journal %v, want it to end with %q then %q", charge, saga.JournalStepAccepted, saga.JournalStepSucceeded)
	}
}

func mergeCharge(d *laterData, out json.RawMessage) error {
	var o struct {
		Charge string `json:"charge"`
	}
	if err := json.Unmarshal(out, &o); err != nil {
		return err
	}
	d.Charge = o.Charge
	return nil
}
