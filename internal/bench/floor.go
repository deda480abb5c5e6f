package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/dburl"
	"github.com/sagaflow/sagaflow/internal/devbroker"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
)

// The floor is what a lone saga of N steps cannot go below on a machine
// with this design, whatever the orchestrator's code: the chain of its
// 2N+1 durable commits (the start's, then each step's participant and
// orchestrator transactions) and 2N Kafka hops (a command and a reply a
// step), run one after the other with the clients sagaflow uses (pgx, one
// round trip a transaction; kafka-go, a Conn producing with acks=all and a
// Reader long-polling each topic), on the same Postgres and broker, with
// nothing else on the path: no saga state, no journal, no signing, no
// dispatcher or lanes. Each transaction writes what its counterpart must
// at the least (the start: a saga row and an outbox row; a participant: an
// inbox row, its effect and an outbox row; the orchestrator: an inbox
// row, the saga's update and an outbox row, the last step's without one).
//
// Floor runs it Config.Sagas times (after Config.Warmup chains) and
// reports the chain's percentiles and its parts'.

// FloorResult is one floor run.
type FloorResult struct {
	Steps int `json:"steps"`
	// Chains measured, each one lone saga's worth of commits and hops.
	Chains       int `json:"chains"`
	Transactions int `json:"transactions_per_chain"`
	Hops         int `json:"hops_per_chain"`
	// ChainP50Ms...: one chain, first commit's start to last commit's end.
	ChainP50Ms float64 `json:"chain_p50_ms"`
	ChainP90Ms float64 `json:"chain_p90_ms"`
	ChainP99Ms float64 `json:"chain_p99_ms"`
	// CommitP50Ms: one transaction's round trip with its durable commit.
	CommitP50Ms float64 `json:"commit_p50_ms"`
	CommitP90Ms float64 `json:"commit_p90_ms"`
	// ProduceP50Ms: one record written and acknowledged (acks=all).
	ProduceP50Ms float64 `json:"produce_p50_ms"`
	// FetchP50Ms: the acknowledgement to the record returned by the
	// waiting Reader's FetchMessage.
	FetchP50Ms float64 `json:"fetch_p50_ms"`
	// HopP50Ms: produce and fetch, the record's whole hop.
	HopP50Ms float64 `json:"hop_p50_ms"`
	HopP90Ms float64 `json:"hop_p90_ms"`
	Brokers  string  `json:"brokers"`
	Database string  `json:"database"`
}

// floorValueBytes is the size of a hop's record, about a signed command's.
const floorValueBytes = 600

// floorSchema is the scratch tables of a floor run.
const floorSchema = `
CREATE TABLE sagas (id uuid PRIMARY KEY, state text NOT NULL, version bigint NOT NULL,
  data jsonb NOT NULL, updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE outbox (id bigserial PRIMARY KEY, topic text NOT NULL, key text NOT NULL, value bytea NOT NULL);
CREATE TABLE inbox (message_id uuid PRIMARY KEY, received_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE effects (id uuid PRIMARY KEY, saga_id uuid NOT NULL, step int NOT NULL);`

// Floor measures the floor of a lone saga of c.Steps steps (see above) on
// a fresh database c.Database and the embedded broker (or c.Brokers).
func Floor(ctx context.Context, c Config) (FloorResult, error) {
	c = c.withDefaults()
	if c.Steps < 1 {
		return FloorResult{}, fmt.Errorf("bench: floor: steps is %d, want >= 1", c.Steps)
	}
	if c.Sagas < 1 {
		return FloorResult{}, fmt.Errorf("bench: floor: sagas (chains to measure) is %d, want >= 1", c.Sagas)
	}
	if c.Warmup < 0 {
		return FloorResult{}, fmt.Errorf("bench: floor: warmup is %d, want >= 0", c.Warmup)
	}
	url, err := dburl.Fresh(ctx, c.DatabaseURL, c.Database)
	if err != nil {
		return FloorResult{}, fmt.Errorf("bench: floor: %w", err)
	}
	brokers := c.Brokers
	if len(brokers) == 0 {
		b, err := devbroker.Start(devbroker.Config{Partitions: 1})
		if err != nil {
			return FloorResult{}, fmt.Errorf("bench: floor: start embedded broker: %w", err)
		}
		defer b.Close()
		brokers = b.Addrs()
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return FloorResult{}, fmt.Errorf("bench: floor: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, floorSchema); err != nil {
		return FloorResult{}, fmt.Errorf("bench: floor: create its tables: %w", err)
	}
	// Topics of their own, one partition each: a run does not read
	// another's records.
	run := uuid.NewString()[:8]
	cmdTopic, replyTopic := "sagaflow.floor."+run+".commands", "sagaflow.floor."+run+".replies"
	if err := kafkaclient.EnsureTopics(ctx, brokers, 1, 1, cmdTopic, replyTopic); err != nil {
		return FloorResult{}, fmt.Errorf("bench: floor: create topics: %w", err)
	}
	f, err := newFloorHops(ctx, brokers, cmdTopic, replyTopic)
	if err != nil {
		return FloorResult{}, err
	}
	defer f.close()
	var m floorMeasures
	for i := range c.Warmup + c.Sagas {
		var into *floorMeasures
		if i >= c.Warmup {
			into = &m
		}
		if err := f.chain(ctx, conn, c.Steps, into); err != nil {
			return FloorResult{}, fmt.Errorf("bench: floor: chain %d: %w", i+1, err)
		}
	}
	return m.result(c, brokers), nil
}

// floorMeasures collects a run's durations, in milliseconds.
type floorMeasures struct {
	chain, commit, produce, fetch, hop []float64
}

func (m *floorMeasures) result(c Config, brokers []string) FloorResult {
	for _, xs := range [][]float64{m.chain, m.commit, m.produce, m.fetch, m.hop} {
		slices.Sort(xs)
	}
	return FloorResult{
		Steps: c.Steps, Chains: len(m.chain), Transactions: 2*c.Steps + 1, Hops: 2 * c.Steps,
		ChainP50Ms: pct(m.chain, 0.5), ChainP90Ms: pct(m.chain, 0.9), ChainP99Ms: pct(m.chain, 0.99),
		CommitP50Ms: pct(m.commit, 0.5), CommitP90Ms: pct(m.commit, 0.9),
		ProduceP50Ms: pct(m.produce, 0.5), FetchP50Ms: pct(m.fetch, 0.5),
		HopP50Ms: pct(m.hop, 0.5), HopP90Ms: pct(m.hop, 0.9),
		Brokers: strings.Join(brokers, ","), Database: c.Database,
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// floorHops is a run's producer connections and its two waiting readers.
type floorHops struct {
	cmdConn, replyConn     *kafka.Conn
	cmdReader, replyReader *kafka.Reader
	value                  []byte
}

func newFloorHops(ctx context.Context, brokers []string, cmdTopic, replyTopic string) (_ *floorHops, err error) {
	f := &floorHops{value: make([]byte, floorValueBytes)}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	d := &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true}
	for _, x := range []struct {
		topic string
		conn  **kafka.Conn
		r     **kafka.Reader
	}{{cmdTopic, &f.cmdConn, &f.cmdReader}, {replyTopic, &f.replyConn, &f.replyReader}} {
		c, err := d.DialLeader(ctx, "tcp", brokers[0], x.topic, 0)
		if err != nil {
			return nil, fmt.Errorf("bench: floor: connect to the leader of %s: %w", x.topic, err)
		}
		c.SetRequiredAcks(int(kafka.RequireAll))
		*x.conn = c
		// As the inbox's partition readers are configured.
		*x.r = kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: x.topic, Partition: 0,
			MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 500 * time.Millisecond, QueueCapacity: 8})
		if err := (*x.r).SetOffset(kafka.FirstOffset); err != nil {
			return nil, fmt.Errorf("bench: floor: reader of %s: %w", x.topic, err)
		}
	}
	return f, nil
}

func (f *floorHops) close() {
	for _, r := range []*kafka.Reader{f.cmdReader, f.replyReader} {
		if r != nil {
			_ = r.Close()
		}
	}
	for _, c := range []*kafka.Conn{f.cmdConn, f.replyConn} {
		if c != nil {
			_ = c.Close()
		}
	}
}

// hop produces one record keyed by key on conn and waits for it on r.
func (f *floorHops) hop(ctx context.Context, conn *kafka.Conn, r *kafka.Reader, key string, m *floorMeasures) error {
	t0 := time.Now()
	if err := conn.SetWriteDeadline(t0.Add(10 * time.Second)); err != nil {
		return err
	}
	if _, err := conn.WriteMessages(kafka.Message{Key: []byte(key), Value: f.value}); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	t1 := time.Now()
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, err := r.FetchMessage(fctx)
	if err != nil {
		return fmt.Errorf("fetch: %w", err)
	}
	if string(got.Key) != key {
		return fmt.Errorf("fetch: got the record of %q, want %q's", got.Key, key)
	}
	if m != nil {
		t2 := time.Now()
		m.produce, m.fetch, m.hop = append(m.produce, ms(t1.Sub(t0))), append(m.fetch, ms(t2.Sub(t1))), append(m.hop, ms(t2.Sub(t0)))
	}
	return nil
}

// tx runs b as one implicit transaction, one round trip, committed
// durably at its end.
func tx(ctx context.Context, conn *pgx.Conn, b *pgx.Batch, m *floorMeasures) error {
	t0 := time.Now()
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	if m != nil {
		m.commit = append(m.commit, ms(time.Since(t0)))
	}
	return nil
}

// chain runs one lone saga's worth of commits and hops.
func (f *floorHops) chain(ctx context.Context, conn *pgx.Conn, steps int, m *floorMeasures) error {
	id := uuid.New()
	key := id.String()
	t0 := time.Now()
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO sagas (id, state, version, data) VALUES ($1, 'running', 1, '{"amount": 100}')`, id)
	b.Queue(`INSERT INTO outbox (topic, key, value) VALUES ('commands', $1, $2)`, key, f.value)
	if err := tx(ctx, conn, b, m); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	for s := 1; s <= steps; s++ {
		if err := f.hop(ctx, f.cmdConn, f.cmdReader, key, m); err != nil {
			return fmt.Errorf("step %d command: %w", s, err)
		}
		b = &pgx.Batch{}
		b.Queue(`INSERT INTO inbox (message_id) VALUES ($1)`, uuid.New())
		b.Queue(`INSERT INTO effects (id, saga_id, step) VALUES ($1, $2, $3)`, uuid.New(), id, s)
		b.Queue(`INSERT INTO outbox (topic, key, value) VALUES ('replies', $1, $2)`, key, f.value)
		if err := tx(ctx, conn, b, m); err != nil {
			return fmt.Errorf("step %d participant: %w", s, err)
		}
		if err := f.hop(ctx, f.replyConn, f.replyReader, key, m); err != nil {
			return fmt.Errorf("step %d reply: %w", s, err)
		}
		b = &pgx.Batch{}
		state := "running"
		if s == steps {
			state = "completed"
		}
		b.Queue(`INSERT INTO inbox (message_id) VALUES ($1)`, uuid.New())
		b.Queue(`UPDATE sagas SET state = $2, version = version + 1, updated_at = now() WHERE id = $1 AND version = $3`, id, state, int64(s))
		if s < steps {
			b.Queue(`INSERT INTO outbox (topic, key, value) VALUES ('commands', $1, $2)`, key, f.value)
		}
		if err := tx(ctx, conn, b, m); err != nil {
			return fmt.Errorf("step %d orchestrator: %w", s, err)
		}
	}
	if m != nil {
		m.chain = append(m.chain, ms(time.Since(t0)))
	}
	return nil
}

// ErrFloorFlags is why bench --floor refuses the flags of a saga run.
var ErrFloorFlags = errors.New("--floor measures one chain at a time: it takes --steps, --sagas, --warmup, --database, --brokers and --json only")
