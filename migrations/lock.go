package migrations

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// lockWithin takes the session advisory lock key on conn, trying every
// 50 ms to 1 s until timeout; then it returns ErrLockTimeout naming the
// holder. A try never waits inside Postgres, so the wait is bounded
// whatever the holder does.
func lockWithin(ctx context.Context, conn *pgx.Conn, key int64, timeout time.Duration) error {
	start := time.Now()
	deadline := start.Add(timeout)
	wait := 50 * time.Millisecond
	for {
		var got bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&got); err != nil {
			return fmt.Errorf("migrate: take advisory lock %d: %w", key, err)
		}
		if got {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%w (waited %s for advisory lock %d): %s", ErrLockTimeout, time.Since(start).Round(time.Millisecond), key, holder(ctx, conn, key))
		}
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("migrate: waiting for advisory lock %d (held by %s): %w", key, holder(context.Background(), conn, key), ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// holder describes the sessions holding the session advisory lock key in
// this database (from pg_locks and pg_stat_activity), or says why it
// cannot.
func holder(ctx context.Context, conn *pgx.Conn, key int64) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// A bigint key is classid (high half), objid (low half), objsubid 1.
	rows, err := conn.Query(ctx, `SELECT l.pid, coalesce(a.usename, ''), coalesce(a.application_name, ''),
       coalesce(host(a.client_addr), ''), a.backend_start, coalesce(a.state, ''), a.state_change
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid = (($1::bigint >> 32) & 4294967295)::bigint::oid AND l.objid = ($1::bigint & 4294967295)::bigint::oid
ORDER BY l.pid`, key)
	if err != nil {
		return fmt.Sprintf("its holder could not be read: %v", err)
	}
	var out []string
	for rows.Next() {
		var (
			pid                 int32
			user, app, addr, st string
			since, changed      *time.Time
		)
		if err := rows.Scan(&pid, &user, &app, &addr, &since, &st, &changed); err != nil {
			rows.Close()
			return fmt.Sprintf("its holder could not be read: %v", err)
		}
		out = append(out, describeHolder(pid, user, app, addr, st, since, changed))
	}
	if err := rows.Err(); err != nil {
		return fmt.Sprintf("its holder could not be read: %v", err)
	}
	if len(out) == 0 {
		return "held by a session that released it just now, or that this role may not see (pg_locks shows no holder)"
	}
	return "held by " + strings.Join(out, "; ") + " (end that session, e.g. SELECT pg_terminate_backend(pid), if it is stuck)"
}

func describeHolder(pid int32, user, app, addr, state string, since, changed *time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pid %d", pid)
	if user != "" {
		fmt.Fprintf(&b, " user %q", user)
	}
	fmt.Fprintf(&b, " application_name %q", app)
	if addr == "" {
		b.WriteString(" from a local socket (or a background process)")
	} else {
		fmt.Fprintf(&b, " from %s", addr)
	}
	if since != nil {
		fmt.Fprintf(&b, ", connected since %s", since.UTC().Format(time.RFC3339))
	}
	if state != "" {
		fmt.Fprintf(&b, ", %s", state)
		if changed != nil {
			fmt.Fprintf(&b, " since %s", changed.UTC().Format(time.RFC3339))
		}
	}
	return b.String()
}
