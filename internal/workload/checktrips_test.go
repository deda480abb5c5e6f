package workload_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants/reference"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

// TestCheckPlanTripInvariants writes trip sagas, reservations and charges
// by hand and checks that CheckPlan finds each trip violation (and none
// for a clean trip): a turned-back trip still holding a reservation, a
// confirmed reservation without a charge, a completed trip whose
// reservation was never confirmed, a refused trip that was charged, a
// reservation held for an unknown saga, an item's reserved counter that
// does not match its reservations.
func TestCheckPlanTripInvariants(t *testing.T) {
	ctx := testkit.Context(t, 60*time.Second)
	pool := testkit.Pool(t)
	ref, err := reference.New(pool, reference.Options{Trips: true})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator(orchestrator.SchemaDefault)), testkit.MustSets(t)(ref.Migrations()))
	schemas := workload.SchemasOf(orchestrator.SchemaDefault, ref)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	for _, part := range reference.TripNames {
		exec(`INSERT INTO ` + part + `.items (item, capacity) VALUES ('x', 100)`)
	}
	type res struct{ part, state string }
	type trip struct {
		state   string
		refused bool
		charged bool
		res     []res
	}
	ok := func(extra ...res) []res {
		return append([]res{{tripapi.Flights, "confirmed"}, {tripapi.Hotels, "confirmed"}}, extra...)
	}
	cases := []struct {
		name   string
		trip   trip
		orphan string // a reservation state held for an unknown saga
		// counterOff adds to the flights' reserved counter (as a release
		// lost or counted twice would leave it).
		counterOff int
		want       []string
	}{
		{name: "completed, all confirmed and charged", trip: trip{state: "completed", charged: true, res: ok(res{tripapi.Cars, "confirmed"})}},
		{name: "compensated, all released", trip: trip{state: "compensated", res: []res{{tripapi.Flights, "released"}, {tripapi.Cars, "released"}}}},
		{name: "refused, nothing reserved", trip: trip{state: "compensated", refused: true, res: []res{{tripapi.Hotels, "released"}}}},
		{name: "compensated but hotel still reserved", trip: trip{state: "compensated", res: []res{{tripapi.Hotels, "reserved"}}},
			want: []string{"is compensated but still holds a hotels reservation (reserved)"}},
		{name: "confirmed without a charge", trip: trip{state: "completed", res: ok()},
			want: []string{"flights reservation is confirmed but it has 0 charges", "hotels reservation is confirmed but it has 0 charges", "completed saga", "has 0 charges, want exactly 1"}},
		{name: "completed, car never confirmed", trip: trip{state: "completed", charged: true, res: ok(res{tripapi.Cars, "reserved"})},
			want: []string{"its cars reservation is reserved, not confirmed"}},
		{name: "completed without a hotel", trip: trip{state: "completed", charged: true, res: []res{{tripapi.Flights, "confirmed"}}},
			want: []string{"has no confirmed hotels reservation"}},
		{name: "refused but completed and charged", trip: trip{state: "completed", refused: true, charged: true, res: ok()},
			want: []string{"was refused but is completed", "was refused but has 1 charges"}},
		{name: "reservation of an unknown saga", trip: trip{state: "compensated"}, orphan: "reserved",
			want: []string{"cars reservation (reserved) held for saga"}},
		{name: "reserved counter off", trip: trip{state: "completed", charged: true, res: ok()}, counterOff: 1,
			want: []string{"flights item x: reserved counter 2 but 1 reservations hold a place (capacity 100)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			exec(`TRUNCATE sagaflow.sagas, payment.ledger, flights.reservations, hotels.reservations, cars.reservations CASCADE`)
			id := uuid.New()
			tripID := "trip-" + id.String()
			exec(`INSERT INTO sagaflow.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, data, steps, version, created_at, updated_at)
VALUES ($1, 'book-trip', 1, $2, $2, $3, '{}', '[]', 1, now(), now())`, id, tripID, tc.trip.state)
			for _, r := range tc.trip.res {
				exec(`INSERT INTO `+r.part+`.reservations (saga_id, reservation_id, trip_id, customer, item, state) VALUES ($1, $2, $3, 'c', 'x', $4)`,
					id, r.part+"-"+id.String(), tripID, r.state)
			}
			if tc.trip.charged {
				exec(`INSERT INTO payment.ledger (saga_id, order_id, customer, amount_cents, kind) VALUES ($1, $2, 'c', 1000, 'charge')`, id, tripID)
			}
			if tc.orphan != "" {
				other := uuid.New()
				exec(`INSERT INTO cars.reservations (saga_id, reservation_id, trip_id, customer, item, state) VALUES ($1, $2, 'lost', 'c', 'x', $3)`, other, "car-"+other.String(), tc.orphan)
			}
			for _, part := range reference.TripNames {
				off := 0
				if part == tripapi.Flights {
					off = tc.counterOff
				}
				exec(`UPDATE `+part+`.items i SET reserved = $1 + (SELECT count(*) FROM `+part+`.reservations r WHERE r.item = i.item AND r.state IN ('reserved', 'confirmed'))`, off)
			}
			plan := workload.Plan{Refused: map[string]bool{}}
			if tc.trip.refused {
				plan.Refused[tripID] = true
			}
			rep, err := workload.CheckPlan(ctx, pool, schemas, plan, false)
			if err != nil {
				t.Fatal(err)
			}
			if len(tc.want) == 0 && !rep.OK() {
				t.Fatalf("violations on a clean trip: %v", rep.Violations)
			}
			for _, w := range tc.want {
				found := false
				for _, v := range rep.Violations {
					found = found || strings.Contains(v, w)
				}
				if !found {
					t.Errorf("no violation containing %q in %v", w, rep.Violations)
				}
			}
			if c := rep.ByType[tripapi.SagaType]; c == nil || c.Sagas != 1 {
				t.Errorf("by type: %+v, want one book-trip saga", rep.ByType)
			}
		})
	}
}
