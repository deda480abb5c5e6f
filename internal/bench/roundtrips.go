package bench

import (
	"context"
	"encoding/binary"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"
)

// pgTrips counts the round trips the bench process makes to Postgres, by
// the application_name of the connection. pgx writes everything it has
// queued (one statement, or a whole batch or pipeline) with one Write and
// then waits for the answer, so a Write on a connection is one round trip;
// the startup message and the authentication exchange count too (a pool
// opens its connections before the measurement starts).
type pgTrips struct {
	mu    sync.Mutex
	byApp map[string]*atomic.Int64
}

func newPGTrips() *pgTrips { return &pgTrips{byApp: map[string]*atomic.Int64{}} }

func (t *pgTrips) counter(app string) *atomic.Int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.byApp[app]
	if c == nil {
		c = new(atomic.Int64)
		t.byApp[app] = c
	}
	return c
}

// snapshot returns the counts so far by application name.
func (t *pgTrips) snapshot() map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]int64, len(t.byApp))
	for app, c := range t.byApp {
		out[app] = c.Load()
	}
	return out
}

// afterNetConnect is a pgconn AfterNetConnect hook (chained after next,
// if any) that counts the connection's round trips: it runs once TLS, if
// any, is set up, so the startup message and everything after it pass
// through the counter in clear. Connections copied from a pool's
// configuration (the relays' lock connections) are counted under their own
// application_name.
func (t *pgTrips) afterNetConnect(next func(context.Context, *pgconn.Config, net.Conn) (net.Conn, error)) func(context.Context, *pgconn.Config, net.Conn) (net.Conn, error) {
	return func(ctx context.Context, cfg *pgconn.Config, c net.Conn) (net.Conn, error) {
		if next != nil {
			var err error
			if c, err = next(ctx, cfg, c); err != nil {
				return nil, err
			}
		}
		return &countedPGConn{Conn: c, trips: t}, nil
	}
}

// countedPGConn counts its Writes once its startup message named the
// connection. pgconn does not write to one connection from two goroutines
// at once.
type countedPGConn struct {
	net.Conn
	trips *pgTrips
	n     *atomic.Int64
}

func (c *countedPGConn) Write(b []byte) (int, error) {
	if c.n == nil {
		app, ok := startupApplication(b)
		if !ok {
			// Not a startup message (a cancel request's connection).
			return c.Conn.Write(b)
		}
		c.n = c.trips.counter(app)
	}
	c.n.Add(1)
	return c.Conn.Write(b)
}

// protocolV3 is the version field of a protocol 3.0 startup message.
const protocolV3 = 3 << 16

// startupApplication reads the application_name parameter of a Postgres
// startup message ("" when it has none); ok is false when b is not a
// startup message (an SSLRequest, say).
func startupApplication(b []byte) (app string, ok bool) {
	if len(b) < 8 || binary.BigEndian.Uint32(b[4:8]) != protocolV3 {
		return "", false
	}
	n := int(binary.BigEndian.Uint32(b[:4]))
	if n > len(b) || n < 8 {
		return "", false
	}
	params := strings.Split(string(b[8:n]), "\x00")
	for i := 0; i+1 < len(params); i += 2 {
		if params[i] == "application_name" {
			return params[i+1], true
		}
	}
	return "", true
}

// tripsDelta is after - before per application name, without zeros.
func tripsDelta(before, after map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for app, v := range after {
		if d := v - before[app]; d > 0 {
			out[app] = d
		}
	}
	return out
}

// pgRoundTripGroups folds the per-connection counts of a run into the
// groups the bench reports: the orchestrator's pool (saga starts, reply
// batches, timers), the participants' pool and the relays (every outbox's
// lock connection).
func pgRoundTripGroups(by map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for app, n := range by {
		switch {
		case strings.HasPrefix(app, "sagaflow-relay-"):
			out["relays"] += n
		case app == orchestratorApp:
			out["orchestrator"] += n
		case app == participantsApp:
			out["participants"] += n
		default:
			out["other"] += n
		}
	}
	return out
}

// The application names of the bench's two pools.
const (
	orchestratorApp = "sagaflow-bench-orchestrator"
	participantsApp = "sagaflow-bench-participants"
)

// kafkaRequests is the number of requests the embedded broker has answered
// (0 with Config.Brokers: an outside broker is not counted).
func (st *stack) kafkaRequests() int64 {
	if st.broker == nil {
		return 0
	}
	return st.broker.Responses()
}

// roundTrips fills in the Postgres round trips per saga from the counts of
// the measured phase; the completion tracker's polls (one round trip each,
// on the orchestrator's pool) are measurement, not cost.
func (r *Result) roundTrips(by map[string]int64, polls int64, sagas int) {
	g := pgRoundTripGroups(by)
	g["orchestrator"] = max(g["orchestrator"]-polls, 0)
	r.PGRoundTrips = map[string]float64{}
	var total int64
	for k, v := range g {
		if v > 0 {
			r.PGRoundTrips[k] = float64(v) / float64(sagas)
			total += v
		}
	}
	r.PGRoundTripsPerSaga = float64(total) / float64(sagas)
}
