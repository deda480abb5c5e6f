package bench

import (
	"encoding/binary"
	"maps"
	"testing"
)

// startupMessage builds a protocol 3.0 startup message with params.
func startupMessage(params ...string) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint32(b[4:8], protocolV3)
	for _, p := range params {
		b = append(append(b, p...), 0)
	}
	b = append(b, 0)
	binary.BigEndian.PutUint32(b[:4], uint32(len(b)))
	return b
}

func TestStartupApplication(t *testing.T) {
	t.Parallel()
	sslRequest := []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}
	cases := []struct {
		name   string
		msg    []byte
		app    string
		isInit bool
	}{
		{"named", startupMessage("user", "postgres", "application_name", "sagaflow-relay-bench_p1", "database", "x"), "sagaflow-relay-bench_p1", true},
		{"unnamed", startupMessage("user", "postgres", "database", "x"), "", true},
		{"ssl request", sslRequest, "", false},
		{"short", []byte{0, 0, 0}, "", false},
		{"length past the end", append([]byte{0, 0, 1, 0}, startupMessage()[4:]...), "", false},
		{"a query", []byte{'Q', 0, 0, 0, 13, 'S', 'E', 'L', 'E', 'C', 'T', ' ', '1', 0}, "", false},
	}
	for _, c := range cases {
		app, ok := startupApplication(c.msg)
		if app != c.app || ok != c.isInit {
			t.Errorf("%s: startupApplication = %q, %v; want %q, %v", c.name, app, ok, c.app, c.isInit)
		}
	}
}

// The groups add up to the total, the tracker's polls come off the
// orchestrator's pool, and every relay connection counts as a relay.
func TestRoundTripsByGroup(t *testing.T) {
	t.Parallel()
	before := map[string]int64{orchestratorApp: 100, participantsApp: 50, "sagaflow-relay-sagaflow": 7}
	after := map[string]int64{orchestratorApp: 400, participantsApp: 350, "sagaflow-relay-sagaflow": 107,
		"sagaflow-relay-bench_p1": 100, "psql": 10}
	var r Result
	r.roundTrips(tripsDelta(before, after), 100, 10)
	want := map[string]float64{"orchestrator": 20, "participants": 30, "relays": 20, "other": 1}
	if !maps.Equal(r.PGRoundTrips, want) {
		t.Fatalf("by group %v, want %v", r.PGRoundTrips, want)
	}
	if r.PGRoundTripsPerSaga != 71 {
		t.Fatalf("per saga %v, want 71", r.PGRoundTripsPerSaga)
	}
}
