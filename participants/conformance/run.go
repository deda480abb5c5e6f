package conformance

import (
	"bytes"
	"cmp"
	"os"
	"testing"
)

// EnvTestDatabaseURL names the variable Run takes the Postgres server
// from when Config.DatabaseURL is empty (default
// DatabaseURLTestDefault).
const (
	EnvTestDatabaseURL     = "SAGAFLOW_TEST_DATABASE_URL"
	DatabaseURLTestDefault = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
)

// Run runs the kit inside a Go test, against the participant cfg.Command
// starts, until the test's context ends: every failed check is a test
// error naming the duty and why, and a kit that cannot run (no Postgres,
// a participant that does not start) fails the test at once. With
// Config.DatabaseURL empty, the scratch database goes on the server
// $SAGAFLOW_TEST_DATABASE_URL names, or on the local default.
func Run(t testing.TB, cfg Config) Report {
	t.Helper()
	cfg.DatabaseURL = cmp.Or(cfg.DatabaseURL, os.Getenv(EnvTestDatabaseURL), DatabaseURLTestDefault)
	rep, err := Verify(t.Context(), cfg)
	if err != nil {
		t.Fatalf("conformance: %v", err)
	}
	var buf bytes.Buffer
	_ = rep.WriteText(&buf)
	t.Logf("conformance of %s:\n%s", cfg.Participant, buf.String())
	for _, c := range rep.Checks {
		if !c.Passed {
			t.Errorf("conformance: %s: FAIL %s: %s", cfg.Participant, c.Name, c.Why)
		}
	}
	if rep.Passed == 0 {
		t.Errorf("conformance: %s: no check ran", cfg.Participant)
	}
	return rep
}
