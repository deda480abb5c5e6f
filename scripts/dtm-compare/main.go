// Command dtm-compare drives DTM with the saga sagaflow's bench runs, for
// the side-by-side comparison in docs/performance.md: three participants
// served over HTTP on loopback, each forward action one INSERT with a
// durable commit (compensations answer success and write nothing), and C
// workers in a closed loop, each submitting a three-branch saga to a DTM
// server and waiting for its result (WaitResult), for a duration after a
// warm-up. It prints one JSON line: sagas per second, the client's latency
// percentiles, the errors, and the rows each participant table holds,
// which must be one per saga submitted; it exits non-zero when a saga
// failed or a row is missing or extra.
//
// It is its own module (so the main module does not depend on DTM); run.sh
// beside it builds DTM from the same module and alternates the two.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dtm-labs/dtm/client/dtmcli"
	_ "github.com/lib/pq"
)

type result struct {
	Concurrency    int     `json:"concurrency"`
	Sagas          int     `json:"sagas"`
	Errors         int64   `json:"errors"`
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	SagasPerSecond float64 `json:"sagas_per_second"`
	LatencyP50Ms   float64 `json:"latency_p50_ms"`
	LatencyP99Ms   float64 `json:"latency_p99_ms"`
	RowsPerTable   [3]int  `json:"rows_per_table"`
	SagasSubmitted int     `json:"sagas_submitted"`
	// HostCPUSecPerSaga and HostBusy are the whole machine's CPU over the
	// measured phase (DTM's server, the participants, this client and
	// Postgres), as orchestrator bench reports its own.
	HostCPUSecPerSaga float64 `json:"host_cpu_seconds_per_saga,omitempty"`
	HostBusy          float64 `json:"host_busy,omitempty"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dtm-compare:", err)
		os.Exit(1)
	}
}

func run() error {
	conc := flag.Int("c", 1, "sagas in flight (closed-loop workers)")
	dur := flag.Duration("d", 10*time.Second, "measured duration")
	warm := flag.Int("warmup", 100, "sagas run one at a time before measuring")
	server := flag.String("dtm", "http://127.0.0.1:36789/api/dtmsvr", "DTM server's HTTP API")
	dsn := flag.String("db", "host=127.0.0.1 port=5432 user=postgres dbname=sagaflow_dtm_busi sslmode=disable", "participants' database")
	conns := flag.Int("conns", 16, "participants' connection pool size")
	flag.Parse()
	if *conc < 1 || *dur <= 0 || *warm < 0 || *conns < 1 {
		return errors.New("-c and -conns must be at least 1, -d positive, -warmup not negative")
	}

	db, err := sql.Open("postgres", *dsn)
	if err != nil {
		return fmt.Errorf("participants' database: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(*conns)
	db.SetMaxIdleConns(*conns)
	for i := 1; i <= 3; i++ {
		if _, err := db.Exec(fmt.Sprintf("CREATE TABLE IF NOT EXISTS step%d (gid text PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())", i)); err != nil {
			return fmt.Errorf("create participant table step%d: %w", i, err)
		}
		if _, err := db.Exec(fmt.Sprintf("TRUNCATE step%d", i)); err != nil {
			return fmt.Errorf("truncate participant table step%d: %w", i, err)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("participants' listener: %w", err)
	}
	mux := http.NewServeMux()
	for i := 1; i <= 3; i++ {
		insert := fmt.Sprintf("INSERT INTO step%d (gid) VALUES ($1)", i)
		mux.HandleFunc(fmt.Sprintf("/step%d", i), func(w http.ResponseWriter, r *http.Request) {
			if _, err := db.ExecContext(r.Context(), insert, r.URL.Query().Get("gid")); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			_, _ = w.Write([]byte(`{"dtm_result":"SUCCESS"}`))
		})
		mux.HandleFunc(fmt.Sprintf("/step%d/undo", i), func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(`{"dtm_result":"SUCCESS"}`))
		})
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Shutdown(context.Background())
	base := "http://" + ln.Addr().String()

	submit := func(gid string) error {
		s := dtmcli.NewSaga(*server, gid)
		for i := 1; i <= 3; i++ {
			s.Add(fmt.Sprintf("%s/step%d", base, i), fmt.Sprintf("%s/step%d/undo", base, i), map[string]string{"gid": gid})
		}
		s.WaitResult = true
		return s.Submit()
	}
	prefix := fmt.Sprintf("cmp-%d-", time.Now().UnixNano())
	for i := range *warm {
		if err := submit(fmt.Sprintf("%sw%d", prefix, i)); err != nil {
			return fmt.Errorf("warm-up saga %d: %w", i, err)
		}
	}

	var (
		next   atomic.Int64
		errs   atomic.Int64
		mu     sync.Mutex
		lats   []float64
		wg     sync.WaitGroup
		sample error
	)
	ticks0, haveTicks := hostTicks()
	t0 := time.Now()
	deadline := t0.Add(*dur)
	for range *conc {
		wg.Go(func() {
			var mine []float64
			for time.Now().Before(deadline) {
				gid := fmt.Sprintf("%s%d", prefix, next.Add(1))
				start := time.Now()
				if err := submit(gid); err != nil {
					errs.Add(1)
					mu.Lock()
					if sample == nil {
						sample = fmt.Errorf("saga %s: %w", gid, err)
					}
					mu.Unlock()
					continue
				}
				mine = append(mine, float64(time.Since(start).Microseconds())/1000)
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(t0).Seconds()
	ticks1, haveTicks1 := hostTicks()
	if len(lats) == 0 {
		return fmt.Errorf("no saga succeeded (%d errors; first: %v)", errs.Load(), sample)
	}
	sort.Float64s(lats)
	pct := func(q float64) float64 { return lats[int(q*float64(len(lats)-1))] }
	res := result{
		Concurrency: *conc, Sagas: len(lats), Errors: errs.Load(), ElapsedSeconds: elapsed,
		SagasPerSecond: float64(len(lats)) / elapsed, LatencyP50Ms: pct(0.5), LatencyP99Ms: pct(0.99),
		SagasSubmitted: *warm + int(next.Load()),
	}
	if haveTicks && haveTicks1 {
		busy, total := ticks1[0]-ticks0[0], ticks1[1]-ticks0[1]
		if total > 0 {
			res.HostCPUSecPerSaga = float64(busy) / userHZ / float64(res.Sagas)
			res.HostBusy = float64(busy) / float64(total)
		}
	}
	for i := 1; i <= 3; i++ {
		if err := db.QueryRow(fmt.Sprintf("SELECT count(*) FROM step%d WHERE gid LIKE $1", i), prefix+"%").Scan(&res.RowsPerTable[i-1]); err != nil {
			return fmt.Errorf("count rows of step%d: %w", i, err)
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return err
	}
	if res.Errors > 0 {
		return fmt.Errorf("%d sagas failed; first: %v", res.Errors, sample)
	}
	for i, n := range res.RowsPerTable {
		if n != *warm+res.Sagas {
			return fmt.Errorf("participant table step%d holds %d rows, want one for each of the %d sagas", i+1, n, *warm+res.Sagas)
		}
	}
	return nil
}

// userHZ is the kernel's USER_HZ, the unit of /proc/stat.
const userHZ = 100

// hostTicks reads the machine's busy ticks (user, nice, system, irq,
// softirq) and all ticks (with idle, iowait and steal) from /proc/stat's
// first line; ok is false where there is none.
func hostTicks() (t [2]int64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return t, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return t, false
	}
	var v [8]int64
	for i := range v {
		if v[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return t, false
		}
	}
	// user nice system idle iowait irq softirq steal
	t[0] = v[0] + v[1] + v[2] + v[5] + v[6]
	t[1] = t[0] + v[3] + v[4] + v[7]
	return t, true
}
