package metricscheck_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/demo"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/metricscheck"
	"github.com/sagaflow/sagaflow/internal/retention"
	"github.com/sagaflow/sagaflow/internal/stdmetrics"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

const wait = 90 * time.Second

// promtool finds promtool; under CI=true a missing promtool fails the test.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (install it: apt-get update && apt-get install -y prometheus): %v", err)
	}
	return p
}

func checkWithPromtool(t *testing.T, scrape []byte, what string) {
	t.Helper()
	cmd := exec.Command(promtool(t), "check", "metrics")
	cmd.Stdin = bytes.NewReader(scrape)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool check metrics on the %s scrape failed: %v\n%s", what, err, out)
	}
}

func get(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// firstReply reads one record of the reply topic from whichever partition
// has one first (partition readers: no group join).
func firstReply(ctx context.Context, t *testing.T, brokers []string, topic string, partitions int) kafka.Message {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan kafka.Message, partitions)
	var wg sync.WaitGroup
	for p := range partitions {
		wg.Go(func() {
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p, MaxWait: 50 * time.Millisecond})
			defer r.Close()
			if m, err := r.ReadMessage(ctx); err == nil {
				got <- m
			}
		})
	}
	defer wg.Wait()
	select {
	case m := <-got:
		return m
	case <-ctx.Done():
		t.Errorf("no reply on %s: %v", topic, ctx.Err())
		return kafka.Message{}
	}
}

// withNewID re-encodes reply m under a fresh message id (and, if inReplyTo
// is not nil, a different in_reply_to).
func withNewID(t *testing.T, m kafka.Message, inReplyTo *uuid.UUID, sign func(step string) *message.Signer) kafka.Message {
	t.Helper()
	r, err := message.DecodeReply(m.Value)
	if err != nil {
		t.Fatalf("decode reply: %v", err)
	}
	r.MessageID = uuid.New()
	if inReplyTo != nil {
		r.InReplyTo = *inReplyTo
	}
	b, err := message.EncodeReply(r)
	if err != nil {
		t.Fatalf("encode reply: %v", err)
	}
	// Signed with the key of the step's participant, as a participant's
	// own copy would be: the engine takes it as that participant's reply
	// and judges it by what it answers.
	hs := map[string]string{message.HeaderMessageID: r.MessageID.String(), message.HeaderSagaID: r.SagaID.String()}
	sign(r.Step).SignString(m.Topic, string(m.Key), b, hs)
	out := kafka.Message{Key: m.Key, Value: b}
	for k, v := range hs {
		out.Headers = append(out.Headers, kafka.Header{Key: k, Value: []byte(v)})
	}
	return out
}

// labelled checks series the workload must move, by label.
func labelled(s metricscheck.Scrape) []string {
	var bad []string
	for _, c := range []struct{ name, label string }{
		{"sagaflow_step_duration_seconds_count", `step="charge-payment"`},
		{"sagaflow_sagas_finished_total", `state="completed"`},
		{"sagaflow_sagas_finished_total", `state="compensated"`},
		{"sagaflow_inbox_duplicates_total", `consumer="sagaflow-orchestrator"`},
		{"sagaflow_dlq_messages_total", `consumer="sagaflow-orchestrator"`},
		{"sagaflow_late_replies_total", `type="place-order"`},
		{"sagaflow_relay_published_total", `outbox="sagaflow"`},
		{"sagaflow_retention_purged_total", `table="sagaflow.outbox"`},
	} {
		if s.Sum(c.name, c.label) <= 0 {
			bad = append(bad, fmt.Sprintf("%s{%s} is zero or missing in the scrape", c.name, c.label))
		}
	}
	return bad
}

// TestLiveScrapeDuringDemo runs the demo workload (failure mix, transient
// failures) with /metrics served over its registry, injects a garbage reply
// (DLQ), a redelivered reply (duplicate), a reply under a new id (late) and
// one answering a command never sent (stray: DLQ), runs retention beside it,
// scrapes /metrics while the workload runs, checks the scrape with promtool
// and asserts every promised metric is there and moved.
func TestLiveScrapeDuringDemo(t *testing.T) {
	t.Parallel()
	dbURL := testkit.Database(t)
	brokers := testkit.Brokers(t)
	reg := prometheus.NewRegistry()
	if err := stdmetrics.Register(reg, "sagaflow"); err != nil {
		t.Fatal(err)
	}
	rm, err := retention.NewMetrics(reg, "sagaflow")
	if err != nil {
		t.Fatal(err)
	}
	// Created before the demo's (which shares them), so the per-type
	// series show at zero as in serve.
	sm, err := orchestrator.NewMetrics(reg, "sagaflow")
	if err != nil {
		t.Fatal(err)
	}
	sm.InitTypes(orderapi.SagaType)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	t.Cleanup(srv.Close)

	// The run's keys: the demo signs commands and replies with them, and
	// the injected copies below are signed by their step's participant.
	sagas := saga.NewRegistry()
	if err := steps.Register(sagas); err != nil {
		t.Fatal(err)
	}
	orchKey, err := message.GenerateKey("live-orchestrator")
	if err != nil {
		t.Fatal(err)
	}
	cmdSigner, err := message.NewSigner(orchKey)
	if err != nil {
		t.Fatal(err)
	}
	replyKeys := map[string]message.Key{}
	ring := &message.Keyring{}
	signers := map[string]*message.Signer{} // by step
	def, _ := sagas.Latest(orderapi.SagaType)
	for _, sd := range def.Steps {
		k, ok := replyKeys[sd.Participant]
		if !ok {
			if k, err = message.GenerateKey("live-" + sd.Participant); err != nil {
				t.Fatal(err)
			}
			replyKeys[sd.Participant] = k
			if err := ring.Add(sd.Participant, k); err != nil {
				t.Fatal(err)
			}
		}
		if signers[sd.Name], err = message.NewSigner(k); err != nil {
			t.Fatal(err)
		}
	}
	signerOf := func(step string) *message.Signer { return signers[step] }

	ctx := testkit.Context(t, 3*wait)
	runDone := make(chan struct{})
	var during []byte
	var duringErr string
	var bg sync.WaitGroup
	t.Cleanup(bg.Wait)
	onReady := func(svc *orchestrator.Service) {
		schema := svc.Engine().Outbox().Schema()
		replyTopic := svc.Engine().ReplyTopic()
		bg.Go(func() {
			// Retention beside the workload: sent outbox rows (kept:
			// KeepSent below) go at once, inbox rows and sagas stay (the
			// window is a day).
			pool, err := pgxpool.New(ctx, dbURL)
			if err != nil {
				t.Errorf("pool: %v", err)
				return
			}
			defer pool.Close()
			p, err := retention.New(pool, &retention.Config{Schemas: []string{schema}, OrchestratorSchema: schema,
				SentOutboxAfter: time.Millisecond, Interval: 100 * time.Millisecond, Metrics: rm})
			if err != nil {
				t.Errorf("retention: %v", err)
				return
			}
			rctx, cancel := context.WithCancel(ctx)
			go func() { <-runDone; cancel() }()
			if err := p.Run(rctx); err != nil {
				t.Errorf("retention Run: %v", err)
			}
		})
		bg.Go(func() {
			w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: replyTopic, Balancer: kafkaclient.Balancer(), BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
			defer w.Close()
			orig := firstReply(ctx, t, brokers, replyTopic, 8)
			if orig.Value == nil {
				return
			}
			stranger := uuid.New()
			msgs := []kafka.Message{
				{Key: []byte("garbage"), Value: []byte("{not a reply")},   // DLQ
				{Key: orig.Key, Value: orig.Value, Headers: orig.Headers}, // duplicate
				withNewID(t, orig, nil, signerOf),                         // late (original or copy)
				withNewID(t, orig, &stranger, signerOf),                   // illegal
			}
			if err := w.WriteMessages(ctx, msgs...); err != nil {
				t.Errorf("inject replies: %v", err)
			}
		})
		bg.Go(func() {
			// Scrape until a scrape taken during the run meets every
			// requirement (or the run ends).
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-runDone:
					if during == nil {
						duringErr = "the workload ended before a scrape met every requirement; last scrape: " + duringErr
					}
					return
				case <-tick.C:
				}
				b, err := get(srv.URL + "/metrics")
				if err != nil {
					duringErr = err.Error()
					continue
				}
				s, err := metricscheck.Parse(bytes.NewReader(b))
				if err != nil {
					duringErr = err.Error()
					continue
				}
				if bad := append(metricscheck.Check(s, metricscheck.Required), labelled(s)...); len(bad) > 0 {
					duringErr = strings.Join(bad, "; ")
					continue
				}
				during = b
				return
			}
		})
	}
	// -race on a shared 2-core machine is slow: generous step timeouts keep
	// the run about metrics, not about timeouts.
	for _, st := range []string{orderapi.StepReserveInventory, orderapi.StepLockCoupon, orderapi.StepChargePayment, orderapi.StepCreateShipment, orderapi.StepAwardPoints, orderapi.StepConfirmStock} {
		if err := sagas.Override(orderapi.SagaType, st, saga.StepOverride{Timeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := demo.Run(ctx, demo.Config{
		DatabaseURL: dbURL, Brokers: brokers, Registerer: reg, OnReady: onReady, Registry: sagas,
		Mix:              workload.Mix{Orders: 300, Seed: 11, OutOfStockRate: 0.1, CouponTakenRate: 0.1, DeclineRate: 0.1, LimitCents: 100_000},
		ShippingFailRate: 0.2, PointsFailRate: 0.2, Concurrency: 16, Timeout: wait,
		Engine:      orchestrator.EngineConfig{GaugeInterval: 100 * time.Millisecond, Signing: orchestrator.Signing{Commands: cmdSigner, Replies: ring}},
		CommandKeys: []message.Key{orchKey}, ReplyKeys: replyKeys,
		// The relays keep sent rows, so retention has outbox rows to purge.
		KeepSent: true,
	})
	close(runDone)
	bg.Wait()
	if err != nil {
		t.Fatalf("demo.Run: %v", err)
	}
	t.Logf("demo: %d orders in %.1fs (%d completed, %d compensated)", sum.Orders, sum.ElapsedSeconds, sum.Completed, sum.Compensated)
	if !sum.InvariantsOK || sum.NonTerminal != 0 {
		t.Errorf("demo with retention and injected replies: invariants_ok=%v non_terminal=%d violations=%v", sum.InvariantsOK, sum.NonTerminal, sum.Violations)
	}
	if during == nil {
		t.Fatalf("no scrape during the workload met the requirements: %s", duringErr)
	}
	checkWithPromtool(t, during, "during-workload")
	s, err := metricscheck.Parse(bytes.NewReader(during))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range labelled(s) {
		t.Error(bad)
	}
	// Every outbox (orchestrator and the five participants) has its gauges.
	if n := len(s["sagaflow_outbox_pending"]); n < 6 {
		t.Errorf("sagaflow_outbox_pending has %d series, want one per outbox (6): %v", n, s["sagaflow_outbox_pending"])
	}

	// The dashboard names only metrics this scrape has.
	dash, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "sagaflow.json"))
	if err != nil {
		t.Fatal(err)
	}
	names, err := metricscheck.DashboardMetrics(dash)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !s.Has(n) {
			t.Errorf("deploy/grafana/sagaflow.json uses %s, which the scrape does not have", n)
		}
	}
	if len(names) < 10 {
		t.Errorf("dashboard uses only %d metrics: %v", len(names), names)
	}
}
