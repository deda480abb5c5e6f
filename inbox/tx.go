package inbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// batchTx is the batch transaction as the Handler gets it: the transaction
// begun in the batch's first round trip (BEGIN pipelined with the dedupe
// insert) on a connection the inbox holds itself, so that the handler's
// deferred writes (CommitWith) and COMMIT go in one round trip too. Every
// statement sent through it first sends the deferred writes pending, so
// later statements see them.
type batchTx struct {
	flushing // the transaction begun on conn; its Commit and Rollback are never used
	conn     *pgxpool.Conn
	hooks    *commitHooks
	closed   bool
}

var _ pgx.Tx = (*batchTx)(nil)

// flush sends the deferred writes pending, if any.
func (t *batchTx) flush(ctx context.Context) error {
	if t.hooks == nil || len(t.hooks.tails) == 0 {
		return nil
	}
	b := joinBatches(t.hooks.takeTails())
	if err := t.conn.SendBatch(ctx, b).Close(); err != nil {
		// The handler's writes: the batch runs again with nothing
		// deferred, so the failure shows in the call that caused it.
		return &handlerError{err: fmt.Errorf("inbox: the handler's deferred writes: %w", err), deferred: true}
	}
	return nil
}

func joinBatches(bs []*pgx.Batch) *pgx.Batch {
	out := &pgx.Batch{}
	for _, b := range bs {
		out.QueuedQueries = append(out.QueuedQueries, b.QueuedQueries...)
	}
	return out
}

func (t *batchTx) Begin(ctx context.Context) (pgx.Tx, error) {
	return beginNested(ctx, t, t.Tx)
}

// flushing is a transaction (or savepoint) of root whose statements send
// root's deferred writes first.
type flushing struct {
	pgx.Tx
	root *batchTx
}

func (t *flushing) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.root.flush(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.Tx.Exec(ctx, sql, args...)
}

func (t *flushing) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.root.flush(ctx); err != nil {
		return nil, err
	}
	return t.Tx.Query(ctx, sql, args...)
}

func (t *flushing) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.root.flush(ctx); err != nil {
		return errRow{err}
	}
	return t.Tx.QueryRow(ctx, sql, args...)
}

func (t *flushing) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.root.flush(ctx); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return t.Tx.SendBatch(ctx, b)
}

func (t *flushing) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.root.flush(ctx); err != nil {
		return 0, err
	}
	return t.Tx.CopyFrom(ctx, table, cols, src)
}

func (t *flushing) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.root.flush(ctx); err != nil {
		return nil, err
	}
	return t.Tx.Prepare(ctx, name, sql)
}

// beginNested sets a savepoint in parent (after the deferred writes
// pending) and returns it as a nestedTx of root.
func beginNested(ctx context.Context, root *batchTx, parent pgx.Tx) (pgx.Tx, error) {
	if err := root.flush(ctx); err != nil {
		return nil, err
	}
	n, err := parent.Begin(ctx)
	if err != nil {
		return nil, err
	}
	mark := 0
	if root.hooks != nil {
		mark = len(root.hooks.tails)
	}
	return &nestedTx{flushing: flushing{Tx: n, root: root}, mark: mark}, nil
}

// nestedTx is a savepoint of a batchTx (Begin): its statements, too, send
// the deferred writes pending first; rolling it back drops the writes
// deferred since it was set (they are part of what it undoes).
type nestedTx struct {
	flushing
	mark int
}

func (t *nestedTx) Begin(ctx context.Context) (pgx.Tx, error) {
	return beginNested(ctx, t.root, t.Tx)
}

func (t *nestedTx) Rollback(ctx context.Context) error {
	if h := t.root.hooks; h != nil && t.mark < len(h.tails) {
		clear(h.tails[t.mark:])
		h.tails = h.tails[:t.mark]
		h.tailMark = min(h.tailMark, t.mark)
	}
	return t.Tx.Rollback(ctx)
}

// Commit sends the deferred writes and COMMIT in one round trip and
// returns the connection to the pool.
func (t *batchTx) Commit(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	defer t.conn.Release() // closed by the pool if still in a transaction
	b := &pgx.Batch{}
	if t.hooks != nil {
		b = joinBatches(t.hooks.takeTails())
	}
	deferred := b.Len() > 0
	rolledBack := false
	b.Queue("COMMIT").Exec(func(ct pgconn.CommandTag) error {
		rolledBack = ct.String() == "ROLLBACK"
		return nil
	})
	err := t.conn.SendBatch(ctx, b).Close()
	if err == nil && rolledBack {
		err = pgx.ErrTxCommitRollback
	}
	if err != nil && t.conn.Conn().PgConn().TxStatus() != 'I' {
		// A deferred write failed (the server skipped the rest, COMMIT
		// included), or the connection broke: roll back what is left.
		_, _ = t.conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
	}
	if err != nil && deferred && Classify(err) != ClassUnavailable {
		return &handlerError{err: fmt.Errorf("with the handler's deferred writes: %w", err), deferred: true}
	}
	return err
}

// Rollback rolls the transaction back and returns the connection to the
// pool.
func (t *batchTx) Rollback(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	defer t.conn.Release()
	if t.hooks != nil {
		t.hooks.takeTails()
	}
	if t.conn.Conn().PgConn().TxStatus() == 'I' {
		return nil
	}
	_, err := t.conn.Exec(ctx, "ROLLBACK")
	return err
}

// errRow is the Row of a statement not sent because the deferred writes
// before it failed.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
