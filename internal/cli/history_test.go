package cli_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
)

// TestHistoryFillAndMeasure fills a database with a small history, checks
// its shape (every state of a production history, journals, timers of the
// running sagas, steps the engine can read) and measures the API on it:
// every read answers, and a page from the middle of the history is full.
func TestHistoryFillAndMeasure(t *testing.T) {
	url := testkit.Database(t)
	out, errOut, code := runCLI(t, "history", "fill", "--sagas", "3000", "--chunk", "1000", "--running", "0.02", "--json", "--database-url", url)
	if code != 0 {
		t.Fatalf("history fill: exit %d: %s", code, errOut)
	}
	var res struct {
		Sagas, Running int64
		JournalRows    int64   `json:"journal_rows"`
		BytesPer       float64 `json:"bytes_per_saga"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("history fill --json: %v: %s", err, out)
	}
	if res.Sagas != 3000 || res.Running != 60 || res.JournalRows < 3*3000 || res.BytesPer < 500 {
		t.Fatalf("history fill reported %+v", res)
	}

	pool := testkit.PoolURL(t, url)
	ctx := context.Background()
	byState := map[string]int{}
	rows, err := pool.Query(ctx, `SELECT state, count(*) FROM sagaflow.sagas GROUP BY state`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		byState[s] = n
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if byState["running"] != 60 || byState["completed"] == 0 || byState["compensated"] == 0 || byState["failed"] == 0 {
		t.Fatalf("sagas by state: %v", byState)
	}
	var timers, journal, noStart, badTimes int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM sagaflow.timers),
  (SELECT count(*) FROM sagaflow.journal),
  (SELECT count(*) FROM sagaflow.sagas s WHERE NOT EXISTS (SELECT 1 FROM sagaflow.journal j WHERE j.saga_id = s.id AND j.event = 'started')),
  (SELECT count(*) FROM sagaflow.sagas WHERE (finished_at IS NULL) <> (state = 'running') OR updated_at < created_at)`).Scan(&timers, &journal, &noStart, &badTimes); err != nil {
		t.Fatal(err)
	}
	if timers != 60 || int64(journal) != res.JournalRows || noStart != 0 || badTimes != 0 {
		t.Fatalf("timers %d (want 60), journal %d (reported %d), sagas without a start %d, with bad times %d", timers, journal, res.JournalRows, noStart, badTimes)
	}
	var stepsJSON []byte
	if err := pool.QueryRow(ctx, `SELECT steps FROM sagaflow.sagas WHERE type = 'place-order' AND state = 'completed' LIMIT 1`).Scan(&stepsJSON); err != nil {
		t.Fatal(err)
	}
	var st []saga.StepState
	if err := json.Unmarshal(stepsJSON, &st); err != nil || len(st) != 6 || st[5].State != saga.StepSucceeded {
		t.Fatalf("steps of a completed place-order saga: %v: %s", err, stepsJSON)
	}
	if _, errOut, code := runCLI(t, "history", "fill", "--sagas", "10", "--database-url", url); code == 0 || !strings.Contains(errOut, "history: sagas 0 to 10") {
		t.Fatalf("a second fill with the same seed: exit %d: %s", code, errOut)
	}

	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	eng, err := orchestrator.NewEngine(pool, reg, &orchestrator.EngineConfig{Schema: "sagaflow"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(eng, &api.Config{ClientToken: opsTestToken, ProtectReads: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	out, errOut, code = runCLI(t, "history", "measure", "--url", srv.URL, "--token", opsTestToken, "--repeat", "2", "--reconcile", "--json", "--database-url", url)
	if code != 0 {
		t.Fatalf("history measure: exit %d: %s", code, errOut)
	}
	var rep struct {
		Reads []struct {
			Name   string
			Status int
			Items  int
			Runs   []int64 `json:"runs_ns"`
		}
		Reconcile *struct{ What string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("history measure --json: %v: %s", err, out)
	}
	if len(rep.Reads) < 10 || rep.Reconcile == nil {
		t.Fatalf("history measure: %s", out)
	}
	for _, r := range rep.Reads {
		if r.Status != 200 || len(r.Runs) != 2 {
			t.Errorf("%s: status %d, %d runs", r.Name, r.Status, len(r.Runs))
		}
		switch r.Name {
		case "list, first page", "list, deep page", "list, deep filtered page", "list, state filter", "list, completed", "list, state and type":
			if r.Items != 50 {
				t.Errorf("%s: %d sagas, want a full page of 50", r.Name, r.Items)
			}
		case "lookup by business key":
			if r.Items != 1 {
				t.Errorf("%s: %d sagas, want 1", r.Name, r.Items)
			}
		}
	}
}
