package orchestrator

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// Backlog is what waits for someone, in the shape an operator acts on: the
// orchestrator outbox's unsent commands by topic, its dead rows by error
// class, per saga type the oldest compensating and the oldest flagged
// saga, and the open sagas past their type's consistency window. Every query reads a partial index the hot path keeps anyway
// (outbox_unsent_idx, outbox_dead_idx, sagas_in_flight_idx,
// sagas_failed_idx, sagas_flagged_idx), so a read costs the backlog, not the
// table's history.
type Backlog struct {
	// Outbox: unsent live rows by topic, topics sorted.
	Outbox []TopicBacklog `json:"outbox_by_topic"`
	// DeadByClass: dead outbox rows by DeadClass of their last error.
	DeadByClass map[string]int64 `json:"dead_by_class"`
	// OldestCompensating and OldestFlagged: per saga type (sorted), the
	// oldest open saga compensating, and flagged for an operator.
	OldestCompensating []OldestSaga `json:"oldest_compensating"`
	OldestFlagged      []OldestSaga `json:"oldest_flagged"`
	// SLO: per type with a consistency window (EngineConfig.SLO), the
	// open sagas past it.
	SLO []SLOBreach `json:"slo"`
}

// TopicBacklog is one topic's unsent commands.
type TopicBacklog struct {
	Topic   string `json:"topic"`
	Pending int64  `json:"pending"`
	// OldestUnsent is the age of the oldest unsent row.
	OldestUnsent time.Duration `json:"-"`
}

// OldestSaga is the oldest saga of a type in some condition.
type OldestSaga struct {
	Type  string        `json:"type"`
	ID    uuid.UUID     `json:"id"`
	State string        `json:"state"`
	Step  string        `json:"step,omitempty"`
	Flag  string        `json:"flag,omitempty"`
	Age   time.Duration `json:"-"`
}

// Dead-row error classes: a bounded label for a relay error's text.
const DeadClassOther = "other"

// deadClasses map a dead row's last error to its class, first match wins
// (case-insensitive regular expressions valid in Go and in Postgres).
var deadClasses = []struct{ class, pattern string }{
	{"too_large", `too[ _]large`},
	{"unknown_topic", `unknown[ _]topic`},
	{"not_authorized", `authoriz`},
	{"invalid_record", `invalid[ _]record|corrupt`},
	{"timeout", `timed?[ _]?out|deadline`},
}

var deadClassREs = func() []*regexp.Regexp {
	out := make([]*regexp.Regexp, len(deadClasses))
	for i, c := range deadClasses {
		out[i] = regexp.MustCompile(`(?i)` + c.pattern)
	}
	return out
}()

// DeadClasses lists every class DeadClass returns.
func DeadClasses() []string {
	out := make([]string, 0, len(deadClasses)+1)
	for _, c := range deadClasses {
		out = append(out, c.class)
	}
	return append(out, DeadClassOther)
}

// DeadClass is the class of a dead outbox row's last error.
func DeadClass(lastError string) string {
	for i, re := range deadClassREs {
		if re.MatchString(lastError) {
			return deadClasses[i].class
		}
	}
	return DeadClassOther
}

// deadClassSQL is DeadClass in SQL over the column last_error.
func deadClassSQL() string {
	var b strings.Builder
	b.WriteString("CASE")
	for _, c := range deadClasses {
		fmt.Fprintf(&b, " WHEN coalesce(last_error, '') ~* '%s' THEN '%s'", c.pattern, c.class)
	}
	fmt.Fprintf(&b, " ELSE '%s' END", DeadClassOther)
	return b.String()
}

// The backlog's queries, over the outbox (topic, dead) and the sagas
// (oldest): the first saga of each type in creation order is its oldest.
// The compensating ones are picked on sagas_compensating_idx, the flagged
// ones on sagas_flagged_idx, both by (type, created_at, id) and holding
// only the sagas in that condition (migrations 021 and 022).
func (e *Engine) backlogSQL() (topic, dead, compensating, flagged string) {
	ob := pgx.Identifier{e.ob.Schema(), "outbox"}.Sanitize()
	topic = `SELECT topic, count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
FROM ` + ob + ` WHERE sent_at IS NULL AND dead_at IS NULL GROUP BY topic ORDER BY topic`
	dead = `SELECT ` + deadClassSQL() + ` AS class, count(*) FROM ` + ob + ` WHERE dead_at IS NOT NULL AND sent_at IS NULL GROUP BY 1`
	return topic, dead, e.oldestPerTypeSQL(compensatingPredicate), e.oldestPerTypeSQL(flaggedPredicate)
}

// oldestPerTypeSQL picks the oldest saga of each type among those matching
// pred, whose partial index is ordered by (type, created_at, id): the
// recursive part skips from one type to the next (one index descent a
// type), and each type's oldest is the first entry of its range. So a read
// costs the number of types, not the number of sagas matching (a DISTINCT
// ON over the index read every entry: all of a mass compensation's).
func (e *Engine) oldestPerTypeSQL(pred string) string {
	s := e.st.sagas
	return `WITH RECURSIVE types AS (
  (SELECT type FROM ` + s + ` WHERE ` + pred + ` ORDER BY type LIMIT 1)
  UNION ALL
  SELECT (SELECT n.type FROM ` + s + ` n WHERE ` + pred + ` AND n.type > types.type ORDER BY n.type LIMIT 1)
  FROM types WHERE types.type IS NOT NULL)
SELECT o.type, o.id, o.state, o.current_step, o.flag, o.created_at FROM types CROSS JOIN LATERAL (
  SELECT type, id, state, current_step, flag, created_at FROM ` + s + ` WHERE ` + pred + ` AND type = types.type
  ORDER BY created_at, id LIMIT 1) o
ORDER BY o.type`
}

// Backlog reads the backlog in one read-only transaction sent as one
// batch (a round trip), which keeps to the indexes (sequential and bitmap
// scans off, as the outbox stats do).
func (e *Engine) Backlog(ctx context.Context) (Backlog, error) {
	var out Backlog
	b := readBatch()
	e.queueBacklog(b, &out, e.cfg.Now())
	if err := e.sendRead(ctx, b); err != nil {
		return Backlog{}, fmt.Errorf("backlog: %w", err)
	}
	return out, nil
}

// readBatch starts a batch of reads in one read-only transaction that
// keeps to the indexes; sendRead ends and sends it. JIT is off: with a
// scan disabled, a plan that still needs one (failed_counts, a row a type,
// is read whole) costs more than jit_above_cost, and compiling it took
// 142 ms for a 3 ms read.
func readBatch() *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue("BEGIN READ ONLY")
	b.Queue("SET LOCAL enable_seqscan = off")
	b.Queue("SET LOCAL enable_bitmapscan = off")
	b.Queue("SET LOCAL jit = off")
	return b
}

func (e *Engine) sendRead(ctx context.Context, b *pgx.Batch) error {
	b.Queue("COMMIT")
	return e.pool.SendBatch(ctx, b).Close()
}

// queueBacklog queues the backlog's reads on b; their answers fill out
// when b's results are read.
func (e *Engine) queueBacklog(b *pgx.Batch, out *Backlog, now time.Time) {
	out.DeadByClass = map[string]int64{}
	topicQ, deadQ, compQ, flagQ := e.backlogSQL()
	b.Queue(topicQ).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var t TopicBacklog
			var age float64
			if err := rows.Scan(&t.Topic, &t.Pending, &age); err != nil {
				return fmt.Errorf("outbox by topic: %w", err)
			}
			t.OldestUnsent = time.Duration(age * float64(time.Second))
			out.Outbox = append(out.Outbox, t)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("outbox by topic: %w", err)
		}
		return nil
	})
	b.Queue(deadQ).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var class string
			var n int64
			if err := rows.Scan(&class, &n); err != nil {
				return fmt.Errorf("dead outbox rows by class: %w", err)
			}
			out.DeadByClass[class] = n
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("dead outbox rows by class: %w", err)
		}
		return nil
	})
	b.Queue(compQ).Query(func(rows pgx.Rows) (err error) {
		if out.OldestCompensating, err = oldestByType(rows, now); err != nil {
			return fmt.Errorf("oldest compensating sagas: %w", err)
		}
		return nil
	})
	b.Queue(flagQ).Query(func(rows pgx.Rows) (err error) {
		if out.OldestFlagged, err = oldestByType(rows, now); err != nil {
			return fmt.Errorf("oldest flagged sagas: %w", err)
		}
		return nil
	})
	e.queueSLO(b, &out.SLO, now)
}

func oldestByType(rows pgx.Rows, now time.Time) ([]OldestSaga, error) {
	var out []OldestSaga
	for rows.Next() {
		var o OldestSaga
		var created time.Time
		if err := rows.Scan(&o.Type, &o.ID, &o.State, &o.Step, &o.Flag, &created); err != nil {
			return nil, err
		}
		o.Age = max(now.Sub(created), 0)
		out = append(out, o)
	}
	return out, rows.Err()
}

func (e *Engine) refreshBacklog(ctx context.Context) error {
	b, err := e.Backlog(ctx)
	if err != nil {
		return err
	}
	m := e.cfg.Metrics
	m.outboxTopicPending.Reset()
	m.outboxTopicOldest.Reset()
	for _, t := range b.Outbox {
		m.outboxTopicPending.WithLabelValues(t.Topic).Set(float64(t.Pending))
		m.outboxTopicOldest.WithLabelValues(t.Topic).Set(t.OldestUnsent.Seconds())
	}
	for _, c := range DeadClasses() {
		m.outboxDeadByClass.WithLabelValues(c).Set(float64(b.DeadByClass[c]))
	}
	setByType(m.oldestCompensating, b.OldestCompensating, e.reg.Types())
	setByType(m.oldestFlagged, b.OldestFlagged, e.reg.Types())
	for _, s := range b.SLO {
		m.sloWindow.WithLabelValues(s.Type).Set(s.Window.Seconds())
		m.sloBreaches.WithLabelValues(s.Type).Set(float64(s.Open))
	}
	return nil
}

// setByType sets vec's series of every type to the age of its oldest saga
// in oldest, 0 for the types without one.
func setByType(vec *prometheus.GaugeVec, oldest []OldestSaga, types []string) {
	ages := map[string]float64{}
	for _, t := range types {
		ages[t] = 0
	}
	for _, o := range oldest {
		ages[o.Type] = o.Age.Seconds()
	}
	for t, a := range ages {
		vec.WithLabelValues(t).Set(a)
	}
}
