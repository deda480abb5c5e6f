package workload

import (
	"context"
	"fmt"
	"sort"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/cars"
	"github.com/sagaflow/sagaflow/participants/flights"
	"github.com/sagaflow/sagaflow/participants/hotels"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

// Reservation states of the trip participants' tables.
const (
	reservationReserved  = "reserved"
	reservationConfirmed = "confirmed"
)

// checkTrips checks the book-trip sagas against the flights, hotels and
// cars tables and the payment ledger (charges, by saga):
//   - nothing reserved without a charge: a terminal trip that is not
//     completed holds no reservation (reserved or confirmed), and a
//     completed one's are all confirmed and it is charged once;
//   - every confirmed reservation is charged exactly once;
//   - no reservation is held for a saga the orchestrator does not know;
//   - every item's reserved counter equals the reservations holding a
//     place (capacity conserved: nothing released twice or lost);
//   - a refused trip (refused, by trip id = aggregate id) ends compensated
//     with nothing reserved and nothing charged.
//
// Nothing charged twice is the charge check of CheckPlan, for every type.
// A failed saga (an operator's) may hold what it held.
func checkTrips(ctx context.Context, db participants.DB, s Schemas, sagas map[uuid.UUID]sagaRow, charges map[uuid.UUID]int, refused map[string]bool, bad func(string, ...any)) error {
	var trips []uuid.UUID
	for id, sg := range sagas {
		if sg.typ == tripapi.SagaType {
			trips = append(trips, id)
		}
	}
	sort.Slice(trips, func(i, j int) bool { return trips[i].String() < trips[j].String() })
	if s.Flights == "" || s.Hotels == "" || s.Cars == "" {
		if len(trips) > 0 {
			bad("%d book-trip sagas but the trip participants' schemas are not known: their reservations cannot be checked", len(trips))
		}
		return nil
	}
	tables := []struct {
		name, schema string
		read         func(context.Context, participants.DB, string) (map[uuid.UUID]string, error)
		items        func(context.Context, participants.DB, string) (map[string]flights.Item, error)
	}{
		{tripapi.Flights, s.Flights, flights.States, flights.Items},
		{tripapi.Hotels, s.Hotels, hotels.States, hotels.Items},
		{tripapi.Cars, s.Cars, cars.States, cars.Items},
	}
	for _, t := range tables {
		items, err := t.items(ctx, db, t.schema)
		if err != nil {
			return fmt.Errorf("check: read %s items: %w", t.name, err)
		}
		names := make([]string, 0, len(items))
		for name := range items {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			if it := items[name]; it.Reserved != it.Held || it.Held > it.Capacity {
				bad("%s item %s: reserved counter %d but %d reservations hold a place (capacity %d)", t.name, name, it.Reserved, it.Held, it.Capacity)
			}
		}
		res, err := t.read(ctx, db, t.schema)
		if err != nil {
			return fmt.Errorf("check: read %s reservations: %w", t.name, err)
		}
		for _, id := range trips {
			checkReservation(id, sagas[id].state, t.name, res[id], charges[id], bad)
		}
		for id, st := range res {
			if _, ok := sagas[id]; !ok && held(st) {
				bad("%s reservation (%s) held for saga %s that the orchestrator does not know", t.name, st, id)
			}
		}
		if t.name == tripapi.Flights || t.name == tripapi.Hotels {
			for _, id := range trips {
				if sagas[id].state == "completed" && res[id] != reservationConfirmed {
					bad("completed trip saga %s has no confirmed %s reservation (%q)", id, t.name, res[id])
				}
			}
		}
	}
	for _, id := range trips {
		sg := sagas[id]
		if !refused[sg.aggregate] {
			continue
		}
		if sg.state != "compensated" && sg.state != "failed" {
			bad("trip %s (saga %s) was refused but is %s, want compensated", sg.aggregate, id, sg.state)
		}
		if n := charges[id]; n != 0 {
			bad("trip %s (saga %s) was refused but has %d charges, want 0", sg.aggregate, id, n)
		}
	}
	return nil
}

// checkReservation checks one trip saga's reservation at one participant
// (state "" when it has none).
func checkReservation(id uuid.UUID, sagaState, participant, state string, charges int, bad func(string, ...any)) {
	switch {
	case sagaState == "failed":
	case state == reservationConfirmed && charges != 1:
		bad("trip saga %s (%s): its %s reservation is confirmed but it has %d charges, want 1", id, sagaState, participant, charges)
	case held(state) && sagaState != "completed":
		bad("trip saga %s is %s but still holds a %s reservation (%s)", id, sagaState, participant, state)
	case sagaState == "completed" && state == reservationReserved:
		bad("completed trip saga %s: its %s reservation is reserved, not confirmed", id, participant)
	}
}

func held(state string) bool { return state == reservationReserved || state == reservationConfirmed }
