package orchestrator

import (
	"context"
	"fmt"
	"github.com/jackc/pgx/v5"
	"sort"
	"time"
)

// SLO is each saga type's consistency window (sagas.<type>.slo): how long
// a saga of the type may take from its start to a terminal state. Types
// without one are not watched.
type SLO map[string]time.Duration

// Validate names the first type whose window is not positive.
func (s SLO) Validate() error {
	types := make([]string, 0, len(s))
	for t := range s {
		types = append(types, t)
	}
	sort.Strings(types)
	for _, t := range types {
		if s[t] <= 0 {
			return fmt.Errorf("the consistency window of saga type %s is %s, want > 0", t, s[t])
		}
	}
	return nil
}

// SLO results of a finished saga (sagaflow_sagas_slo_total{result}).
const (
	SLOMet    = "met"
	SLOMissed = "missed"
)

// sloResult is whether a saga of a type with window w that took took met
// it.
func sloResult(took, w time.Duration) string {
	if took <= w {
		return SLOMet
	}
	return SLOMissed
}

// SLOBreach is one type's open sagas past its consistency window.
type SLOBreach struct {
	Type   string        `json:"type"`
	Window time.Duration `json:"-"`
	// Open counts the sagas of the type not finished (running,
	// compensating or failed) that started longer ago than Window. Each of
	// the two counts (in flight, failed) stops after StatsExactLimit+1
	// sagas: AtLeast says one did, and Open is then a lower bound.
	Open    int64 `json:"open"`
	AtLeast bool  `json:"at_least"`
}

// sloBreachSQL counts a type's open sagas started before $2, on
// sagas_in_flight_idx and sagas_failed_idx (created_at, id), at most $3 of
// each: the scans read the open sagas older than the window only, and no
// more of them than that.
func (e *Engine) sloBreachSQL() string {
	count := func(pred string) string {
		return `(SELECT count(*) FROM (SELECT FROM ` + e.st.sagas + ` WHERE ` + pred + ` AND created_at < $2 AND type = $1 LIMIT $3) c)`
	}
	return `SELECT ` + count(inFlightPredicate) + `, ` + count(failedPredicate)
}

// SLOBreaches counts, per type with a window (sorted), the open sagas past
// it, in one read-only transaction sent as one batch.
func (e *Engine) SLOBreaches(ctx context.Context) ([]SLOBreach, error) {
	var out []SLOBreach
	b := readBatch()
	e.queueSLO(b, &out, e.cfg.Now())
	if err := e.sendRead(ctx, b); err != nil {
		return nil, err
	}
	return out, nil
}

// queueSLO queues the count of each type with a window (sorted) on b;
// the answers are appended to out when b's results are read.
func (e *Engine) queueSLO(b *pgx.Batch, out *[]SLOBreach, now time.Time) {
	types := make([]string, 0, len(e.cfg.SLO))
	for t := range e.cfg.SLO {
		types = append(types, t)
	}
	sort.Strings(types)
	limit := int64(e.cfg.StatsExactLimit)
	for _, t := range types {
		w := e.cfg.SLO[t]
		b.Queue(e.sloBreachSQL(), t, now.Add(-w), limit+1).QueryRow(func(r pgx.Row) error {
			var inFlight, failed int64
			if err := r.Scan(&inFlight, &failed); err != nil {
				return fmt.Errorf("sagas of type %s past their window: %w", t, err)
			}
			*out = append(*out, SLOBreach{Type: t, Window: w, Open: inFlight + failed, AtLeast: inFlight > limit || failed > limit})
			return nil
		})
	}
}
