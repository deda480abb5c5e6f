package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
)

// TestMigrateLockTimeoutNamesTheHolder: a session that holds the migration
// advisory lock (an operator's psql left open) no longer blocks Migrate
// for ever: it fails after its lock timeout with ErrLockTimeout naming the
// holder's pid, application_name, client address and since when; once
// the holder lets go, Migrate applies.
func TestMigrateLockTimeoutNamesTheHolder(t *testing.T) {
	t.Parallel()
	url := testkit.Database(t)
	pool := testkit.PoolURL(t, url)
	ctx := testkit.Context(t, time.Minute)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "stuck-psql"
	holder, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrations.LockKey); err != nil {
		t.Fatal(err)
	}
	var pid int32
	if err := holder.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	sets, err := migrations.Participant("p")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = migrations.MigrateWithin(ctx, pool, 500*time.Millisecond, sets...)
	took := time.Since(start)
	if !errors.Is(err, migrations.ErrLockTimeout) {
		t.Fatalf("Migrate while another session holds the lock: err %v (after %s); want ErrLockTimeout", err, took)
	}
	if took > 10*time.Second {
		t.Errorf("Migrate gave up after %s; want about its 500ms lock timeout", took)
	}
	for _, want := range []string{fmt.Sprintf("pid %d", pid), `application_name "stuck-psql"`, "connected since ", "idle since ", "pg_terminate_backend"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if !strings.Contains(err.Error(), "from 127.0.0.1") && !strings.Contains(err.Error(), "from ::1") && !strings.Contains(err.Error(), "local socket") {
		t.Errorf("error %q does not name the holder's client address", err)
	}
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock($1)`, migrations.LockKey); err != nil {
		t.Fatal(err)
	}
	applied, err := migrations.MigrateWithin(ctx, pool, 500*time.Millisecond, sets...)
	if err != nil || len(applied) == 0 {
		t.Fatalf("Migrate after the holder let go: %d applied, %v", len(applied), err)
	}
	if _, err := migrations.MigrateWithin(ctx, pool, 0, sets...); err == nil {
		t.Fatal("MigrateWithin with a lock timeout of 0: no error")
	}
}
