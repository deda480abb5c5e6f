package relay

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
)

// SetAfterPublish installs the crash hook: f runs after WriteMessages and
// before MarkSent; an error makes Run return as if the process died there.
func SetAfterPublish(r *Relay, f func() error) { r.afterPublish = f }

// Cycler runs single claim-publish-mark cycles outside Run (benchmarks).
type Cycler struct {
	r  *Relay
	tr *kafka.Transport
	w  *kafka.Writer
}

func NewCycler(r *Relay) *Cycler {
	tr := &kafka.Transport{}
	return &Cycler{r: r, tr: tr, w: r.newWriter(tr)}
}

func (c *Cycler) Cycle(ctx context.Context, conn *pgx.Conn) (int, error) {
	return c.r.cycle(ctx, conn, c.w)
}

func (c *Cycler) Close() {
	_ = c.w.Close()
	c.tr.CloseIdleConnections()
}
