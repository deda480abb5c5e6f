package inbox

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/internal/txhooks"
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
	// lazy: BEGIN and the batch savepoint are not sent yet; they go with
	// the handler's first statement (or with COMMIT if it sends none).
	lazy bool
	// head is written first in the round trip that commits: the dedupe
	// insert of a batch that records its message ids at the end (see
	// beginLazy).
	head *pgx.Batch
	// savepoints numbers the savepoints set in the transaction (Begin).
	savepoints int
}

// pending reports whether statements wait to go with the next one: BEGIN
// (lazy) or deferred writes, savepoints included.
func (t *batchTx) pending() bool {
	return t.lazy || (t.hooks != nil && len(t.hooks.tails) > 0)
}

var _ pgx.Tx = (*batchTx)(nil)

// flush sends the deferred writes pending, if any (and BEGIN with the
// savepoint first if they are not sent yet).
func (t *batchTx) flush(ctx context.Context) error {
	if t.lazy {
		br, err := t.start(ctx, nil)
		if err != nil {
			return err
		}
		return br.Close()
	}
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
	return beginNested(ctx, t)
}

// start sends BEGIN, the batch savepoint, the deferred writes pending and
// then b's statements in one round trip, and returns the results at b's
// first statement: the transaction of a lazy batchTx begins with the
// handler's first statement. An error of BEGIN or the savepoint is returned
// as it is (the connection), one of a deferred write as the handler's
// (handlerError, deferred).
func (t *batchTx) start(ctx context.Context, b *pgx.Batch) (pgx.BatchResults, error) {
	begin := t.lazy
	t.lazy = false
	full := &pgx.Batch{}
	if begin {
		full.BeginTx(pgx.TxOptions{})
		full.Queue("SAVEPOINT " + batchSavepoint)
	}
	var tails []*pgx.QueuedQuery
	if t.hooks != nil {
		for _, tb := range t.hooks.takeTails() {
			tails = append(tails, tb.QueuedQueries...)
		}
	}
	full.QueuedQueries = append(full.QueuedQueries, tails...)
	if b != nil {
		full.QueuedQueries = append(full.QueuedQueries, b.QueuedQueries...)
	}
	br := t.conn.Conn().SendBatch(ctx, full)
	if begin {
		t.Tx = br.Tx()
		for range 2 {
			if _, err := br.Exec(); err != nil {
				_ = br.Close()
				return nil, fmt.Errorf("inbox: begin the batch transaction: %w", err)
			}
		}
	}
	for _, q := range tails {
		var err error
		if q.Fn != nil {
			err = q.Fn(br)
		} else {
			_, err = br.Exec()
		}
		if err != nil {
			_ = br.Close()
			return nil, &handlerError{err: fmt.Errorf("inbox: the handler's deferred writes: %w", err), deferred: true}
		}
	}
	return br, nil
}

func (t *batchTx) Conn() *pgx.Conn {
	if t.pending() {
		// A caller on the bare connection must find the transaction
		// begun. (An error breaks the connection's transaction, which
		// the caller sees in its next statement.)
		_ = t.flush(context.Background())
	}
	return t.conn.Conn()
}

func (t *batchTx) LargeObjects() pgx.LargeObjects {
	if t.pending() {
		_ = t.flush(context.Background())
	}
	return t.Tx.LargeObjects()
}

// batchRows are the rows of a lazy batchTx's first statement: closing them
// (or reading past the last) closes the round trip's other results too.
type batchRows struct {
	pgx.Rows
	br    pgx.BatchResults
	done  bool
	brErr error
}

func (r *batchRows) finish() {
	if !r.done {
		r.done = true
		r.Rows.Close()
		r.brErr = r.br.Close()
	}
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.finish()
	return false
}

func (r *batchRows) Close() { r.finish() }

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.brErr
}

// rowOf is QueryRow over Query's rows, as pgx's own Row behaves: an error
// or no row at Scan, and the rows closed after.
type rowOf struct{ rows pgx.Rows }

func (r rowOf) Scan(dest ...any) error {
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// The batch transaction and its savepoints are txhooks.Tx: the hooks are
// the batch's.
var _ txhooks.Tx = (*flushing)(nil)

func (t *flushing) AfterCommit(fn func()) {
	if h := t.root.hooks; h != nil {
		h.fns = append(h.fns, fn)
	}
}

func (t *flushing) CanDefer() bool { return t.root.hooks != nil && t.root.hooks.defer_ }

func (t *flushing) CommitWith(b *pgx.Batch) bool { return t.root.hooks.commitWith(b) }

func (t *flushing) Flush(ctx context.Context) error { return t.root.flush(ctx) }

func (t *flushing) Prefetched() any {
	if t.root.hooks == nil {
		return nil
	}
	return t.root.hooks.prefetched
}

// flushing is a transaction (or savepoint) of root whose statements send
// root's deferred writes first.
type flushing struct {
	pgx.Tx
	root *batchTx
}

func (t *flushing) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !t.root.pending() {
		return t.Tx.Exec(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br, err := t.root.start(ctx, b)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (t *flushing) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !t.root.pending() {
		return t.Tx.Query(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br, err := t.root.start(ctx, b)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (t *flushing) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !t.root.pending() {
		return t.Tx.QueryRow(ctx, sql, args...)
	}
	rows, err := t.Query(ctx, sql, args...)
	if err != nil {
		return errRow{err}
	}
	return rowOf{rows}
}

func (t *flushing) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if !t.root.pending() {
		return t.Tx.SendBatch(ctx, b)
	}
	if b.Len() == 0 {
		if err := t.root.flush(ctx); err != nil {
			return pgx.FailedBatchResults(b, err)
		}
		return t.Tx.SendBatch(ctx, b)
	}
	br, err := t.root.start(ctx, b)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return br
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

// beginNested sets a savepoint of root's transaction and returns it as a
// nestedTx. SAVEPOINT is a deferred write: it goes with the next statement
// (or COMMIT), as its RELEASE and ROLLBACK TO do, so a savepoint costs no
// round trip of its own.
func beginNested(ctx context.Context, root *batchTx) (pgx.Tx, error) {
	if root.hooks == nil {
		root.hooks = &commitHooks{}
	}
	root.savepoints++
	name := fmt.Sprintf("sagaflow_sp_%d", root.savepoints)
	set := &pgx.Batch{}
	set.Queue("SAVEPOINT " + name)
	root.hooks.tails = append(root.hooks.tails, set)
	return &nestedTx{flushing: flushing{Tx: root, root: root}, name: name, set: set}, nil
}

// nestedTx is a savepoint of a batchTx (Begin): its statements go through
// root, sending what is pending with them; rolling it back drops the
// writes deferred since it was set (they are part of what it undoes).
type nestedTx struct {
	flushing
	name   string
	set    *pgx.Batch // its SAVEPOINT statement, a deferred write until sent
	closed bool
}

func (t *nestedTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if t.closed {
		return nil, pgx.ErrTxClosed
	}
	return beginNested(ctx, t.root)
}

// Commit releases the savepoint (a deferred write).
func (t *nestedTx) Commit(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	h := t.root.hooks
	if i := slices.Index(h.tails, t.set); i >= 0 && i == len(h.tails)-1 {
		// Nothing was written in it: it never needs to be set.
		h.truncate(i)
		return nil
	}
	if t.root.conn.Conn().PgConn().TxStatus() == 'E' {
		// A statement of the savepoint failed: RELEASE fails, now, with
		// the error the caller must see (deferred, it would fail the
		// statements sent with it).
		_, err := t.root.Tx.Exec(ctx, "RELEASE SAVEPOINT "+t.name)
		return err
	}
	rel := &pgx.Batch{}
	rel.Queue("RELEASE SAVEPOINT " + t.name)
	h.tails = append(h.tails, rel)
	return nil
}

// Rollback undoes what was written since the savepoint: writes still
// deferred are dropped, and where the savepoint was sent, ROLLBACK TO is
// sent at once (a statement of the savepoint may have failed, and a
// transaction in that state takes nothing else, not even the prepare of
// a later statement).
func (t *nestedTx) Rollback(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	h := t.root.hooks
	if i := slices.Index(h.tails, t.set); i >= 0 {
		// Not sent: neither was anything deferred after it.
		h.truncate(i)
		return nil
	}
	// Sent, and with it everything deferred before it: what is deferred
	// now was written inside the savepoint.
	h.truncate(0)
	_, err := t.root.Tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+t.name)
	return err
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
	if t.lazy {
		// Nothing was sent: the whole transaction goes now.
		b.BeginTx(pgx.TxOptions{})
	}
	if t.head != nil {
		b.QueuedQueries = append(b.QueuedQueries, t.head.QueuedQueries...)
	}
	deferred := t.head != nil
	if t.hooks != nil {
		for _, tb := range t.hooks.takeTails() {
			b.QueuedQueries = append(b.QueuedQueries, tb.QueuedQueries...)
			deferred = deferred || tb.Len() > 0
		}
	}
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
		what := "the handler's deferred writes"
		if t.head != nil {
			what = "the message ids recorded at the end and " + what
		}
		return &handlerError{err: fmt.Errorf("with %s: %w", what, err), deferred: true}
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
