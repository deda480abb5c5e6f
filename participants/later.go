package participants

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/txhooks"
)

// ExecLater runs a write of a handler's whose result the handler does not
// need (an insert or update that must happen, whatever rows it touches):
// inside an inbox batch that may defer writes it goes with the batch's
// COMMIT, in the round trip that records the barrier rows and the replies,
// so the handler's call costs no round trip of its own; elsewhere it runs
// now, as tx.Exec.
//
// A later statement of the handler on tx sends it first, so it sees the
// write. A deferred write that fails (a constraint, a conflict) fails the
// COMMIT: nothing of the batch is kept, and the inbox runs the batch again
// at once with nothing deferred, so the write runs in the handler's call
// and the handler gets its error there, as from tx.Exec. A handler that
// answers anything but success or accepted has its call undone with what
// it deferred, the same way. Reads, and writes whose result decides the
// answer (a stock count, a row that may be missing), use tx itself.
func ExecLater(ctx context.Context, tx pgx.Tx, sql string, args ...any) error {
	if h, ok := txhooks.Of(tx); ok && h.CanDefer() {
		b := &pgx.Batch{}
		b.Queue(sql, args...)
		if h.CommitWith(b) {
			return nil
		}
	}
	_, err := tx.Exec(ctx, sql, args...)
	return err
}
