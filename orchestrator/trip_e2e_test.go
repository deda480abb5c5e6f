package orchestrator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants/cars"
	"github.com/sagaflow/sagaflow/participants/flights"
	"github.com/sagaflow/sagaflow/participants/hotels"
	"github.com/sagaflow/sagaflow/participants/reference"
	"github.com/sagaflow/sagaflow/relay"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

// book-trip through the real pipeline (the orchestrator's relay, the
// Kafka protocol, the flights, hotels, cars and payment participants behind
// their barriers, and back): a trip completes with every reservation
// confirmed and charged; a trip whose hotel is sold out is compensated with
// the flight and car released and nothing charged; a trip waiting for its
// approval is approved through the events API (sent before it reached the
// wait) and completes; one refused is compensated; one cancelled before its
// pivot is compensated.
func TestBookTripEndToEnd(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	brokers := testkit.Brokers(t)
	prefix := "bt" + strings.ToLower(testkit.RandomSuffix(6)) + "."
	replyTopic := prefix + "saga.replies"
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	svc, err := orchestrator.New(pool, reg, &orchestrator.Config{
		Brokers: brokers, Partitions: 2, GroupID: prefix + "orchestrator",
		Engine: orchestrator.EngineConfig{TopicPrefix: prefix, ReplyTopic: replyTopic, TimerInterval: 50 * time.Millisecond},
		Relay:  relay.Config{KeepSent: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	parts, err := reference.New(pool, reference.Options{Brokers: brokers, TopicPrefix: prefix, ReplyTopics: []string{replyTopic},
		Partitions: 2, PaymentLimitCents: 100_000, KeepSent: true, Trips: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 2*time.Minute)
	if err := svc.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if err := parts.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	schema := reference.Options{}.Schema
	if err := flights.Seed(ctx, pool, schema(tripapi.Flights), map[string]int{"LH1": 10}); err != nil {
		t.Fatal(err)
	}
	if err := hotels.Seed(ctx, pool, schema(tripapi.Hotels), map[string]int{"ritz": 10, "full": 0}); err != nil {
		t.Fatal(err)
	}
	if err := cars.Seed(ctx, pool, schema(tripapi.Cars), map[string]int{"mini": 10}); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	errc := make(chan error, 2)
	go func() { errc <- svc.Run(runCtx) }()
	go func() { errc <- parts.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		for range 2 {
			if err := <-errc; err != nil {
				t.Errorf("run: %v", err)
			}
		}
	})
	h, err := api.New(svc.Engine(), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	post := func(path, body string, want int) map[string]any {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, bytes.NewBufferString(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		if resp.StatusCode != want {
			t.Fatalf("POST %s: %d %v, want %d", path, resp.StatusCode, m, want)
		}
		return m
	}
	start := func(trip, hotel, car string, approval bool) uuid.UUID {
		t.Helper()
		body := fmt.Sprintf(`{"type":"book-trip","idempotency_key":%q,"aggregate_id":%q,"data":{"trip_id":%q,"customer":"c","flight":"LH1","hotel":%q,"car":%q,"amount_cents":1000,"needs_approval":%v}}`,
			trip, trip, trip, hotel, car, approval)
		m := post("/sagas", body, http.StatusCreated)
		id, err := uuid.Parse(fmt.Sprint(m["id"]))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	ok := start("trip-ok", "ritz", "mini", false)
	soldOut := start("trip-full", "full", "mini", false)
	approved := start("trip-approved", "ritz", "", true)
	post("/sagas/"+approved.String()+"/events", `{"name":"approval","event_id":"mgr-1","data":{"approved":true}}`, http.StatusAccepted)
	refused := start("trip-refused", "ritz", "mini", true)
	state := func(id uuid.UUID) saga.Instance {
		in, _, err := svc.Engine().Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	testkit.Eventually(t, 60*time.Second, "the refused trip waiting for its approval", func() (bool, error) {
		return state(refused).Steps[3].State == saga.StepWaiting, nil
	})
	post("/sagas/"+refused.String()+"/events", `{"name":"approval","event_id":"mgr-2","data":{"approved":false}}`, http.StatusAccepted)
	cancelled := start("trip-cancelled", "ritz", "mini", true)
	testkit.Eventually(t, 60*time.Second, "the cancelled trip waiting for its approval", func() (bool, error) {
		return state(cancelled).Steps[3].State == saga.StepWaiting, nil
	})
	post("/sagas/"+cancelled.String()+"/cancel", `{"reason":"changed plans"}`, http.StatusAccepted)

	want := map[uuid.UUID]saga.State{ok: saga.Completed, soldOut: saga.Compensated, approved: saga.Completed, refused: saga.Compensated, cancelled: saga.Compensated}
	testkit.Eventually(t, 90*time.Second, "every trip terminal", func() (bool, error) {
		for id, st := range want {
			if state(id).State != st {
				return false, nil
			}
		}
		return true, nil
	})
	post("/sagas/"+ok.String()+"/cancel", `{"reason":"too late"}`, http.StatusConflict)

	// What the participants' tables say: nothing reserved without a charge,
	// every confirmed reservation charged.
	reservations := map[string]map[uuid.UUID]string{}
	for _, p := range reference.TripNames {
		st, err := flights.States(ctx, pool, schema(p))
		if err != nil {
			t.Fatal(err)
		}
		reservations[p] = st
	}
	wantStates := map[uuid.UUID]map[string]string{
		ok:        {tripapi.Flights: "confirmed", tripapi.Hotels: "confirmed", tripapi.Cars: "confirmed"},
		soldOut:   {tripapi.Flights: "released", tripapi.Hotels: "", tripapi.Cars: "released"},
		approved:  {tripapi.Flights: "confirmed", tripapi.Hotels: "confirmed", tripapi.Cars: ""},
		refused:   {tripapi.Flights: "released", tripapi.Hotels: "released", tripapi.Cars: "released"},
		cancelled: {tripapi.Flights: "released", tripapi.Hotels: "released", tripapi.Cars: "released"},
	}
	for id, byPart := range wantStates {
		for p, want := range byPart {
			if got := reservations[p][id]; got != want {
				t.Errorf("saga %s: %s reservation %q, want %q", id, p, got, want)
			}
		}
	}
	var charged []string
	rows, err := pool.Query(ctx, `SELECT order_id FROM `+schema("payment")+`.ledger WHERE kind = 'charge' ORDER BY order_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			t.Fatal(err)
		}
		charged = append(charged, o)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if strings.Join(charged, ",") != "trip-approved,trip-ok" {
		t.Fatalf("charged %v, want exactly the two completed trips", charged)
	}
}
