package relay

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/outboxdb"
)

// SetAfterPublish installs the sweep's crash hook: f runs after a publish
// and before its rows are recorded; an error makes Run return as if the
// process died there.
func SetAfterPublish(r *Relay, f func() error) { r.afterPublish = f }

// Cycler runs single claim-publish-mark cycles outside Run (benchmarks).
type Cycler struct {
	r         *Relay
	prod      *direct
	published []int64
}

func NewCycler(r *Relay) *Cycler {
	return &Cycler{r: r, prod: newDirect(r.cfg, "sagaflow-bench")}
}

// Cycle runs one claim-publish cycle and records what it published, as the
// next cycle of a running relay would.
func (c *Cycler) Cycle(ctx context.Context, conn *pgx.Conn) (int, error) {
	res, _, err := c.r.cycle(ctx, conn, c.prod, &c.published, outboxdb.ListenKeep)
	n := res.rows
	if err != nil {
		return n, err
	}
	if len(c.published) > 0 {
		if err := c.r.record(ctx, conn, c.published); err != nil {
			return n, err
		}
		c.published = c.published[:0]
	}
	return n, nil
}

func (c *Cycler) Close() { c.prod.close() }

// SetAfterDispatch installs the dispatch's crash hook: f runs after a
// dispatch publish and before the delete; an error drops the delete.
func SetAfterDispatch(r *Relay, f func() error) { r.afterDispatch = f }
