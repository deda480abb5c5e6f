// Package workload drives the reference sagas: it plans a seeded set of
// place-order orders with a failure mix (out of stock, coupon taken,
// payment declined) and, with Mix.Trips, book-trip trips (with and without
// a car, some needing an approval the workload gives or refuses, some for
// a sold-out hotel), seeds the reference participants' tables, starts the
// sagas and sends the approvals, waits until every one is terminal, and
// checks the invariants from the participants' own tables. The demo, the end-to-end test, the fault
// harness and the benchmark share it.
package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants/coupon"
	"github.com/sagaflow/sagaflow/participants/inventory"
	"github.com/sagaflow/sagaflow/participants/reference"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

// Defaults of the failure mix.
const (
	OutOfStockRateDefault  = 0.10
	CouponTakenRateDefault = 0.10
	DeclineRateDefault     = 0.10
	LimitCentsDefault      = 100_000
	scarceSKU              = "sku-scarce"
	contestedPerCode       = 3
)

// Mix is the planned failure mix.
type Mix struct {
	Orders int
	Seed   int64
	// OutOfStockRate: share of orders for a scarce item whose stock covers
	// only half of them.
	OutOfStockRate float64
	// CouponTakenRate: share of orders that use a coupon contested by
	// several orders; only one can hold it.
	CouponTakenRate float64
	// DeclineRate: share of orders over the payment limit.
	DeclineRate float64
	// LimitCents is the payment participant's limit.
	LimitCents int64
	// Trips is the number of book-trip sagas besides the orders (0: none;
	// their mix is TripCarRate, TripApprovalRate, TripRefuseRate,
	// TripSoldOutRate).
	Trips int
}

// Plan is a concrete workload: the orders and the initial stock, the trips
// and the capacity of their items.
type Plan struct {
	Orders  []steps.Order
	Stock   map[string]int
	Coupons []string
	Trips   []steps.Trip `json:",omitempty"`
	// Refused are the trips (by trip id) whose approval is refused.
	Refused map[string]bool `json:",omitempty"`
	// Capacity of every trip item, by participant and item.
	Capacity map[string]map[string]int `json:",omitempty"`
}

// NewPlan builds the orders for m, deterministically from m.Seed.
func NewPlan(m Mix) Plan {
	if m.LimitCents <= 0 {
		m.LimitCents = LimitCentsDefault
	}
	r := rand.New(rand.NewPCG(uint64(m.Seed), 0x5a6a))
	p := Plan{Stock: map[string]int{}}
	skus := []string{"sku-apple", "sku-pear", "sku-plum", "sku-fig"}
	scarce := 0
	contested := 0
	for i := range m.Orders {
		o := steps.Order{
			OrderID:     fmt.Sprintf("order-%d-%06d", m.Seed, i),
			Customer:    fmt.Sprintf("customer-%03d", r.IntN(200)),
			SKU:         skus[r.IntN(len(skus))],
			Qty:         1 + r.IntN(3),
			AmountCents: 1000 + r.Int64N(m.LimitCents/2),
		}
		if r.Float64() < m.OutOfStockRate {
			o.SKU = scarceSKU
			o.Qty = 1
			scarce++
		}
		switch x := r.Float64(); {
		case x < m.CouponTakenRate:
			o.Coupon = fmt.Sprintf("SHARED-%d-%04d", m.Seed, contested/contestedPerCode)
			contested++
		case x < m.CouponTakenRate+0.2:
			o.Coupon = fmt.Sprintf("OWN-%d-%06d", m.Seed, i)
		}
		if r.Float64() < m.DeclineRate {
			o.AmountCents = m.LimitCents + 1000 + r.Int64N(m.LimitCents)
		}
		p.Orders = append(p.Orders, o)
	}
	for _, s := range skus {
		p.Stock[s] = 3*m.Orders + 10 // ample
	}
	p.Stock[scarceSKU] = scarce / 2
	seen := map[string]bool{}
	for _, o := range p.Orders {
		if o.Coupon != "" && !seen[o.Coupon] {
			seen[o.Coupon] = true
			p.Coupons = append(p.Coupons, o.Coupon)
		}
	}
	newTrips(m, &p)
	return p
}

// Schemas names where the reference participants keep their tables
// (Flights, Hotels and Cars empty when the set runs no trip participants).
type Schemas struct {
	Orchestrator, Inventory, Coupon, Payment, Shipping, Points string
	Flights, Hotels, Cars                                      string
}

// Seed writes the plan's stock and coupons, and its trip items' capacity,
// into the participants' tables.
func Seed(ctx context.Context, pool *pgxpool.Pool, s Schemas, p Plan) error {
	if err := inventory.Seed(ctx, pool, s.Inventory, p.Stock); err != nil {
		return fmt.Errorf("seed inventory: %w", err)
	}
	if err := coupon.Seed(ctx, pool, s.Coupon, p.Coupons...); err != nil {
		return fmt.Errorf("seed coupons: %w", err)
	}
	return seedTrips(ctx, pool, s, p)
}

// Starter starts sagas (an engine, or an HTTP client in a split setup).
type Starter interface {
	Start(ctx context.Context, req orchestrator.StartRequest) (saga.Instance, bool, error)
}

// StartAll starts one saga per order (and per trip, see StartMixed) with
// concurrency workers and returns the saga ids in p.Starts() order. A plan
// with trips needing an approval needs StartMixed.
func StartAll(ctx context.Context, st Starter, p Plan, concurrency int) ([]uuid.UUID, error) {
	return StartMixed(ctx, st, nil, p, concurrency)
}

// StartMixed starts p.Starts() with concurrency workers: each worker
// starts a saga and, for a trip that needs one, sends its approval
// (p.Approval) through ap at once, usually before the saga reaches its
// wait (the engine keeps an early event). It returns the saga ids in
// p.Starts() order.
func StartMixed(ctx context.Context, st Starter, ap Approver, p Plan, concurrency int) ([]uuid.UUID, error) {
	if concurrency <= 0 {
		concurrency = 8
	}
	starts := p.Starts()
	for _, s := range starts {
		if s.Trip != nil && s.Trip.NeedsApproval && ap == nil {
			return nil, fmt.Errorf("start: trip %s needs an approval but no Approver was given", s.Trip.TripID)
		}
	}
	ids := make([]uuid.UUID, len(starts))
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(starts) || ctx.Err() != nil {
					return
				}
				s := starts[i]
				in, _, err := st.Start(ctx, s.Request)
				if err == nil && s.Trip != nil && s.Trip.NeedsApproval {
					if err = ap.Approve(ctx, in.ID, p.Approval(*s.Trip)); err != nil {
						err = fmt.Errorf("approval: %w", err)
					}
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("start %s %s: %w", s.Request.Type, s.Request.AggregateID, err)
					}
					mu.Unlock()
					return
				}
				ids[i] = in.ID
			}
		}()
	}
	wg.Wait()
	return ids, firstErr
}

// WaitTerminal polls until no saga of the orchestrator schema is
// non-terminal, or ctx ends. It returns the number still non-terminal.
func WaitTerminal(ctx context.Context, pool *pgxpool.Pool, schema string, poll time.Duration) (int64, error) {
	if poll <= 0 {
		poll = 50 * time.Millisecond
	}
	q := `SELECT count(*) FROM ` + quote(schema) + `.sagas WHERE state IN ('running', 'compensating')`
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		var n int64
		if err := pool.QueryRow(ctx, q).Scan(&n); err != nil {
			if ctx.Err() != nil {
				return -1, ctx.Err()
			}
			return -1, fmt.Errorf("count non-terminal sagas: %w", err)
		}
		if n == 0 {
			return 0, nil
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-t.C:
		}
	}
}

func quote(ident string) string { return `"` + ident + `"` }

// ErrInvariants is returned by Check's caller when violations exist.
var ErrInvariants = errors.New("invariants violated")

// SchemasOf names the schemas of the reference participants in set and of
// the orchestrator (schema orchestrator).
func SchemasOf(orchestrator string, set *reference.Set) Schemas {
	s := Schemas{Orchestrator: orchestrator}
	for _, p := range set.Participants() {
		switch p.Name() {
		case orderapi.Inventory:
			s.Inventory = p.Schema()
		case orderapi.Coupon:
			s.Coupon = p.Schema()
		case orderapi.Payment:
			s.Payment = p.Schema()
		case orderapi.Shipping:
			s.Shipping = p.Schema()
		case orderapi.Points:
			s.Points = p.Schema()
		case tripapi.Flights:
			s.Flights = p.Schema()
		case tripapi.Hotels:
			s.Hotels = p.Schema()
		case tripapi.Cars:
			s.Cars = p.Schema()
		}
	}
	return s
}
