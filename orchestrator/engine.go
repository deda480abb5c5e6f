package orchestrator

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagaflow/sagaflow/internal/outboxdb"
	"github.com/sagaflow/sagaflow/internal/pgid"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/outbox"
	"github.com/sagaflow/sagaflow/saga"
)

// Engine defaults: NewEngine gives a zero EngineConfig field the matching value.
const (
	SchemaDefault        = "sagaflow"
	ReplyTopicDefault    = message.ReplyTopicDefault
	CommandSuffix        = message.CommandSuffix
	TimerIntervalDefault = 100 * time.Millisecond
	TimerBatchDefault    = 200
	GaugeIntervalDefault = 5 * time.Second
	maxVersionConflicts  = 20
)

// applySavepoint undoes ApplyReplies' writes after a version conflict.
const applySavepoint = "sagaflow_apply_replies"

// ErrInvalidInput is wrapped by errors about a bad start request.
var ErrInvalidInput = errors.New("invalid input")

// EngineConfig configures an Engine. Zero fields take their defaults; nil is a
// EngineConfig of zeros.
type EngineConfig struct {
	// Schema holds the saga, journal, outbox and inbox tables; default
	// SchemaDefault.
	Schema string
	// ReplyTopic is where participants reply (the commands' reply_to);
	// default ReplyTopicDefault.
	ReplyTopic string
	// TopicPrefix is put before "<participant>.commands"; default none.
	TopicPrefix string
	// OutcomeTopic receives a record for every end of a saga (completed,
	// compensated, failed) and every flag, written through the outbox in
	// the transaction of the transition (keyed by the aggregate id; body
	// message.SagaOutcome); default OutcomeTopicDefault.
	OutcomeTopic string
	// TimerInterval is how often due timers are looked for; default
	// TimerIntervalDefault.
	TimerInterval time.Duration
	// TimerBatch is how many due sagas one timer transaction handles;
	// default TimerBatchDefault.
	TimerBatch int
	// GaugeInterval is how often the in-flight gauge is refreshed; default
	// GaugeIntervalDefault.
	GaugeInterval time.Duration
	// Logger receives the engine's logs; nil discards them.
	Logger *slog.Logger
	// Metrics receives the engine's metrics; nil: none.
	Metrics *Metrics
	// Tracer makes the engine's spans (saga start, step send); nil: no
	// spans, and a saga keeps the trace context it was started with.
	Tracer trace.Tracer
	// Now is the clock; default time.Now.
	Now func() time.Time
	// OnFinished, if set, is called for each saga a committed transition
	// brought to a terminal state (completed, compensated, failed; again for
	// a failed saga an operator resolves), after the commit: in-process
	// waiters (a synchronous caller, a benchmark's completion tracker) learn
	// of the end at once instead of polling. It must not block. Transitions
	// applied in a caller's transaction (ApplyReply, ApplyReplies, StartTx)
	// do not call it: only the caller knows when that commits.
	OnFinished func(id uuid.UUID, state saga.State)
	// Dispatcher, if set, publishes the commands of the engine's own and
	// the reply consumer's transactions right after their commit
	// (relay.Relay); the relay publishes them only if it did not,
	// after Dispatcher.Lease. Nil: every command waits for the relay.
	Dispatcher Dispatcher
	// SingleLiveTypes are the saga types that allow at most one live
	// (running, compensating or failed) saga per aggregate id: a start for
	// an aggregate that has one fails with a *LiveSagaError (ErrLiveSaga)
	// naming it, whatever its idempotency key. Such starts take an
	// advisory lock on (type, aggregate) and are not group-committed.
	// Default: none.
	SingleLiveTypes []string
	// FourEyes names, per saga type, the operator actions that need a
	// second person (Request, DecideProposal); default: none.
	FourEyes FourEyes
	// ProposalTTL is how long a four-eyes proposal waits for its second
	// person; default ProposalTTLDefault.
	ProposalTTL time.Duration
	// SLO is each saga type's consistency window: finished sagas are
	// counted against it (sagaflow_sagas_slo_total) and open ones past it
	// (sagaflow_saga_slo_breaches); default: none.
	SLO SLO
	// Signing signs the engine's commands and checks who signed the
	// replies (see Signing); zero: off.
	Signing Signing
	// Advanced holds the engine's tuning knobs (start group commit); their
	// defaults suit most deployments. Its fields are promoted.
	Advanced
}

// Advanced are the engine's tuning knobs. Zero fields take their defaults.
type Advanced struct {
	// StartBatch is the most concurrent Start calls committed in one
	// transaction (group commit; default StartBatchDefault); 1 gives every
	// Start its own transaction. StartLanes is how many such transactions
	// run at once (default StartLanesDefault).
	StartBatch, StartLanes int
	// StatsExactLimit is how many sagas Stats counts one by one in each
	// of its counts (in flight, finished within the window, open past a
	// consistency window) before it gives an estimate and says so; default
	// StatsExactLimitDefault. A count reads one index entry a saga.
	StatsExactLimit int
	// SagaCache is how many sagas in flight the engine keeps as it last
	// wrote them, so that a reply batch whose sagas are all kept is
	// applied in one round trip to Postgres (the version check of its
	// update guards the guess); default SagaCacheDefault, negative: none.
	SagaCache int
}

// StatsExactLimitDefault is the default Advanced.StatsExactLimit.
const StatsExactLimitDefault = 10000

var topicRE = regexp.MustCompile(`^[a-zA-Z0-9._-]{0,200}$`)

// WithDefaults returns c with its zero fields set to their defaults.
func (c EngineConfig) WithDefaults() EngineConfig {
	c.Schema = cmp.Or(c.Schema, SchemaDefault)
	c.ReplyTopic = cmp.Or(c.ReplyTopic, ReplyTopicDefault)
	c.OutcomeTopic = cmp.Or(c.OutcomeTopic, OutcomeTopicDefault)
	c.TimerInterval = cmp.Or(c.TimerInterval, TimerIntervalDefault)
	c.TimerBatch = cmp.Or(c.TimerBatch, TimerBatchDefault)
	c.GaugeInterval = cmp.Or(c.GaugeInterval, GaugeIntervalDefault)
	c.StartBatch = cmp.Or(c.StartBatch, StartBatchDefault)
	c.StartLanes = cmp.Or(c.StartLanes, StartLanesDefault)
	c.StatsExactLimit = cmp.Or(c.StatsExactLimit, StatsExactLimitDefault)
	c.SagaCache = cmp.Or(c.SagaCache, SagaCacheDefault)
	c.ProposalTTL = cmp.Or(c.ProposalTTL, ProposalTTLDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// validate checks c as given (zero fields stand for their defaults); the
// error names the field.
func (c EngineConfig) validate() error {
	switch {
	case c.ReplyTopic != "" && !topicRE.MatchString(c.ReplyTopic):
		return fmt.Errorf("saga engine: EngineConfig.ReplyTopic %q is not a valid topic name", c.ReplyTopic)
	case c.OutcomeTopic != "" && !topicRE.MatchString(c.OutcomeTopic):
		return fmt.Errorf("saga engine: EngineConfig.OutcomeTopic %q is not a valid topic name", c.OutcomeTopic)
	case !topicRE.MatchString(c.TopicPrefix):
		return fmt.Errorf("saga engine: EngineConfig.TopicPrefix %q has characters a topic name cannot have", c.TopicPrefix)
	case c.Schema != "" && !pgid.ValidIdentifier(c.Schema):
		return fmt.Errorf("saga engine: EngineConfig.Schema %q must match %s", c.Schema, pgid.IdentifierPattern)
	case c.TimerInterval < 0:
		return fmt.Errorf("saga engine: EngineConfig.TimerInterval is %s, want > 0", c.TimerInterval)
	case c.TimerBatch < 0:
		return fmt.Errorf("saga engine: EngineConfig.TimerBatch is %d, want > 0", c.TimerBatch)
	case c.GaugeInterval < 0:
		return fmt.Errorf("saga engine: EngineConfig.GaugeInterval is %s, want > 0", c.GaugeInterval)
	case c.StartBatch < 0:
		return fmt.Errorf("saga engine: EngineConfig.StartBatch is %d, want > 0", c.StartBatch)
	case c.StartLanes < 0:
		return fmt.Errorf("saga engine: EngineConfig.StartLanes is %d, want > 0", c.StartLanes)
	case c.StatsExactLimit < 0:
		return fmt.Errorf("saga engine: EngineConfig.StatsExactLimit is %d, want > 0", c.StatsExactLimit)
	case c.ProposalTTL < 0:
		return fmt.Errorf("saga engine: EngineConfig.ProposalTTL is %s, want > 0", c.ProposalTTL)
	}
	if err := c.FourEyes.Validate(); err != nil {
		return fmt.Errorf("saga engine: EngineConfig.FourEyes: %w", err)
	}
	if err := c.SLO.Validate(); err != nil {
		return fmt.Errorf("saga engine: EngineConfig.SLO: %w", err)
	}
	return nil
}

// Engine applies events to sagas through Decide, each in one Postgres
// transaction together with the journal row and the outgoing commands.
type Engine struct {
	pool *pgxpool.Pool
	reg  *saga.Registry
	cfg  EngineConfig
	st   *store
	ob   *outbox.Outbox

	starts *startBatcher
	// ignored samples the log lines of ignored events.
	ignored ignoredSampler
	// traceDrops samples the log lines of dropped trace contexts.
	traceDrops dropSampler
	// inFlight is the last full count of the sagas in flight (InFlight);
	// recount lets one stats read at a time make a new one.
	inFlight atomic.Pointer[inFlightCount]
	recount  sync.Mutex
	// cache keeps the sagas this engine wrote last (sagacache.go).
	cache *sagaCache
}

// ShareSagaCache makes e keep the sagas it writes where other keeps
// them (Advanced.SagaCache), and read them there: for an engine of the same
// schema in the same process, such as the HTTP API's beside the service's,
// so that the replies to the sagas it starts are applied without a load.
// Call it before e is used. Engines of different schemas keep their own.
func (e *Engine) ShareSagaCache(other *Engine) {
	if other != nil && other != e && other.cfg.Schema == e.cfg.Schema {
		e.cache = other.cache
	}
}

// NewEngine returns an engine over pool for the definitions in reg.
func NewEngine(pool *pgxpool.Pool, reg *saga.Registry, cfg *EngineConfig) (*Engine, error) {
	if pool == nil || reg == nil {
		return nil, errors.New("saga engine: pool and registry are required")
	}
	var c EngineConfig
	if cfg != nil {
		c = *cfg
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	c = c.WithDefaults()
	if err := checkSingleLive(reg, c.SingleLiveTypes); err != nil {
		return nil, err
	}
	ob, err := outbox.New(c.Schema)
	if err != nil {
		return nil, fmt.Errorf("saga engine: %w", err)
	}
	e := &Engine{pool: pool, reg: reg, cfg: c, st: newStore(c.Schema), ob: ob, cache: newSagaCache(c.SagaCache)}
	c.Metrics.watchSLO(c.SLO)
	e.starts = &startBatcher{e: e, max: c.StartBatch, lanes: c.StartLanes}
	return e, nil
}

// Outbox is the orchestrator's outbox (for its relay).
func (e *Engine) Outbox() *outbox.Outbox { return e.ob }

// Registry is the engine's definitions.
func (e *Engine) Registry() *saga.Registry { return e.reg }

// CommandTopic is the topic of participant's commands.
func (e *Engine) CommandTopic(participant string) string {
	return message.CommandTopic(e.cfg.TopicPrefix, participant)
}

// ReplyTopic is the topic replies are expected on.
func (e *Engine) ReplyTopic() string { return e.cfg.ReplyTopic }

// StartRequest asks for a new saga.
type StartRequest struct {
	Type string
	// IdempotencyKey: a second start with the same type and key returns
	// the first saga instead of creating another.
	IdempotencyKey string
	AggregateID    string
	// Data is the saga's initial data: a JSON object, or any value that
	// encodes to one.
	Data any
	// ID optionally fixes the saga id (default: a new random UUID).
	ID uuid.UUID
	// TraceParent and TraceState are the caller's W3C trace context
	// (optional): what message.CheckTraceContext refuses is dropped (counted
	// in sagaflow_trace_context_dropped_total, logged) and the start goes on
	// without it; see Instance.TraceParent.
	TraceParent, TraceState string
}

// MaxKeyLength bounds idempotency keys and aggregate ids (the aggregate id
// is the Kafka record key of every command).
const MaxKeyLength = 200

// InputError names the field of a start request that was wrong. It wraps
// ErrInvalidInput.
type InputError struct {
	Field   string
	Problem string
}

func (e *InputError) Error() string {
	return fmt.Sprintf("%v: %s %s", ErrInvalidInput, e.Field, e.Problem)
}
func (e *InputError) Unwrap() error { return ErrInvalidInput }

func checkKey(field, v string) error {
	switch {
	case v == "":
		return &InputError{Field: field, Problem: "is required"}
	case len(v) > MaxKeyLength:
		return &InputError{Field: field, Problem: fmt.Sprintf("is longer than %d bytes", MaxKeyLength)}
	case !utf8.ValidString(v) || strings.ContainsRune(v, 0):
		return &InputError{Field: field, Problem: "must be valid UTF-8 text without NUL characters"}
	}
	return nil
}

// cleanData checks that raw is a JSON object that Postgres can store as
// jsonb (no NUL characters in strings or keys) and re-encodes it, which
// also replaces unpaired surrogate escapes that jsonb refuses. Numbers keep
// their exact text.
func cleanData(raw []byte) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, &InputError{Field: "data", Problem: "is not valid JSON: " + err.Error()}
	}
	if dec.More() {
		return nil, &InputError{Field: "data", Problem: "has text after the JSON object"}
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, &InputError{Field: "data", Problem: "must be a JSON object"}
	}
	var walk func(any) bool
	walk = func(x any) bool {
		switch t := x.(type) {
		case string:
			return !strings.ContainsRune(t, 0)
		case map[string]any:
			for k, e := range t {
				if strings.ContainsRune(k, 0) || !walk(e) {
					return false
				}
			}
		case []any:
			for _, e := range t {
				if !walk(e) {
					return false
				}
			}
		}
		return true
	}
	if !walk(v) {
		return nil, &InputError{Field: "data", Problem: "contains a NUL character (\\u0000), which cannot be stored"}
	}
	return json.Marshal(v)
}

func (e *Engine) prepare(req *StartRequest) (*saga.Def, json.RawMessage, error) {
	e.admitTrace(req)
	if err := startHeadersProblem(req.TraceParent, req.TraceState, message.MaxSendHeadersBytes); err != nil {
		return nil, nil, fmt.Errorf("start saga %q: %w", req.Type, err)
	}
	def, ok := e.reg.Latest(req.Type)
	if !ok {
		return nil, nil, fmt.Errorf("start saga: type %q: %w", req.Type, saga.ErrUnknownType)
	}
	if err := checkKey("idempotency_key", req.IdempotencyKey); err != nil {
		return nil, nil, fmt.Errorf("start saga %q: %w", req.Type, err)
	}
	if err := checkKey("aggregate_id", req.AggregateID); err != nil {
		return nil, nil, fmt.Errorf("start saga %q: %w", req.Type, err)
	}
	var raw []byte
	switch d := req.Data.(type) {
	case json.RawMessage:
		raw = d
	case []byte:
		raw = d
	default:
		b, err := json.Marshal(d)
		if err != nil {
			return nil, nil, fmt.Errorf("start saga %q: %w", req.Type, &InputError{Field: "data", Problem: err.Error()})
		}
		raw = b
	}
	data, err := cleanData(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("start saga %q: %w", req.Type, err)
	}
	return def, data, nil
}

// Start starts a saga and commits it. created is false when a saga with the
// same type and idempotency key already existed (it is returned).
// Concurrent calls share transactions (see EngineConfig.StartBatch): the saga is
// committed when Start returns without error, as with a transaction of its
// own. If ctx ends while the start is already being committed, Start waits
// for that commit and reports it.
func (e *Engine) Start(ctx context.Context, req StartRequest) (saga.Instance, bool, error) {
	def, data, err := e.prepare(&req)
	if err != nil {
		return saga.Instance{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return saga.Instance{}, false, fmt.Errorf("start saga %q: %w", req.Type, err)
	}
	p := &pendingStart{req: req, def: def, data: data, done: make(chan struct{})}
	if e.singleLive(req.Type) {
		// Never group-committed with others: its lock would serialize the
		// batch.
		e.startAlone(ctx, p)
		return p.in, p.created, p.err
	}
	return e.starts.do(ctx, p)
}

// StartTx starts a saga inside the caller's transaction, so a service can
// start it atomically with its own writes: a batch of one start, through
// the path of Start's group-committed batches.
func (e *Engine) StartTx(ctx context.Context, tx pgx.Tx, req StartRequest) (saga.Instance, bool, error) {
	def, data, err := e.prepare(&req)
	if err != nil {
		return saga.Instance{}, false, err
	}
	p := &pendingStart{req: req, def: def, data: data}
	err = e.startOne(ctx, tx, p, nil)
	return p.in, p.created, err
}

// writeMany appends the decisions' journals and enqueues their commands,
// one statement each.
func (e *Engine) writeMany(ctx context.Context, tx querier, ds []saga.Decision, pc *postCommit) error {
	b := &pgx.Batch{}
	if err := e.queueWrites(b, ds, pc); err != nil {
		return err
	}
	return sendBatch(ctx, tx, b, "write journal and commands")
}

// sendBatch sends b's statements in one round trip.
func sendBatch(ctx context.Context, tx querier, b *pgx.Batch, what string) error {
	if b.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// queueWrites adds to b the journal rows and the outbox rows of ds: their
// commands, and the outcome record of each that ended or flagged its saga.
func (e *Engine) queueWrites(b *pgx.Batch, ds []saga.Decision, pc *postCommit) error {
	var journal []saga.JournalEntry
	var msgs []outbox.Message
	for i := range ds {
		d := &ds[i]
		journal = append(journal, d.Journal...)
		for _, o := range d.Send {
			c := o.Command
			c.ReplyTo = e.cfg.ReplyTopic
			b, err := message.EncodeCommand(c)
			if err != nil {
				return err
			}
			m := outbox.Message{
				Topic: e.CommandTopic(o.Participant), Key: c.AggregateID, Value: b,
				Headers: e.commandHeaders(&d.Next, c, o.Participant),
			}
			if s := e.cfg.Signing.Commands; s != nil {
				s.SignString(m.Topic, m.Key, m.Value, m.Headers)
			}
			msgs = append(msgs, m)
		}
		if m, ok, err := e.outcomeMessage(d); err != nil {
			return err
		} else if ok {
			msgs = append(msgs, m)
		}
	}
	e.st.queueJournal(b, journal)
	if pc != nil {
		pc.ds = append(pc.ds, ds...)
		if e.cfg.Dispatcher != nil && len(msgs) > 0 && e.cfg.Dispatcher.Active() {
			p, err := outboxdb.For(e.ob.Schema()).QueueEnqueueDirect(b, e.cfg.Dispatcher.Lease(), msgs...)
			pc.pend = append(pc.pend, p)
			return err
		}
	}
	return outboxdb.For(e.ob.Schema()).QueueEnqueue(b, msgs...)
}

// apply runs ev through the door for saga id inside tx: load, decide,
// conditional update (reload and re-decide on a version conflict), journal,
// outbox.
func (e *Engine) apply(ctx context.Context, tx querier, id uuid.UUID, mk func() saga.Event, pc *postCommit) (saga.Instance, saga.Decision, error) {
	for attempt := 0; ; attempt++ {
		in, err := e.st.load(ctx, tx, id)
		if err != nil {
			return saga.Instance{}, saga.Decision{}, err
		}
		def, ok := e.reg.Lookup(in.Type, in.DefVersion)
		if !ok {
			return in, saga.Decision{}, fmt.Errorf("saga %s: type %q version %d: %w", id, in.Type, in.DefVersion, saga.ErrUnknownType)
		}
		ev := mk()
		d, err := saga.Decide(def, in, ev)
		if err != nil {
			return in, saga.Decision{}, err
		}
		if !d.Changed {
			if err := e.writeMany(ctx, tx, []saga.Decision{d}, nil); err != nil {
				return in, d, err
			}
			e.cfg.Metrics.observe(in.Type, ev.Kind, in, d)
			e.logIgnored(ctx, &in, d)
			return in, d, nil
		}
		ok, err = e.st.update(ctx, tx, &d.Next, priorOf(&in))
		if err != nil {
			return in, d, err
		}
		if !ok {
			if e.cfg.Metrics != nil {
				e.cfg.Metrics.conflicts.Inc()
			}
			if attempt >= maxVersionConflicts {
				return in, d, fmt.Errorf("saga %s: gave up after %d version conflicts", id, attempt+1)
			}
			continue
		}
		if err := e.writeMany(ctx, tx, []saga.Decision{d}, pc); err != nil {
			return in, d, err
		}
		e.cfg.Metrics.observe(in.Type, ev.Kind, in, d)
		if d.Next.State != in.State {
			e.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "saga moved", slog.String("saga_id", id.String()),
				slog.String("from", string(in.State)), slog.String("to", string(d.Next.State)), slog.String("step", d.Next.CurrentStep()), traceAttr(&d.Next))
		}
		return d.Next, d, nil
	}
}

// Operate applies an operator action in its own transaction. A refused
// action returns a *RefusedError and writes nothing. Operate is the
// engine's door and does not ask for four eyes (the reconciler's repairs
// go through it); Request does.
func (e *Engine) Operate(ctx context.Context, id uuid.UUID, op saga.Operator) (saga.Instance, error) {
	var out saga.Instance
	var pc *postCommit
	var err error
	for try := 0; ; try++ {
		err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			pc = &postCommit{}
			var err error
			out, err = e.operateIn(ctx, tx, id, op, nil, pc)
			return err
		})
		if !errors.Is(err, errAuditMoved) || try >= maxVersionConflicts {
			break
		}
	}
	if err == nil {
		e.afterOperate(ctx, id, op, out, pc)
	}
	return out, err
}

// operateIn applies op to saga id in tx and writes its audit row (with the
// approved proposal, if any); errAuditMoved when the saga moved between
// the audit's read and the action.
func (e *Engine) operateIn(ctx context.Context, tx pgx.Tx, id uuid.UUID, op saga.Operator, approved *Proposal, pc *postCommit) (saga.Instance, error) {
	var before saga.Instance
	audited := op.Action != saga.ActionCheck
	if audited {
		b, err := e.st.load(ctx, tx, id)
		if err != nil {
			return b, err
		}
		before = b
	}
	var at time.Time
	in, d, err := e.apply(ctx, tx, id, func() saga.Event {
		at = e.cfg.Now()
		return saga.Event{Kind: saga.EventOperator, At: at, Operator: &op}
	}, pc)
	if err != nil || !audited || !d.Changed {
		return in, err
	}
	if in.Version != before.Version+1 {
		return in, errAuditMoved
	}
	step := ""
	if len(d.Journal) > 0 {
		step = d.Journal[0].Step
	}
	return in, e.auditOperator(ctx, tx, op, at, &before, &in, step, approved)
}

// afterOperate publishes what a committed operator action sent and logs it.
func (e *Engine) afterOperate(ctx context.Context, id uuid.UUID, op saga.Operator, out saga.Instance, pc *postCommit) {
	e.flush(pc)
	e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "operator action", slog.String("saga_id", id.String()),
		slog.String("action", string(op.Action)), slog.String("actor", op.Actor), slog.String("reason", op.Reason), slog.String("ticket", op.Ticket), traceAttr(&out))
}
