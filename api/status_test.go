package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

type listAnswer struct {
	Sagas []api.SagaView `json:"sagas"`
	Next  string         `json:"next"`
}

func ids(l listAnswer) []uuid.UUID {
	var out []uuid.UUID
	for _, s := range l.Sagas {
		out = append(out, s.ID)
	}
	return out
}

func TestStatusGetShowsStepsJournalAndPivot(t *testing.T) {
	t.Parallel()
	env := newOpsEnv(t, nil)
	completed, compensated, failed := env.threeSagas(t)

	var v api.SagaView
	env.getJSON(t, "/sagas/"+failed.String(), &v)
	if v.State != saga.Failed || v.DefVersion != 2 || v.Type != orderapi.SagaType || v.CurrentStep != orderapi.StepCreateShipment {
		t.Fatalf("failed saga: state %s version %d type %s current %q", v.State, v.DefVersion, v.Type, v.CurrentStep)
	}
	if len(v.Steps) != 6 {
		t.Fatalf("%d steps, want 6", len(v.Steps))
	}
	pay, ship := v.Steps[2], v.Steps[3]
	if !pay.Pivot || pay.Kind != saga.Pivot || pay.Participant != orderapi.Payment || pay.State != saga.StepSucceeded {
		t.Fatalf("charge-payment step = %+v; want the succeeded pivot of participant payment", pay)
	}
	if ship.State != saga.StepFailed || ship.Attempts != 1 || !strings.Contains(ship.LastError, "carrier refused: address unknown") ||
		ship.StartedAt == nil || ship.FinishedAt == nil || ship.Pivot {
		t.Fatalf("create-shipment step = %+v; want failed after 1 attempt with the carrier's reason and both times", ship)
	}
	if string(v.Steps[0].Output) == "" || !strings.Contains(string(v.Steps[0].Output), "res-1") {
		t.Fatalf("reserve-inventory output = %s; want the participant's result", v.Steps[0].Output)
	}
	if n := len(v.Journal); n < 5 || v.Journal[0].Event != saga.JournalStarted || v.Journal[n-1].To != saga.Failed {
		t.Fatalf("journal = %+v; want started ... -> failed", v.Journal)
	}

	v = api.SagaView{}
	env.getJSON(t, "/sagas/"+compensated.String(), &v)
	if r := v.Steps[0]; v.State != saga.Compensated || r.State != saga.StepCompensated || r.CompStartedAt == nil || r.CompFinishedAt == nil || r.CompAttempts != 1 {
		t.Fatalf("compensated saga: %s, reserve-inventory %+v; want compensated with compensation times", v.State, r)
	}
	if v.CurrentStep != "" {
		t.Fatalf("a settled saga reports current step %q", v.CurrentStep)
	}
	v = api.SagaView{}
	env.getJSON(t, "/sagas/"+completed.String(), &v)
	if s := v.Steps[3]; v.State != saga.Completed || s.Attempts != 2 || s.State != saga.StepSucceeded {
		t.Fatalf("completed saga: %s, create-shipment %+v; want succeeded on attempt 2", v.State, s)
	}
	if st, body := env.do(t, http.MethodGet, "/sagas/"+uuid.NewString(), "", ""); st != http.StatusNotFound || !strings.Contains(body, "no saga") {
		t.Fatalf("unknown saga = %d %s; want 404", st, body)
	}
}

func TestStatusListFiltersAndKeysetPaging(t *testing.T) {
	t.Parallel()
	env := newOpsEnv(t, nil)
	completed, compensated, failed := env.threeSagas(t)
	running := env.start(t, "order-running") // reserve-inventory sent, no answer yet

	cases := []struct {
		query string
		want  []uuid.UUID
	}{
		{"", []uuid.UUID{running, failed, compensated, completed}},
		{"state=failed", []uuid.UUID{failed}},
		{"state=compensated", []uuid.UUID{compensated}},
		{"state=running", []uuid.UUID{running}},
		{"type=" + orderapi.SagaType + "&state=completed", []uuid.UUID{completed}},
		{"type=no-such-type", nil},
		{"step=" + orderapi.StepCreateShipment, []uuid.UUID{failed}},
		{"step=" + orderapi.StepReserveInventory, []uuid.UUID{running}},
		{"stuck=true", []uuid.UUID{failed}},
		{"stuck=true&stuck_after=1ns", []uuid.UUID{running, failed}},
		{"older_than=1h", nil},
	}
	for _, c := range cases {
		var l listAnswer
		env.getJSON(t, "/sagas?"+c.query, &l)
		if got := ids(l); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("GET /sagas?%s = %v, want %v", c.query, got, c.want)
		}
	}

	// keyset paging: every saga exactly once, newest first, even when a
	// saga starts between two pages.
	var seen []uuid.UUID
	cursor := ""
	for page := 0; ; page++ {
		var l listAnswer
		env.getJSON(t, "/sagas?limit=1&cursor="+url.QueryEscape(cursor), &l)
		if len(l.Sagas) > 1 {
			t.Fatalf("page %d holds %d sagas with limit=1", page, len(l.Sagas))
		}
		seen = append(seen, ids(l)...)
		if page == 0 {
			env.start(t, "order-late") // newer than every cursor: never on a later page
		}
		if l.Next == "" {
			break
		}
		cursor = l.Next
		if page > 10 {
			t.Fatal("paging does not end")
		}
	}
	if want := []uuid.UUID{running, failed, compensated, completed}; fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("pages gave %v, want %v", seen, want)
	}

	for _, bad := range []struct{ query, field string }{
		{"state=stuck", "state"}, {"limit=0", "limit"}, {"limit=501", "limit"}, {"older_than=yesterday", "older_than"},
		{"stuck=maybe", "stuck"}, {"cursor=!!!", "cursor"}, {"cursor=bm90LWEtY3Vyc29y", "cursor"},
	} {
		st, body := env.do(t, http.MethodGet, "/sagas?"+bad.query, "", "")
		if st != http.StatusBadRequest || !strings.Contains(body, `"field": "`+bad.field+`"`) {
			t.Errorf("GET /sagas?%s = %d %s; want 400 naming field %s", bad.query, st, body, bad.field)
		}
	}
}

func TestStatsCountsAndOutbox(t *testing.T) {
	t.Parallel()
	env := newOpsEnv(t, nil)
	env.threeSagas(t)
	env.start(t, "order-running")

	var st api.StatsView
	env.getJSON(t, "/stats", &st)
	po := orderapi.SagaType
	if st.Open[po][saga.Running] != 1 || st.Open[po][saga.Failed] != 1 || len(st.Open[po]) != 2 {
		t.Fatalf("open = %v; want 1 running and 1 failed", st.Open)
	}
	if f := st.Finished[po]; f[saga.Completed] != 1 || f[saga.Compensated] != 1 || f[saga.Failed] != 1 {
		t.Fatalf("finished = %v; want one each of completed, compensated, failed", st.Finished)
	}
	if st.ByState[saga.Failed] != 2 || st.ByState[saga.Running] != 1 || st.WindowSeconds != orchestrator.StatsWindowDefault.Seconds() {
		t.Fatalf("by_state = %v window %v; want failed 2 (open + finished), running 1, window 1h", st.ByState, st.WindowSeconds)
	}
	if st.OldestInFlightSeconds <= 0 || st.OldestInFlightSeconds > 60 {
		t.Fatalf("oldest_in_flight_seconds = %v; want the running saga's age", st.OldestInFlightSeconds)
	}
	// no relay runs: every command the engine sent is still pending
	var pending int64
	if err := env.pool.QueryRow(context.Background(), `SELECT count(*) FROM orch.outbox WHERE sent_at IS NULL`).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	if pending < 10 || st.Outbox.Pending != pending || st.Outbox.OldestUnsentSeconds <= 0 {
		t.Fatalf("outbox = %+v; want pending %d and a positive oldest age", st.Outbox, pending)
	}

	// a window that ends before the sagas finished counts none of them
	if _, err := env.pool.Exec(context.Background(), `UPDATE orch.sagas SET finished_at = finished_at - interval '2 hours' WHERE finished_at IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	st = api.StatsView{}
	env.getJSON(t, "/stats?window=1h", &st)
	if len(st.Finished) != 0 || st.Open[po][saga.Failed] != 1 {
		t.Fatalf("after the window: finished = %v open = %v; want none finished, failed still open", st.Finished, st.Open)
	}
	st = api.StatsView{}
	env.getJSON(t, "/stats?window=3h", &st)
	if st.Finished[po][saga.Completed] != 1 {
		t.Fatalf("window=3h: finished = %v; want the completed saga", st.Finished)
	}
	if code, body := env.do(t, http.MethodGet, "/stats?window=-1s", "", ""); code != http.StatusBadRequest || !strings.Contains(body, "window") {
		t.Fatalf("bad window = %d %s; want 400 naming window", code, body)
	}
}

// More sagas in flight and finished than the stats count one by one: the
// JSON says which counts are estimates and when the in-flight ones were
// counted, and the page marks them with "≈" and says why.
func TestStatsSayWhichCountsAreEstimates(t *testing.T) {
	t.Parallel()
	env := newOpsEnvEngine(t, nil, orchestrator.EngineConfig{Advanced: orchestrator.Advanced{StatsExactLimit: 2}})
	for i := range 6 {
		env.start(t, fmt.Sprintf("order-%d", i))
	}
	var st api.StatsView
	env.getJSON(t, "/stats", &st) // no full count kept: this read makes one, exact
	po := orderapi.SagaType
	if st.Open[po][saga.Running] != 6 || st.OpenEstimated || st.FinishedEstimated {
		t.Fatalf("first read: open %v estimated %v/%v; want 6 running, exact", st.Open, st.OpenEstimated, st.FinishedEstimated)
	}
	// Three finished a minute apart, beyond the limit of 2.
	if _, err := env.pool.Exec(context.Background(), `
UPDATE orch.sagas s SET state = 'completed', finished_at = now() - n * interval '1 minute'
FROM (SELECT id, row_number() OVER (ORDER BY created_at) AS n FROM orch.sagas ORDER BY created_at LIMIT 3) f WHERE s.id = f.id`); err != nil {
		t.Fatal(err)
	}
	st = api.StatsView{}
	env.getJSON(t, "/stats", &st)
	// Three still run, over the limit: the first read's count is used.
	if !st.OpenEstimated || st.Open[po][saga.Running] != 6 || st.OpenCountedAt.IsZero() || !st.OpenCountedAt.Before(st.At) {
		t.Fatalf("second read: open %v estimated %v counted at %v (read at %v); want the first read's 6 running, an estimate counted before",
			st.Open, st.OpenEstimated, st.OpenCountedAt, st.At)
	}
	if !st.FinishedEstimated || st.Finished[po][saga.Completed] <= 3 {
		t.Fatalf("finished %v estimated %v; want an estimate scaled to the hour from the newest three", st.Finished, st.FinishedEstimated)
	}
	_, page := env.do(t, http.MethodGet, "/ui/sagas", "", "")
	for _, want := range []string{`id="open-estimated"`, `id="finished-estimated"`, "≈6"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page does not show %q:\n%s", want, page)
		}
	}
}

// A book-trip's three reservations, in flight together, are the saga's
// active steps side by side (JSON active_steps, each member's group, the
// page's "in flight together"); once they succeeded, the saga waits for its
// approval: waiting_for names the step, the event and the deadline, and
// the page shows it.
func TestStatusShowsGroupMembersAndWhatASagaWaitsFor(t *testing.T) {
	t.Parallel()
	env := newOpsEnv(t, nil)
	ctx := context.Background()
	trip := steps.Trip{TripID: "trip-1", Customer: "c", Flight: "LH100", Hotel: "ritz", Car: "mini", AmountCents: 1000, NeedsApproval: true}
	in, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: tripapi.SagaType, IdempotencyKey: trip.TripID, AggregateID: trip.TripID, Data: trip})
	if err != nil {
		t.Fatal(err)
	}
	members := []string{tripapi.StepReserveFlight, tripapi.StepReserveHotel, tripapi.StepReserveCar}
	var v api.SagaView
	env.getJSON(t, "/sagas/"+in.ID.String(), &v)
	if !slices.Equal(v.ActiveSteps, members) || len(v.WaitingFor) != 0 {
		t.Fatalf("active steps %v, waiting for %v; want the three reservations and nothing", v.ActiveSteps, v.WaitingFor)
	}
	for _, s := range v.Steps[:3] {
		if s.Group != tripapi.GroupReserve || s.State != saga.StepRunning {
			t.Errorf("step %s: group %q state %s, want group %s, running", s.Name, s.Group, s.State, tripapi.GroupReserve)
		}
	}
	st, page := env.do(t, http.MethodGet, "/ui/sagas/"+in.ID.String(), "", "")
	if want := "in flight together</span><code>reserve-flight</code> · <code>reserve-hotel</code> · <code>reserve-car</code>"; st != http.StatusOK || !strings.Contains(page, want) {
		t.Fatalf("page %d lacks %q:\n%s", st, want, page)
	}
	if strings.Contains(page, `class="waiting"`) {
		t.Fatal("the page shows a wait before the saga reached it")
	}

	for range members {
		c, ok := env.nextCommand(t, in.ID)
		if !ok {
			t.Fatal("fewer than three reservation commands in the outbox")
		}
		out, _ := json.Marshal(tripapi.ReserveResult{ReservationID: "r-" + c.Step})
		r := message.Reply{MessageID: uuid.New(), InReplyTo: c.MessageID, SagaID: in.ID, Step: c.Step, Action: c.Action, Outcome: message.Success, Payload: out}
		if err := pgx.BeginFunc(ctx, env.pool, func(tx pgx.Tx) error { return env.eng.ApplyReply(ctx, tx, r) }); err != nil {
			t.Fatalf("reply to %s: %v", c.Step, err)
		}
	}
	v = api.SagaView{}
	env.getJSON(t, "/sagas/"+in.ID.String(), &v)
	if !slices.Equal(v.ActiveSteps, []string{tripapi.StepAwaitApproval}) || len(v.WaitingFor) != 1 {
		t.Fatalf("active steps %v, waiting for %+v; want the approval only", v.ActiveSteps, v.WaitingFor)
	}
	if w := v.WaitingFor[0]; w.Step != tripapi.StepAwaitApproval || w.Event != tripapi.EventApproval || w.DeadlineAt == nil || !w.DeadlineAt.After(time.Now()) {
		t.Fatalf("waiting for %+v; want event approval at await-approval with a deadline ahead", w)
	}
	_, page = env.do(t, http.MethodGet, "/ui/sagas/"+in.ID.String(), "", "")
	if want := "waiting for</span>event <code>approval</code> at await-approval, until"; !strings.Contains(page, want) || strings.Contains(page, `id="in-flight"`) {
		t.Fatalf("page lacks %q (or still shows members in flight):\n%s", want, page)
	}
}
