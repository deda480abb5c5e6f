package workload

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/cars"
	"github.com/sagaflow/sagaflow/participants/flights"
	"github.com/sagaflow/sagaflow/participants/hotels"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

// The trip mix: fixed shares, the trips' count is Mix.Trips.
const (
	// TripCarRate: share of trips with a car (the others skip reserve-car
	// and confirm-car).
	TripCarRate = 0.6
	// TripApprovalRate: share of trips with needs_approval.
	TripApprovalRate = 0.4
	// TripRefuseRate: share of the approvals the workload refuses.
	TripRefuseRate = 0.3
	// TripSoldOutRate: share of trips for a hotel whose capacity covers
	// only half of them (the others' flight and car are compensated).
	TripSoldOutRate = 0.1
	scarceHotel     = "hotel-scarce"
)

// TripItems are the flights, hotels and cars the planned trips ask for,
// by participant (the scarce hotel aside); `participants --seed-stock`
// gives them capacity.
var TripItems = map[string][]string{
	tripapi.Flights: {"LH100", "BA200", "AF300"},
	tripapi.Hotels:  {"hotel-ritz", "hotel-savoy", "hotel-adlon"},
	tripapi.Cars:    {"car-mini", "car-golf", "car-van"},
}

// newTrips adds m.Trips trips to p, deterministically from m.Seed: the
// mix above, Refused for the approvals to refuse and the capacities of
// every item (ample but for the scarce hotel).
func newTrips(m Mix, p *Plan) {
	if m.Trips <= 0 {
		return
	}
	r := rand.New(rand.NewPCG(uint64(m.Seed), 0x7219))
	p.Refused = map[string]bool{}
	scarce := 0
	for i := range m.Trips {
		t := steps.Trip{
			TripID:      fmt.Sprintf("trip-%d-%06d", m.Seed, i),
			Customer:    fmt.Sprintf("traveller-%03d", r.IntN(200)),
			Flight:      pick(r, TripItems[tripapi.Flights]),
			Hotel:       pick(r, TripItems[tripapi.Hotels]),
			AmountCents: 1000 + r.Int64N(m.LimitCents/2),
		}
		if r.Float64() < TripCarRate {
			t.Car = pick(r, TripItems[tripapi.Cars])
		}
		if r.Float64() < TripSoldOutRate {
			t.Hotel = scarceHotel
			scarce++
		}
		if r.Float64() < TripApprovalRate {
			t.NeedsApproval = true
			if r.Float64() < TripRefuseRate {
				p.Refused[t.TripID] = true
			}
		}
		p.Trips = append(p.Trips, t)
	}
	p.Capacity = map[string]map[string]int{}
	for part, items := range TripItems {
		p.Capacity[part] = map[string]int{}
		for _, it := range items {
			p.Capacity[part][it] = m.Trips + 10 // ample
		}
	}
	p.Capacity[tripapi.Hotels][scarceHotel] = scarce / 2
}

func pick(r *rand.Rand, from []string) string { return from[r.IntN(len(from))] }

// seedTrips sets the capacity of the plan's items in the trip
// participants' tables; a plan without trips needs none.
func seedTrips(ctx context.Context, pool *pgxpool.Pool, s Schemas, p Plan) error {
	if len(p.Capacity) == 0 {
		return nil
	}
	if s.Flights == "" || s.Hotels == "" || s.Cars == "" {
		return fmt.Errorf("seed trips: the plan has %d trips but the trip participants (flights, hotels, cars) are not in the set (reference.Options.Trips)", len(p.Trips))
	}
	for _, x := range []struct {
		name, schema string
		seed         func(context.Context, participants.DB, string, map[string]int) error
	}{
		{tripapi.Flights, s.Flights, flights.Seed},
		{tripapi.Hotels, s.Hotels, hotels.Seed},
		{tripapi.Cars, s.Cars, cars.Seed},
	} {
		if err := x.seed(ctx, pool, x.schema, p.Capacity[x.name]); err != nil {
			return fmt.Errorf("seed %s: %w", x.name, err)
		}
	}
	return nil
}

// Start is one saga start of a plan: a place-order or a book-trip.
type Start struct {
	Request orchestrator.StartRequest
	// Trip is set for a book-trip start.
	Trip *steps.Trip
}

// Starts lists the plan's sagas in start order: the orders, with a trip
// after every few of them so that both run at once, the remaining trips
// last.
func (p Plan) Starts() []Start {
	out := make([]Start, 0, len(p.Orders)+len(p.Trips))
	every := 1
	if len(p.Trips) > 0 && len(p.Orders) > len(p.Trips) {
		every = len(p.Orders) / len(p.Trips)
	}
	t := 0
	for i, o := range p.Orders {
		out = append(out, Start{Request: orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: o.OrderID, AggregateID: o.OrderID, Data: o}})
		if (i+1)%every == 0 && t < len(p.Trips) {
			out = append(out, p.tripStart(t))
			t++
		}
	}
	for ; t < len(p.Trips); t++ {
		out = append(out, p.tripStart(t))
	}
	return out
}

func (p Plan) tripStart(i int) Start {
	tr := p.Trips[i]
	return Start{Request: orchestrator.StartRequest{Type: tripapi.SagaType, IdempotencyKey: tr.TripID, AggregateID: tr.TripID, Data: tr}, Trip: &tr}
}

// Approval is the approval event the workload sends a trip that needs one:
// approved unless the plan refuses it. Its event id is derived from the trip
// so that a re-sent approval is the same event.
func (p Plan) Approval(t steps.Trip) api.EventBody {
	data, _ := json.Marshal(tripapi.Approval{Approved: !p.Refused[t.TripID], Reason: refusedReason(p.Refused[t.TripID])})
	return api.EventBody{Name: tripapi.EventApproval, EventID: "approval-" + t.TripID, Data: data}
}

func refusedReason(refused bool) string {
	if refused {
		return "over the travel budget"
	}
	return ""
}

// Approver sends a trip's approval event to its saga.
type Approver interface {
	Approve(ctx context.Context, sagaID uuid.UUID, ev api.EventBody) error
}

// HTTPApprover sends approvals through the events API of the orchestrator
// at Base (http://host:port): POST /sagas/{id}/events.
type HTTPApprover struct {
	Base   string
	Client *http.Client
	// Token, if set, is sent as the bearer token (http.client_token).
	Token string
}

// Approve posts ev. 202 is taken; 409 too (the saga turned back or
// finished before the event mattered: a trip whose hotel was sold out).
func (a HTTPApprover) Approve(ctx context.Context, sagaID uuid.UUID, ev api.EventBody) error {
	status, msg, err := PostEvent(ctx, a.Client, a.Base, a.Token, sagaID, ev)
	if err != nil {
		return err
	}
	if status != http.StatusAccepted && status != http.StatusConflict {
		return fmt.Errorf("approve saga %s: POST /sagas/%s/events: HTTP %d: %s", sagaID, sagaID, status, msg)
	}
	return nil
}

// PostEvent posts ev to base's POST /sagas/{id}/events and returns the
// status and the body (trimmed, at most 4 KiB).
func PostEvent(ctx context.Context, client *http.Client, base, token string, sagaID uuid.UUID, ev api.EventBody) (int, string, error) {
	if client == nil {
		client = http.DefaultClient
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return 0, "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/sagas/"+sagaID.String()+"/events", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(bytes.TrimSpace(msg)), nil
}
