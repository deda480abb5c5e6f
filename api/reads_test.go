package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/inbox/dlq"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
)

// A flood of slow reads cannot delay starts: over the API's own pool of
// four connections (serve's http.db_max_conns), eight reads of the dead
// letters stuck behind a lock hold at most http.max_concurrent_reads (2)
// of its connections, and a start meanwhile completes promptly. Before,
// the reads took all four and the start waited for the handler timeout.
func TestReadFloodDoesNotDelayStarts(t *testing.T) {
	t.Parallel()
	url := testkit.Database(t)
	admin := testkit.PoolURL(t, url)
	testkit.Migrate(t, admin, testkit.MustSets(t)(migrations.Orchestrator("orch")))
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 4
	pc.ConnConfig.RuntimeParams["application_name"] = "api-pool"
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	eng, err := orchestrator.NewEngine(pool, reg, &orchestrator.EngineConfig{Schema: "orch"})
	if err != nil {
		t.Fatal(err)
	}
	store, err := dlq.New(pool, "orch")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newAPI(t, eng, &api.Config{DeadLetters: store, HandlerTimeout: 15 * time.Second}))
	t.Cleanup(srv.Close)

	// The dead letters locked: every read of them waits in Postgres,
	// holding its pool connection.
	ctx := context.Background()
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE orch.dead_letters IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			_ = tx.Rollback(ctx)
		}
	}
	t.Cleanup(unlock)
	var wg sync.WaitGroup
	reads := make(chan int, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := http.Get(srv.URL + "/dlq")
			if err != nil {
				reads <- 0
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			reads <- res.StatusCode
		}()
	}
	waiting := func() (int, error) {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'api-pool' AND wait_event_type = 'Lock'`).Scan(&n)
		return n, err
	}
	testkit.Eventually(t, 10*time.Second, "reads waiting on the locked dead letters", func() (bool, error) {
		n, err := waiting()
		return n >= api.MaxConcurrentReadsDefault, err
	})

	start := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(sctx, "POST", srv.URL+"/sagas", strings.NewReader(startJSON("order-during-read-flood")))
	req.Header.Set("Content-Type", jsonCT)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("a start during the read flood did not complete within 5s: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("a start during the read flood = %d %s", res.StatusCode, b)
	}
	t.Logf("start during the read flood: %s", time.Since(start))
	if n, err := waiting(); err != nil || n > api.MaxConcurrentReadsDefault {
		t.Errorf("%d reads hold pool connections (%v), want at most http.max_concurrent_reads %d", n, err, api.MaxConcurrentReadsDefault)
	}
	unlock()
	wg.Wait()
	close(reads)
	for st := range reads {
		if st != http.StatusOK {
			t.Errorf("a read of the flood answered %d after the lock went, want 200", st)
		}
	}
}
