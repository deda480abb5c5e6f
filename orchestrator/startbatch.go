package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/saga"
)

// Start batching (group commit). Concurrent Start calls are gathered into
// shared transactions: a caller that finds fewer than StartLanes batch
// transactions running becomes a leader and commits the waiting requests,
// up to StartBatch at a time, until none wait; the others wait for their
// result. A lone caller commits alone at once, so nothing waits for a batch
// to fill. Each request keeps the meaning of its own Start: the same
// checks, the same rows, created=false for an existing idempotency key.
// If a batch transaction fails, each of its requests is retried in a
// transaction of its own, so one bad request cannot fail its neighbours.

// Start batching defaults.
const (
	StartBatchDefault = 128
	StartLanesDefault = 4
	// startBatchTimeout bounds one batch transaction; it belongs to no
	// caller, so no caller's context may cancel it.
	startBatchTimeout = 30 * time.Second
)

const (
	startWaiting int32 = iota
	startTaken
	startAbandoned
)

type pendingStart struct {
	req   StartRequest
	def   *saga.Def
	data  json.RawMessage
	state atomic.Int32
	done  chan struct{}

	in      saga.Instance
	created bool
	err     error
}

type startBatcher struct {
	e          *Engine
	max, lanes int

	mu      sync.Mutex
	pending []*pendingStart
	running int
}

// do starts p, in a batch with whatever other starts are waiting.
func (b *startBatcher) do(ctx context.Context, p *pendingStart) (saga.Instance, bool, error) {
	b.mu.Lock()
	b.pending = append(b.pending, p)
	if b.running < b.lanes {
		b.running++
		for len(b.pending) > 0 {
			batch := b.take()
			b.mu.Unlock()
			b.run(batch)
			b.mu.Lock()
		}
		b.running--
	}
	b.mu.Unlock()
	select {
	case <-p.done:
	case <-ctx.Done():
		if p.state.CompareAndSwap(startWaiting, startAbandoned) {
			return saga.Instance{}, false, fmt.Errorf("start saga %q: %w", p.req.Type, ctx.Err())
		}
		// Already in a transaction: its outcome is the answer.
		<-p.done
	}
	return p.in, p.created, p.err
}

// take removes up to max waiting starts from the queue, at most one per
// (type, idempotency key): a second start of a key waits for the next
// batch and then finds the saga the first one created. Called with mu held.
func (b *startBatcher) take() []*pendingStart {
	type key struct{ typ, key string }
	seen := map[key]bool{}
	var batch []*pendingStart
	rest := b.pending[:0]
	for _, p := range b.pending {
		k := key{p.req.Type, p.req.IdempotencyKey}
		switch {
		case p.state.Load() == startAbandoned:
		case len(batch) >= b.max || seen[k]:
			rest = append(rest, p)
		case p.state.CompareAndSwap(startWaiting, startTaken):
			seen[k] = true
			batch = append(batch, p)
		}
	}
	clear(b.pending[len(rest):])
	b.pending = rest
	return batch
}

func (b *startBatcher) run(batch []*pendingStart) {
	if len(batch) == 0 {
		return
	}
	e := b.e
	ctx, cancel := context.WithTimeout(context.Background(), startBatchTimeout)
	defer cancel()
	created, ok := e.startPipelined(ctx, batch)
	if !ok && len(batch) > 1 {
		resetStarts(batch)
		var pc *postCommit
		err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			var err error
			pc = &postCommit{}
			created, err = e.startMany(ctx, tx, batch, pc)
			return err
		})
		if err == nil {
			e.flush(pc)
		}
		if ok = err == nil; !ok {
			e.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "saga start batch failed; starting each alone",
				slog.Int("starts", len(batch)), slog.Any("error", err))
		}
	}
	if ok {
		for _, s := range created {
			e.startedLog(ctx, s)
		}
		for _, p := range batch {
			close(p.done)
		}
		return
	}
	resetStarts(batch)
	for _, p := range batch {
		e.startAlone(ctx, p)
		close(p.done)
	}
}

// startAlone starts p in a transaction of its own and sets its result.
func (e *Engine) startAlone(ctx context.Context, p *pendingStart) {
	var pc *postCommit
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		pc = &postCommit{}
		return e.startOne(ctx, tx, p, pc)
	})
	if err != nil {
		p.in, p.created, p.err = saga.Instance{}, false, err
		return
	}
	e.flush(pc)
}

// startOne starts p inside tx (a batch of one) and returns its error.
func (e *Engine) startOne(ctx context.Context, tx pgx.Tx, p *pendingStart, pc *postCommit) error {
	created, err := e.startMany(ctx, tx, []*pendingStart{p}, pc)
	if err != nil {
		return err
	}
	for _, s := range created {
		e.startedLog(ctx, s)
	}
	return p.err
}

// startPipelined is the fast path of a batch of starts: BEGIN, the saga,
// timer, journal and outbox inserts and COMMIT go to Postgres in one round
// trip. The saga insert fails on an existing idempotency key, so the
// pipelined COMMIT runs only if every saga was new; otherwise (that, or
// any error) the transaction is rolled back and it reports false, and the
// batch takes the path that handles those cases.
func (e *Engine) startPipelined(ctx context.Context, batch []*pendingStart) ([]started, bool) {
	ss, ps := e.decideStarts(batch)
	if len(ps) != len(batch) {
		return nil, false // a request the general path reports alone
	}
	ins := make([]*saga.Instance, len(ss))
	ds := make([]saga.Decision, len(ss))
	for i := range ss {
		ins[i], ds[i] = &ss[i].d.Next, ss[i].d
	}
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return nil, false
	}
	// A connection released inside a transaction is closed by the pool.
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	inserted := make(map[uuid.UUID]bool, len(ins))
	if err := e.st.queueInsert(b, e.st.insertNewSQL, ins, inserted); err != nil {
		return nil, false
	}
	pc := &postCommit{}
	if err := e.queueWrites(b, ds, pc); err != nil {
		return nil, false
	}
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		// A statement failed (the server skipped the rest, COMMIT
		// included), or the outcome of COMMIT is unknown: the slow path's
		// insert finds committed sagas by their idempotency keys.
		if conn.Conn().PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(ctx, "ROLLBACK")
		}
		return nil, false
	}
	e.flush(pc)
	for i, p := range ps {
		p.in, p.created = ss[i].d.Next, true
	}
	return ss, true
}

// startMany inserts the sagas of batch in one statement, then the journal
// and the first commands of those it created: the path of every start
// but the pipelined one (a batch whose sagas are all new). It sets each
// request's result and returns the created sagas.
func (e *Engine) startMany(ctx context.Context, tx pgx.Tx, batch []*pendingStart, pc *postCommit) ([]started, error) {
	ds, ps := e.decideStarts(batch)
	ds, ps, err := e.admitSingleLive(ctx, tx, ds, ps)
	if err != nil || len(ds) == 0 {
		return nil, err
	}
	ins := make([]*saga.Instance, len(ds))
	for i := range ds {
		ins[i] = &ds[i].d.Next
	}
	inserted, err := e.st.insertMany(ctx, tx, ins)
	if err != nil {
		return nil, err
	}
	var created []started
	var decisions []saga.Decision
	for i, p := range ps {
		if inserted[ds[i].d.Next.ID] {
			p.in, p.created = ds[i].d.Next, true
			created = append(created, ds[i])
			decisions = append(decisions, ds[i].d)
			continue
		}
		existing, err := e.st.loadByKey(ctx, tx, p.req.Type, p.req.IdempotencyKey)
		if err != nil {
			return nil, err
		}
		p.in = existing
	}
	if err := e.writeMany(ctx, tx, decisions, pc); err != nil {
		return nil, err
	}
	return created, nil
}

// resetStarts clears the results of a batch before another attempt.
func resetStarts(batch []*pendingStart) {
	for _, p := range batch {
		p.in, p.created, p.err = saga.Instance{}, false, nil
	}
}

// decideStarts makes the first decision of every start of batch; a start
// whose decision fails gets its error and is left out of the result.
func (e *Engine) decideStarts(batch []*pendingStart) ([]started, []*pendingStart) {
	ss := make([]started, 0, len(batch))
	ps := make([]*pendingStart, 0, len(batch))
	for _, p := range batch {
		s, err := e.startDecision(p.req, p.def, p.data)
		if err != nil {
			p.err = err
			continue
		}
		ss, ps = append(ss, s), append(ps, p)
	}
	return ss, ps
}

// started is a new saga: its instance before and its first decision.
type started struct {
	prev saga.Instance
	d    saga.Decision
}

// startDecision is the first decision of a new saga for req.
func (e *Engine) startDecision(req StartRequest, def *saga.Def, data json.RawMessage) (started, error) {
	id := req.ID
	if id == uuid.Nil {
		id = uuid.New()
	}
	now := e.cfg.Now()
	in := saga.NewInstance(def, id, req.AggregateID, req.IdempotencyKey, data, now)
	in.Secret = saga.NewSecret()
	e.startTrace(&in, req)
	d, err := saga.Decide(def, in, saga.Event{Kind: saga.EventStart, At: now})
	if err != nil {
		return started{}, fmt.Errorf("%w: %v", ErrInvalidInput, err)
	}
	return started{prev: in, d: d}, nil
}

func (e *Engine) startedLog(ctx context.Context, s started) {
	e.cfg.Metrics.observe(s.prev.Type, saga.EventStart, s.prev, s.d)
	e.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "saga started", slog.String("saga_id", s.prev.ID.String()), slog.String("saga_type", s.prev.Type), traceAttr(&s.prev))
}
