package bench

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/relay"
	"github.com/sagaflow/sagaflow/saga"
)

// GenericType is the saga type of the generic N-step benchmark saga.
const GenericType = "bench.generic"

//go:embed sql/*.sql
var sqlFS embed.FS

// GenericData is the generic saga's data: only the item id.
type GenericData struct {
	ID string `json:"id"`
}

type genericPayload struct {
	ID string `json:"id"`
}

// GenericParticipant is the stable name of the participant of step i
// (1-based) of the generic saga; its schema is the name with '_' for '-'.
func GenericParticipant(i int) string { return fmt.Sprintf("bench-p%d", i) }

func genericSchema(i int) string { return fmt.Sprintf("bench_p%d", i) }

// GenericStep is the stable name of step i (1-based).
func GenericStep(i int) string { return fmt.Sprintf("step-%d", i) }

// GenericDefinition is an all-compensable saga of n steps, step i handled
// by participant GenericParticipant(i).
func GenericDefinition(n int) (*saga.Def, error) {
	if n < 1 || n > 50 {
		return nil, fmt.Errorf("bench: generic saga: steps is %d, want 1..50", n)
	}
	cmd := func(d GenericData) (any, error) { return genericPayload(d), nil }
	def := saga.Definition[GenericData]{Name: GenericType, Version: 1, Deadline: 5 * time.Minute}
	for i := 1; i <= n; i++ {
		def.Steps = append(def.Steps, saga.Step[GenericData]{
			Name: GenericStep(i), Participant: GenericParticipant(i), Kind: saga.Compensable,
			Command: cmd, Compensation: cmd, Timeout: 30 * time.Second,
			Retry: saga.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaxInterval: 5 * time.Second, Multiplier: 2},
		})
	}
	return def.Build()
}

// genericSet is the n participants of the generic saga.
type genericSet struct {
	pool  *pgxpool.Pool
	parts []*participants.Participant
}

type partOptions struct {
	// CommandKeys verify the orchestrator's commands; replyKey gives each
	// participant its own key to sign replies (see signing.go).
	CommandKeys  []message.Key
	replyKey     func(name string) message.Key
	Brokers      []string
	Logger       *slog.Logger
	InboxMetrics *inbox.Metrics
	RelayMetrics *relay.Metrics
	// Lanes of each participant's command consumer: the generic handlers
	// insert one row per saga and contend for nothing.
	Lanes int
	// BatchForward registers a batch form of each step's forward handler
	// (one INSERT for the batch's effects instead of one per command).
	BatchForward bool
}

func newGenericSet(pool *pgxpool.Pool, n int, o partOptions) (*genericSet, error) {
	s := &genericSet{pool: pool}
	for i := 1; i <= n; i++ {
		p, err := participants.New(pool, &participants.Config{
			Name: GenericParticipant(i), Schema: genericSchema(i), Brokers: o.Brokers, Logger: o.Logger,
			InboxMetrics: o.InboxMetrics, RelayMetrics: o.RelayMetrics, InboxLanes: o.Lanes,
			CommandKeys: o.CommandKeys, ReplyKey: o.replyKey(GenericParticipant(i)),
		})
		if err != nil {
			return nil, err
		}
		insert := `INSERT INTO ` + pgx.Identifier{genericSchema(i), "effects"}.Sanitize() + ` (saga_id, step) VALUES ($1, $2)`
		del := `DELETE FROM ` + pgx.Identifier{genericSchema(i), "effects"}.Sanitize() + ` WHERE saga_id = $1 AND step = $2`
		fwd := func(ctx context.Context, tx pgx.Tx, c message.Command) (participants.Result, error) {
			// pgtype.UUID: a uuid.UUID argument goes through driver.Valuer
			// and text, which showed in the bench's CPU profile
			// (docs/perf/figures.md#bench-pg-uuids).
			// Its result decides nothing: it goes with the commit where
			// the inbox allows (participants.ExecLater).
			if err := participants.ExecLater(ctx, tx, insert, pgtype.UUID{Bytes: c.SagaID, Valid: true}, c.Step); err != nil {
				return participants.Result{}, fmt.Errorf("insert effect of saga %s step %s: %w", c.SagaID, c.Step, err)
			}
			return participants.Success(nil), nil
		}
		comp := func(ctx context.Context, tx pgx.Tx, c message.Command) (participants.Result, error) {
			if _, err := tx.Exec(ctx, del, pgtype.UUID{Bytes: c.SagaID, Valid: true}, c.Step); err != nil {
				return participants.Result{}, fmt.Errorf("delete effect of saga %s step %s: %w", c.SagaID, c.Step, err)
			}
			return participants.Success(nil), nil
		}
		forward := participants.One(fwd)
		if o.BatchForward {
			insertMany := `INSERT INTO ` + pgx.Identifier{genericSchema(i), "effects"}.Sanitize() + ` (saga_id, step) SELECT * FROM unnest($1::uuid[], $2::text[])`
			fwdMany := func(ctx context.Context, tx pgx.Tx, cmds []message.Command) ([]participants.Result, error) {
				ids, steps := make([]pgtype.UUID, len(cmds)), make([]string, len(cmds))
				out := make([]participants.Result, len(cmds))
				for k, c := range cmds {
					ids[k], steps[k], out[k] = pgtype.UUID{Bytes: c.SagaID, Valid: true}, c.Step, participants.Success(nil)
				}
				if _, err := tx.Exec(ctx, insertMany, ids, steps); err != nil {
					return nil, fmt.Errorf("insert %d effects: %w", len(cmds), err)
				}
				return out, nil
			}
			forward = participants.WithBatch(fwd, fwdMany)
		}
		if err := p.Handle(GenericStep(i), forward, participants.One(comp)); err != nil {
			return nil, err
		}
		s.parts = append(s.parts, p)
	}
	return s, nil
}

func (s *genericSet) migrations() ([]migrations.Set, error) {
	sub, err := fs.Sub(sqlFS, "sql")
	if err != nil {
		return nil, err
	}
	var all []migrations.Set
	for i, p := range s.parts {
		sdk, err := p.Migrations()
		if err != nil {
			return nil, err
		}
		biz, err := migrations.FromFS("bench_effects", genericSchema(i+1), sub)
		if err != nil {
			return nil, err
		}
		all = append(append(all, sdk...), biz)
	}
	return all, nil
}

func (s *genericSet) topics() []string {
	var t []string
	for i := range s.parts {
		c := GenericParticipant(i+1) + ".commands"
		t = append(t, c, c+inbox.DLQSuffixDefault)
	}
	return t
}
