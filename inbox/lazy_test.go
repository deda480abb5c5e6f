package inbox

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
)

// writeCounter counts the writes pgx makes on its connections: one per
// round trip for the small statements here.
type writeCounter struct {
	net.Conn
	n *atomic.Int64
}

func (c writeCounter) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(p)
}

// A lazily begun batch (beginLazy) sends nothing until the handler's first
// statement, which carries BEGIN and the batch savepoint with it, and
// records its ids with the COMMIT: two round trips for a handler that sends
// one statement, whichever way it sends it, one for a handler that sends
// none; every statement runs in the one transaction, after the writes the
// handler deferred; and a batch holding an id recorded before fails its
// commit as a deferred write does (the batch then runs again the usual
// way), leaving nothing of the handler's behind.
func TestLazyBatchSendsBeginWithTheFirstStatement(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	url := testkit.Database(t)
	setupPool := testkit.PoolURL(t, url)
	testkit.Migrate(t, setupPool, testkit.MustSets(t)(migrations.Participant("p")))
	if _, err := setupPool.Exec(ctx, `CREATE TABLE effects (id uuid PRIMARY KEY, xid bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	cfg.MaxConns = 1
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return writeCounter{Conn: c, n: &writes}, nil
	}
	// The count starts after Acquire: no liveness ping then.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil { // the one connection, opened
		t.Fatal(err)
	}
	const table = `"p"."inbox"`
	insert := `INSERT INTO effects (id, xid) VALUES ($1, txid_current())`

	type handler func(tx pgx.Tx, hooks *commitHooks, id uuid.UUID) error
	cases := []struct {
		name       string
		roundTrips int64
		effects    int
		h          handler
	}{
		{"Exec", 2, 1, func(tx pgx.Tx, _ *commitHooks, id uuid.UUID) error {
			_, err := tx.Exec(ctx, insert, id)
			return err
		}},
		{"Query read to the end, then QueryRow", 3, 1, func(tx pgx.Tx, _ *commitHooks, id uuid.UUID) error {
			rows, err := tx.Query(ctx, `SELECT txid_current() FROM generate_series(1, 3)`)
			if err != nil {
				return err
			}
			var xids []int64
			for rows.Next() {
				var x int64
				if err := rows.Scan(&x); err != nil {
					return err
				}
				xids = append(xids, x)
			}
			if err := rows.Err(); err != nil || len(xids) != 3 {
				return errors.Join(err, errors.New("want 3 rows"))
			}
			var x int64
			if err := tx.QueryRow(ctx, `WITH i AS (`+insert+` RETURNING xid) SELECT xid FROM i`, id).Scan(&x); err != nil {
				return err
			}
			if x != xids[0] {
				return errors.New("the QueryRow ran in another transaction than the Query")
			}
			return nil
		}},
		{"QueryRow first", 2, 1, func(tx pgx.Tx, _ *commitHooks, id uuid.UUID) error {
			var x int64
			return tx.QueryRow(ctx, `WITH i AS (`+insert+` RETURNING xid) SELECT xid FROM i`, id).Scan(&x)
		}},
		{"SendBatch", 2, 1, func(tx pgx.Tx, _ *commitHooks, id uuid.UUID) error {
			b := &pgx.Batch{}
			b.Queue(insert, id)
			var n int
			b.Queue(`SELECT count(*) FROM effects WHERE id = $1`, id).QueryRow(func(r pgx.Row) error { return r.Scan(&n) })
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
			if n != 1 {
				return errors.New("the batch's second statement did not see its first")
			}
			return nil
		}},
		{"deferred write, then a statement that reads it", 2, 1, func(tx pgx.Tx, hooks *commitHooks, id uuid.UUID) error {
			b := &pgx.Batch{}
			b.Queue(insert, id)
			hooks.tails = append(hooks.tails, b)
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM effects WHERE id = $1`, id).Scan(&n); err != nil {
				return err
			}
			if n != 1 {
				return errors.New("the statement did not see the write deferred before it")
			}
			return nil
		}},
		{"undo first (rollback to the batch savepoint)", 2, 0, func(tx pgx.Tx, _ *commitHooks, _ uuid.UUID) error {
			_, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+batchSavepoint)
			return err
		}},
		{"no statement", 1, 0, func(pgx.Tx, *commitHooks, uuid.UUID) error { return nil }},
	}
	for _, c := range cases {
		// Twice: the first run prepares the statements (a round trip of
		// its own per new statement); the second is what a running
		// consumer pays.
		for run := 1; run <= 2; run++ {
			id := uuid.New()
			hooks := &commitHooks{defer_: true, lazy: true}
			before := writes.Load()
			tx, fresh, err := beginLazy(ctx, pool, table, []uuid.UUID{id}, []string{"t"}, hooks)
			if err != nil {
				t.Fatal(err)
			}
			if !fresh[id] {
				t.Fatalf("%s: the id is not fresh", c.name)
			}
			if got := tx.conn.Conn().PgConn().TxStatus(); got != 'I' || writes.Load() != before {
				_ = tx.Rollback(ctx)
				t.Fatalf("%s: beginLazy sent something (status %c, %d writes)", c.name, got, writes.Load()-before)
			}
			if err := c.h(tx, hooks, id); err != nil {
				_ = tx.Rollback(ctx)
				t.Fatalf("%s: %v", c.name, err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("%s: commit: %v", c.name, err)
			}
			if got := writes.Load() - before; run == 2 && got != c.roundTrips {
				t.Errorf("%s: %d round trips, want %d", c.name, got, c.roundTrips)
			}
			var recorded, effects int
			if err := setupPool.QueryRow(ctx, `SELECT (SELECT count(*) FROM p.inbox WHERE message_id = $1), (SELECT count(*) FROM effects WHERE id = $1)`, id).Scan(&recorded, &effects); err != nil {
				t.Fatal(err)
			}
			if recorded != 1 || effects != c.effects {
				t.Fatalf("%s: %d inbox rows and %d effects after the commit, want 1 and %d", c.name, recorded, effects, c.effects)
			}
		}
	}

	// A copy of a message recorded before: the handler's write is made,
	// the commit fails on the inbox's key as a deferred write would, and
	// nothing of the handler's stays.
	seen := uuid.New()
	if _, err := setupPool.Exec(ctx, `INSERT INTO p.inbox (message_id, topic) VALUES ($1, 't')`, seen); err != nil {
		t.Fatal(err)
	}
	tx, _, err := beginLazy(ctx, pool, table, []uuid.UUID{seen}, []string{"t"}, &commitHooks{defer_: true, lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, insert, seen); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	err = tx.Commit(ctx)
	var he *handlerError
	if !errors.As(err, &he) || !he.deferred || he.transient {
		t.Fatalf("commit of a copy: %v, want a deferred (not transient) handlerError", err)
	}
	var effects int
	if err := setupPool.QueryRow(ctx, `SELECT count(*) FROM effects WHERE id = $1`, seen).Scan(&effects); err != nil {
		t.Fatal(err)
	}
	if effects != 0 {
		t.Fatalf("the copy's effect was committed")
	}
	// The connection went back to the pool clean.
	if err := pool.QueryRow(ctx, `SELECT 1`).Scan(new(int)); err != nil {
		t.Fatalf("the pool's connection after the failed commit: %v", err)
	}
}
