package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/internal/pgid"
)

//go:embed sql
var embedded embed.FS

// LockKey is the advisory lock every migration run holds, so two processes
// starting at once apply each version exactly once.
const LockKey int64 = 0x5a6a_f10e_0001

// LockTimeoutDefault bounds Migrate's wait for LockKey.
const LockTimeoutDefault = 30 * time.Second

// ErrLockTimeout: the migration lock was held by another session for the
// whole lock timeout; the error names the holder.
var ErrLockTimeout = errors.New("migrate: the migration advisory lock is held by another session")

var (
	fileRE   = regexp.MustCompile(`^(\d{3})_([a-z0-9_]+)\.up\.sql$`)
	errIdent = errors.New("schema name must match " + pgid.IdentifierPattern)
)

// Migration is one numbered SQL file of a set.
type Migration struct {
	Version int
	Name    string
	SQL     string
	// NoTransaction: the file's first line is NoTransactionMarker, and its
	// statements run one by one outside a transaction (CREATE INDEX
	// CONCURRENTLY cannot run inside one). See [NoTransactionMarker].
	NoTransaction bool
}

// NoTransactionMarker, as the first line of a migration file, makes
// Migrate run the file's statements one at a time outside a transaction,
// so that CREATE INDEX CONCURRENTLY and DROP INDEX CONCURRENTLY build and
// drop an index on a large table without blocking its writes. Each
// statement ends a line with ";" (no function bodies). A run cut off
// midway is run again from its first statement on the next Migrate, so
// every statement must be safe to repeat (IF EXISTS, IF NOT EXISTS, and
// DROP INDEX CONCURRENTLY IF EXISTS before a CREATE INDEX CONCURRENTLY,
// which could have left an invalid index).
const NoTransactionMarker = "-- sagaflow:no-transaction"

// Set is a named, ordered list of migrations applied into one Postgres
// schema. The SQL refers to the schema as {{schema}}.
type Set struct {
	Name       string
	Schema     string
	Migrations []Migration
}

// Orchestrator returns the sets the orchestrator needs in schema: its
// outbox and inbox, and the saga tables.
func Orchestrator(schema string) ([]Set, error) {
	return sets(schema, "messaging", "orchestrator")
}

// Participant returns the sets the participant SDK needs in schema: outbox,
// inbox and barrier. A participant's business tables are a further set built
// with FromFS.
func Participant(schema string) ([]Set, error) {
	return sets(schema, "messaging", "barrier")
}

func sets(schema string, names ...string) ([]Set, error) {
	var out []Set
	for _, n := range names {
		sub, err := fs.Sub(embedded, path.Join("sql", n))
		if err != nil {
			return nil, err
		}
		s, err := FromFS(n, schema, sub)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// FromFS reads NNN_name.up.sql files from the top of fsys into a Set.
func FromFS(name, schema string, fsys fs.FS) (Set, error) {
	if !pgid.ValidIdentifier(schema) {
		return Set{}, fmt.Errorf("migration set %q: schema %q: %w", name, schema, errIdent)
	}
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return Set{}, fmt.Errorf("migration set %q: read: %w", name, err)
	}
	s := Set{Name: name, Schema: schema}
	seen := map[int]string{}
	for _, e := range entries {
		m := fileRE.FindStringSubmatch(e.Name())
		if m == nil {
			return Set{}, fmt.Errorf("migration set %q: file %q is not named NNN_name.up.sql", name, e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		if prev, ok := seen[v]; ok {
			return Set{}, fmt.Errorf("migration set %q: version %d used by %q and %q", name, v, prev, e.Name())
		}
		seen[v] = e.Name()
		b, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return Set{}, err
		}
		sql := strings.ReplaceAll(string(b), "{{schema}}", pgx.Identifier{schema}.Sanitize())
		first, _, _ := strings.Cut(sql, "\n")
		s.Migrations = append(s.Migrations, Migration{
			Version:       v,
			Name:          m[2],
			SQL:           sql,
			NoTransaction: strings.TrimSpace(first) == NoTransactionMarker,
		})
	}
	sort.Slice(s.Migrations, func(i, j int) bool { return s.Migrations[i].Version < s.Migrations[j].Version })
	return s, nil
}

// Applied is one row of the migration history.
type Applied struct {
	Set       string
	Schema    string
	Version   int
	Name      string
	AppliedAt time.Time
}

// Migrate applies every missing migration of sets, each version in its own
// transaction, under a session advisory lock (LockKey) waited for at most
// LockTimeoutDefault. It returns what it applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool, sets ...Set) ([]Applied, error) {
	return MigrateWithin(ctx, pool, LockTimeoutDefault, sets...)
}

// MigrateWithin is Migrate waiting at most lockTimeout (> 0) for the
// migration lock; then it fails with ErrLockTimeout naming the session that
// holds it (pid, user, application_name, client address, since when).
func MigrateWithin(ctx context.Context, pool *pgxpool.Pool, lockTimeout time.Duration, sets ...Set) ([]Applied, error) {
	if lockTimeout <= 0 {
		return nil, fmt.Errorf("migrate: lock timeout %s: want more than 0", lockTimeout)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()
	if err := lockWithin(ctx, conn.Conn(), LockKey, lockTimeout); err != nil {
		return nil, err
	}
	defer func() {
		// Unlock on a fresh context so a cancelled ctx still releases it.
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, LockKey); err != nil {
			conn.Conn().Close(uctx) // drop the session, which drops the lock
		}
	}()

	var applied []Applied
	for _, s := range sets {
		schema := pgx.Identifier{s.Schema}.Sanitize()
		if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+schema+`;
CREATE TABLE IF NOT EXISTS `+schema+`.schema_migrations (
    set_name   text        NOT NULL,
    version    integer     NOT NULL,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (set_name, version)
)`); err != nil {
			return applied, fmt.Errorf("migrate set %q in schema %q: create history table: %w", s.Name, s.Schema, err)
		}
		done := map[int]bool{}
		rows, err := conn.Query(ctx, `SELECT version FROM `+schema+`.schema_migrations WHERE set_name = $1`, s.Name)
		if err != nil {
			return applied, fmt.Errorf("migrate set %q in schema %q: read history: %w", s.Name, s.Schema, err)
		}
		vs, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return applied, fmt.Errorf("migrate set %q in schema %q: read history: %w", s.Name, s.Schema, err)
		}
		for _, v := range vs {
			done[int(v)] = true
		}
		for _, m := range s.Migrations {
			if done[m.Version] {
				continue
			}
			record := `INSERT INTO ` + schema + `.schema_migrations (set_name, version, name) VALUES ($1, $2, $3)`
			var err error
			if m.NoTransaction {
				err = applyOutsideTx(ctx, conn.Conn(), m.SQL, record, s.Name, m.Version, m.Name)
			} else {
				err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, m.SQL); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, record, s.Name, m.Version, m.Name)
					return err
				})
			}
			if err != nil {
				return applied, fmt.Errorf("migrate set %q in schema %q: version %03d_%s: %w", s.Name, s.Schema, m.Version, m.Name, err)
			}
			applied = append(applied, Applied{Set: s.Name, Schema: s.Schema, Version: m.Version, Name: m.Name, AppliedAt: time.Now()})
		}
	}
	return applied, nil
}

// History lists what has been applied for sets, oldest first. A schema that
// was never migrated contributes nothing.
func History(ctx context.Context, pool *pgxpool.Pool, sets ...Set) ([]Applied, error) {
	var out []Applied
	for _, s := range sets {
		var exists bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, s.Schema+".schema_migrations").Scan(&exists); err != nil {
			return nil, fmt.Errorf("migration history of %q: %w", s.Schema, err)
		}
		if !exists {
			continue
		}
		rows, err := pool.Query(ctx, `SELECT version, name, applied_at FROM `+pgx.Identifier{s.Schema}.Sanitize()+`.schema_migrations WHERE set_name = $1 ORDER BY version`, s.Name)
		if err != nil {
			return nil, fmt.Errorf("migration history of %q: %w", s.Schema, err)
		}
		for rows.Next() {
			a := Applied{Set: s.Name, Schema: s.Schema}
			var v int32
			if err := rows.Scan(&v, &a.Name, &a.AppliedAt); err != nil {
				rows.Close()
				return nil, err
			}
			a.Version = int(v)
			out = append(out, a)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Pending reports how many migrations of sets are not applied yet; /readyz
// uses it to say whether the schema is current.
func Pending(ctx context.Context, pool *pgxpool.Pool, sets ...Set) (int, error) {
	h, err := History(ctx, pool, sets...)
	if err != nil {
		return 0, err
	}
	done := map[string]bool{}
	for _, a := range h {
		done[a.Schema+"/"+a.Set+"/"+strconv.Itoa(a.Version)] = true
	}
	n := 0
	for _, s := range sets {
		for _, m := range s.Migrations {
			if !done[s.Schema+"/"+s.Name+"/"+strconv.Itoa(m.Version)] {
				n++
			}
		}
	}
	return n, nil
}
