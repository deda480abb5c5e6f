package relay

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/outbox"
)

// SetAfterPublish installs the crash hook: f runs after WriteMessages and
// before MarkSent; an error makes Run return as if the process died there.
func SetAfterPublish(r *Relay, f func() error) { r.afterPublish = f }

// Cycler runs single claim-publish-mark cycles outside Run (benchmarks).
type Cycler struct {
	r         *Relay
	tr        *kafka.Transport
	w         *kafka.Writer
	published []int64
}

func NewCycler(r *Relay) *Cycler {
	tr := &kafka.Transport{}
	return &Cycler{r: r, tr: tr, w: newWriter(r.cfg, tr)}
}

// Cycle runs one claim-publish cycle and records what it published, as the
// next cycle of a running relay would.
func (c *Cycler) Cycle(ctx context.Context, conn *pgx.Conn) (int, error) {
	res, _, err := c.r.cycle(ctx, conn, c.w, &c.published, outbox.ListenKeep)
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

func (c *Cycler) Close() {
	_ = c.w.Close()
	c.tr.CloseIdleConnections()
}

// SetDispatchAfterPublish installs the dispatcher's crash hook: f runs
// after a publish and before the delete; an error drops the delete.
func SetDispatchAfterPublish(d *Dispatcher, f func() error) { d.afterPublish = f }
