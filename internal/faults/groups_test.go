package faults_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/cars"
	"github.com/sagaflow/sagaflow/participants/flights"
	"github.com/sagaflow/sagaflow/participants/hotels"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

// The failure windows a parallel group, a wait or a cancel opens, on the
// real pipeline with book-trip: every test runs no orders, only trips of
// its own, and ends with the invariants (env.checkInvariants: the trip
// invariants of workload.CheckPlan among them).

const (
	tripTrips = 6
	// fullHotel has no room: its reservations fail (sold_out).
	fullHotel = "hotel-full"
)

// trips builds n trips (LH100, hotel-ritz, no car, no approval) edited by
// edit.
func trips(n int, edit func(*steps.Trip)) []steps.Trip {
	out := make([]steps.Trip, n)
	for i := range out {
		out[i] = steps.Trip{TripID: fmt.Sprintf("trip-%02d", i), Customer: "c", Flight: "LH100", Hotel: "hotel-ritz", AmountCents: 1000}
		if edit != nil {
			edit(&out[i])
		}
	}
	return out
}

// useTrips makes ts the env's planned trips and gives every item room for
// all of them (fullHotel none).
func (e *env) useTrips(ts []steps.Trip) {
	e.t.Helper()
	e.plan.Trips = ts
	ctx := testkit.Context(e.t, 30*time.Second)
	n := len(ts)
	for _, x := range []struct {
		seed   func(context.Context, participants.DB, string, map[string]int) error
		schema string
		cap    map[string]int
	}{
		{flights.Seed, e.schemas.Flights, map[string]int{"LH100": n}},
		{hotels.Seed, e.schemas.Hotels, map[string]int{"hotel-ritz": n, fullHotel: 0}},
		{cars.Seed, e.schemas.Cars, map[string]int{"car-mini": n}},
	} {
		if err := x.seed(ctx, e.check, x.schema, x.cap); err != nil {
			e.t.Fatal(err)
		}
	}
}

// startTrips starts the planned trips through the engine.
func (e *env) startTrips(ctx context.Context) []uuid.UUID {
	e.t.Helper()
	var ids []uuid.UUID
	for _, tr := range e.plan.Trips {
		in, _, err := e.engine.Start(ctx, orchestrator.StartRequest{Type: tripapi.SagaType, IdempotencyKey: tr.TripID, AggregateID: tr.TripID, Data: tr})
		if err != nil {
			e.t.Fatalf("start trip %s: %v", tr.TripID, err)
		}
		ids = append(ids, in.ID)
	}
	return ids
}

// runOnly runs the participants of set named in names.
func (e *env) runOnly(set interface {
	Participants() []*participants.Participant
}, names ...string) {
	for _, p := range set.Participants() {
		if slices.Contains(names, p.Name()) {
			e.run("participant "+p.Name(), p.Run)
		}
	}
}

// sagaSteps reads a saga's state and steps by step name.
func (e *env) sagaSteps(id uuid.UUID) (string, map[string]saga.StepState) {
	e.t.Helper()
	var state string
	var raw []byte
	if err := e.check.QueryRow(context.Background(), `SELECT state, steps FROM `+e.schemas.Orchestrator+`.sagas WHERE id = $1`, id).Scan(&state, &raw); err != nil {
		e.t.Fatalf("read saga %s: %v", id, err)
	}
	var ss []saga.StepState
	if err := json.Unmarshal(raw, &ss); err != nil {
		e.t.Fatalf("saga %s: decode steps: %v", id, err)
	}
	out := map[string]saga.StepState{}
	for _, s := range ss {
		out[s.Name] = s
	}
	return state, out
}

// waitSagas waits until cond holds for the state and steps of every saga
// of ids.
func (e *env) waitSagas(what string, ids []uuid.UUID, cond func(state string, steps map[string]saga.StepState) bool) {
	e.t.Helper()
	testkit.Eventually(e.t, settle, what, func() (bool, error) {
		for _, id := range ids {
			if !cond(e.sagaSteps(id)) {
				return false, nil
			}
		}
		return true, nil
	})
}

// journalSteps lists, in journal order, the steps of saga id's entries
// of event.
func (e *env) journalSteps(id uuid.UUID, event string) []string {
	e.t.Helper()
	rows, err := e.check.Query(context.Background(), `SELECT step FROM `+e.schemas.Orchestrator+`.journal WHERE saga_id = $1 AND event = $2 AND NOT ignored ORDER BY id`, id, event)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// reservations reads a trip participant's reservation states by saga.
func (e *env) reservations(read func(context.Context, participants.DB, string) (map[uuid.UUID]string, error), schema string) map[uuid.UUID]string {
	e.t.Helper()
	m, err := read(context.Background(), e.check, schema)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func succeeded(s saga.StepState) bool { return s.State == saga.StepSucceeded }

// Row: a member's reply racing another member's failure, the reply last.
// Every trip asks for the full hotel and a car; the cars participant is
// away, so the hotel's failure is applied while the car's reservation is
// in flight: the saga turns back but settles the car first (the flight,
// which succeeded, is not compensated yet). Then cars runs: the car's
// success arrives after the failure and is compensated too, before the
// flight (reverse order of completion); the hotel's failed reservation is
// not compensated; nothing is charged.
func TestWindowGroupMemberSucceedsAfterAnotherFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{seed: 41, trips: true})
	e.useTrips(trips(tripTrips, func(tr *steps.Trip) { tr.Hotel, tr.Car = fullHotel, "car-mini" }))
	ctx := testkit.Context(t, 3*time.Minute)
	e.run("orchestrator", e.service(orchestrator.DefaultRun).Run)
	set := e.participants()
	e.runParticipants(set, tripapi.Cars)
	ids := e.startTrips(ctx)
	e.waitSagas("hotel failed and flight reserved while the car is in flight", ids, func(state string, st map[string]saga.StepState) bool {
		return state == string(saga.Compensating) && st[tripapi.StepReserveHotel].State == saga.StepFailed && succeeded(st[tripapi.StepReserveFlight])
	})
	for _, id := range ids {
		_, st := e.sagaSteps(id)
		if s := st[tripapi.StepReserveCar].State; s == saga.StepSucceeded || s == saga.StepCompensated {
			t.Fatalf("saga %s: reserve-car is %s with the cars participant away", id, s)
		}
		if s := st[tripapi.StepReserveFlight].State; s != saga.StepSucceeded {
			t.Fatalf("saga %s: reserve-flight is %s: compensated before the car in flight settled", id, s)
		}
	}
	if n := e.count(`SELECT count(*) FROM ` + e.schemas.Flights + `.barrier WHERE action = 'compensate'`); n != 0 {
		t.Fatalf("%d flight compensations executed before the car in flight settled", n)
	}

	e.runOnly(set, tripapi.Cars)
	e.waitTerminal(settle)
	for _, id := range ids {
		state, _ := e.sagaSteps(id)
		if state != string(saga.Compensated) {
			t.Errorf("saga %s is %s, want compensated", id, state)
		}
		if got, want := e.journalSteps(id, saga.JournalCompensated), []string{tripapi.StepReserveCar, tripapi.StepReserveFlight}; !slices.Equal(got, want) {
			t.Errorf("saga %s compensated %v, want %v (reverse order of completion; the hotel's failure not compensated)", id, got, want)
		}
	}
	for name, res := range map[string]map[uuid.UUID]string{
		tripapi.Flights: e.reservations(flights.States, e.schemas.Flights),
		tripapi.Cars:    e.reservations(cars.States, e.schemas.Cars),
	} {
		for _, id := range ids {
			if res[id] != "released" {
				t.Errorf("saga %s: %s reservation %q, want released", id, name, res[id])
			}
		}
	}
	if n := e.count(`SELECT count(*) FROM ` + e.schemas.Hotels + `.barrier WHERE action = 'compensate'`); n != 0 {
		t.Errorf("%d hotel compensations sent for reservations that failed", n)
	}
	if n := e.count(`SELECT count(*) FROM ` + e.schemas.Payment + `.barrier`); n != 0 {
		t.Errorf("%d payment commands for trips that turned back", n)
	}
	e.checkInvariants(false)
}

// Row: a member's reply racing another member's failure, the reply first.
// The hotels participant is away: the flight and the car succeed while the
// hotel's reservation is in flight; then hotels runs and fails it (full).
// Both successes are compensated, in reverse order of their completion,
// and nothing is charged.
func TestWindowGroupMemberSucceedsBeforeAnotherFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{seed: 42, trips: true})
	e.useTrips(trips(tripTrips, func(tr *steps.Trip) { tr.Hotel, tr.Car = fullHotel, "car-mini" }))
	ctx := testkit.Context(t, 3*time.Minute)
	e.run("orchestrator", e.service(orchestrator.DefaultRun).Run)
	set := e.participants()
	e.runParticipants(set, tripapi.Hotels)
	ids := e.startTrips(ctx)
	e.waitSagas("flight and car reserved while the hotel is in flight", ids, func(state string, st map[string]saga.StepState) bool {
		return state == string(saga.Running) && succeeded(st[tripapi.StepReserveFlight]) && succeeded(st[tripapi.StepReserveCar])
	})
	order := map[uuid.UUID][]string{}
	for _, id := range ids {
		done := e.journalSteps(id, saga.JournalStepSucceeded)
		if len(done) != 2 {
			t.Fatalf("saga %s: succeeded %v, want the flight and the car", id, done)
		}
		order[id] = done
	}

	e.runOnly(set, tripapi.Hotels)
	e.waitTerminal(settle)
	for _, id := range ids {
		state, _ := e.sagaSteps(id)
		if state != string(saga.Compensated) {
			t.Errorf("saga %s is %s, want compensated", id, state)
		}
		want := slices.Clone(order[id])
		slices.Reverse(want)
		if got := e.journalSteps(id, saga.JournalCompensated); !slices.Equal(got, want) {
			t.Errorf("saga %s: completed %v, compensated %v; want %v", id, order[id], got, want)
		}
	}
	if n := e.count(`SELECT count(*) FROM ` + e.schemas.Hotels + `.barrier WHERE action = 'compensate'`); n != 0 {
		t.Errorf("%d hotel compensations sent for reservations that failed", n)
	}
	e.checkInvariants(false)
}

// Row: an event racing the wait's deadline. Every trip needs an approval
// and its wait's deadline is short; the approvals are sent spread around
// the deadline. Whichever commits first wins, and only it: an approval the
// engine recorded is taken (the trip completes, charged once), one that
// lost is refused (not awaited, or the saga finished) and the trip
// compensates with nothing charged. No saga both took an event and passed
// its deadline.
func TestWindowEventRacesWaitDeadline(t *testing.T) {
	t.Parallel()
	const deadline = 1500 * time.Millisecond
	e := newEnv(t, envOpts{seed: 43, trips: true, override: func(r *saga.Registry) error {
		return r.Override(tripapi.SagaType, tripapi.StepAwaitApproval, saga.StepOverride{Deadline: deadline})
	}})
	const n = 10
	e.useTrips(trips(n, func(tr *steps.Trip) { tr.NeedsApproval = true }))
	ctx := testkit.Context(t, 3*time.Minute)
	e.run("orchestrator", e.service(orchestrator.DefaultRun).Run)
	e.runParticipants(e.participants())
	ids := e.startTrips(ctx)
	e.waitSagas("every trip at its wait", ids, func(_ string, st map[string]saga.StepState) bool {
		return st[tripapi.StepAwaitApproval].State != saga.StepPending
	})
	// The waits began about together: send the i-th approval at
	// i/(n-1) of twice the deadline after the first wait began.
	var began time.Time
	for _, id := range ids {
		if _, st := e.sagaSteps(id); st[tripapi.StepAwaitApproval].StartedAt != nil && (began.IsZero() || st[tripapi.StepAwaitApproval].StartedAt.Before(began)) {
			began = *st[tripapi.StepAwaitApproval].StartedAt
		}
	}
	taken := make([]bool, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			at := began.Add(time.Duration(i) * 2 * deadline / (n - 1))
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(at)):
			}
			data, _ := json.Marshal(tripapi.Approval{Approved: true})
			res, err := e.engine.SendEvent(ctx, id, tripapi.EventApproval, "approval-"+id.String(), data)
			switch {
			case err == nil:
				taken[i] = res.Taken
				if !res.Taken {
					errs <- fmt.Errorf("saga %s: approval recorded but not taken (the saga waits for it)", id)
				}
			case errors.Is(err, saga.ErrEventNotAwaited) || errors.Is(err, saga.ErrEventFinished):
			default:
				errs <- fmt.Errorf("saga %s: approval: %w", id, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	e.waitTerminal(settle)
	won := 0
	for i, id := range ids {
		state, _ := e.sagaSteps(id)
		tookEvent := len(e.journalSteps(id, saga.JournalEventTaken)) > 0
		passed := len(e.journalSteps(id, saga.JournalWaitDeadline)) > 0
		switch {
		case tookEvent && passed:
			t.Errorf("saga %s took its approval and passed its deadline", id)
		case taken[i] && (!tookEvent || state != string(saga.Completed)):
			t.Errorf("saga %s: approval taken by SendEvent, but journal event taken %v, state %s", id, tookEvent, state)
		case !taken[i] && (!passed || state != string(saga.Compensated)):
			t.Errorf("saga %s: approval refused, but deadline passed %v, state %s", id, passed, state)
		}
		if taken[i] {
			won++
		}
	}
	t.Logf("%d of %d approvals beat the deadline", won, n)
	e.checkInvariants(false)
}

// Row: a cancel racing the pivot. The payment participant is away, so
// every trip's charge is in flight when its client cancels: every cancel
// is refused (the pivot was sent) and changes nothing. Then payment runs
// and answers while a second round of cancels races its replies: refused
// too; every trip completes, charged once, nothing compensated. A cancel
// sent while the reservations are in flight (hotels away) is taken: that
// trip settles its reservations and compensates them, nothing charged.
func TestWindowCancelRacesPivotReply(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{seed: 44, trips: true})
	ts := trips(tripTrips+1, func(tr *steps.Trip) { tr.Car = "car-mini" })
	e.useTrips(ts)
	ctx := testkit.Context(t, 3*time.Minute)
	e.run("orchestrator", e.service(orchestrator.DefaultRun).Run)
	set := e.participants()
	e.runParticipants(set, tripapi.Payment, tripapi.Hotels)
	ids := e.startTrips(ctx)
	early, ids := ids[0], ids[1:]
	e.waitSagas("flight and car reserved, hotel in flight", append([]uuid.UUID{early}, ids...), func(_ string, st map[string]saga.StepState) bool {
		return succeeded(st[tripapi.StepReserveFlight]) && succeeded(st[tripapi.StepReserveCar])
	})
	if _, err := e.engine.Cancel(ctx, early, "client", "changed plans"); err != nil {
		t.Fatalf("cancel before the pivot: %v", err)
	}
	e.runOnly(set, tripapi.Hotels)
	e.waitSagas("every other trip's charge in flight", ids, func(_ string, st map[string]saga.StepState) bool {
		s := st[tripapi.StepChargePayment].State
		return s == saga.StepRunning || s == saga.StepRetrying
	})
	cancelAll := func(round string) {
		t.Helper()
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := e.engine.Cancel(ctx, id, "client", round)
				if _, ok := errors.AsType[*saga.RefusedError](err); !ok {
					t.Errorf("%s: cancel of saga %s at or after its pivot: %v, want refused", round, id, err)
				}
			}()
		}
		wg.Wait()
	}
	cancelAll("charge in flight")
	e.runOnly(set, tripapi.Payment)
	cancelAll("racing the charge's reply")
	e.waitTerminal(settle)
	for _, id := range ids {
		if state, _ := e.sagaSteps(id); state != string(saga.Completed) {
			t.Errorf("saga %s is %s after refused cancels, want completed", id, state)
		}
		if got := e.journalSteps(id, saga.JournalCancelled); len(got) != 0 {
			t.Errorf("saga %s journaled a cancel that was refused", id)
		}
	}
	if state, _ := e.sagaSteps(early); state != string(saga.Compensated) {
		t.Errorf("saga %s cancelled before its pivot is %s, want compensated", early, state)
	}
	for name, res := range map[string]map[uuid.UUID]string{
		tripapi.Flights: e.reservations(flights.States, e.schemas.Flights),
		tripapi.Hotels:  e.reservations(hotels.States, e.schemas.Hotels),
		tripapi.Cars:    e.reservations(cars.States, e.schemas.Cars),
	} {
		if res[early] != "released" {
			t.Errorf("cancelled trip's %s reservation %q, want released", name, res[early])
		}
		for _, id := range ids {
			if res[id] != "confirmed" {
				t.Errorf("saga %s: %s reservation %q, want confirmed", id, name, res[id])
			}
		}
	}
	e.checkInvariants(false)
}

// Row: a crash between a group's commands being written and its replies
// arriving. First the orchestrator runs without its relay: each trip's
// start commits its three reservations in one transaction, unsent, and the
// orchestrator stops (crash) before any is published. Then a new one runs
// without its reply consumer: the commands are published and executed, the
// replies wait on the topic, and it stops too. A third runs in full: the
// replies are applied, in whatever order, and every trip completes, each
// reservation made and confirmed once.
func TestWindowCrashBetweenGroupCommandsAndReplies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{seed: 45, trips: true})
	e.useTrips(trips(tripTrips, func(tr *steps.Trip) { tr.Car = "car-mini" }))
	ctx := testkit.Context(t, 3*time.Minute)
	first := e.run("orchestrator without relay", e.service(orchestrator.RunSet{Replies: true, Timers: true}).Run)
	e.runParticipants(e.participants())
	ids := e.startTrips(ctx)
	for _, p := range []string{tripapi.Flights, tripapi.Hotels, tripapi.Cars} {
		if n := e.count(`SELECT count(*) FROM `+e.schemas.Orchestrator+`.outbox WHERE topic = $1 AND sent_at IS NULL`, e.prefix+p+".commands"); n != tripTrips {
			t.Fatalf("%d unsent %s commands after the starts, want %d (every member written with its start)", n, p, tripTrips)
		}
	}
	first.stop(t) // crash: nothing published
	second := e.run("orchestrator without replies", e.service(orchestrator.RunSet{Relay: true, Timers: true}).Run)
	testkit.Eventually(t, settle, "every reservation executed, replies unapplied", func() (bool, error) {
		for _, s := range []string{e.schemas.Flights, e.schemas.Hotels, e.schemas.Cars} {
			if e.count(`SELECT count(*) FROM `+s+`.barrier WHERE action = 'forward'`) != tripTrips {
				return false, nil
			}
		}
		return true, nil
	})
	for _, id := range ids {
		if _, st := e.sagaSteps(id); succeeded(st[tripapi.StepReserveFlight]) || succeeded(st[tripapi.StepReserveHotel]) || succeeded(st[tripapi.StepReserveCar]) {
			t.Fatalf("saga %s moved without its reply consumer", id)
		}
	}
	second.stop(t) // crash: replies not applied
	e.run("orchestrator restarted", e.service(orchestrator.DefaultRun).Run)
	e.waitTerminal(settle)
	for _, id := range ids {
		if state, _ := e.sagaSteps(id); state != string(saga.Completed) {
			t.Errorf("saga %s is %s, want completed", id, state)
		}
	}
	for _, s := range []string{e.schemas.Flights, e.schemas.Hotels, e.schemas.Cars} {
		if n := e.count(`SELECT count(*) FROM ` + s + `.reservations WHERE state = 'confirmed'`); n != tripTrips {
			t.Errorf("%s: %d confirmed reservations, want %d", s, n, tripTrips)
		}
	}
	e.checkInvariants(false)
}
