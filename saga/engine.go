package saga

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
)

// Engine defaults: NewEngine gives a zero Config field the matching value.
const (
	SchemaDefault        = "sagaflow"
	ReplyTopicDefault    = "saga.replies"
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

// Config configures an Engine. Zero fields take their defaults; nil is a
// Config of zeros.
type Config struct {
	// Schema holds the saga, journal, outbox and inbox tables; default
	// SchemaDefault.
	Schema string
	// ReplyTopic is where participants reply (the commands' reply_to);
	// default ReplyTopicDefault.
	ReplyTopic string
	// TopicPrefix is put before "<participant>.commands"; default none.
	TopicPrefix string
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
	// applied in a caller's transaction (ApplyReply, ApplyReplies and StartTx
	// outside an inbox handler) do not call it: only the caller knows when
	// that commits.
	OnFinished func(id uuid.UUID, state State)
	// Dispatcher, if set, publishes the commands of the engine's own and
	// inbox transactions right after their commit (relay.Relay); the
	// relay publishes them only if it did not, after Dispatcher.Lease.
	// Nil: every command waits for the relay.
	Dispatcher Dispatcher
	// SingleLiveTypes are the saga types that allow at most one live
	// (running, compensating or failed) saga per aggregate id: a start for
	// an aggregate that has one fails with a *LiveSagaError (ErrLiveSaga)
	// naming it, whatever its idempotency key. Such starts take an
	// advisory lock on (type, aggregate) and are not group-committed.
	// Default: none.
	SingleLiveTypes []string
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
}

var topicRE = regexp.MustCompile(`^[a-zA-Z0-9._-]{0,200}$`)

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Schema = cmp.Or(c.Schema, SchemaDefault)
	c.ReplyTopic = cmp.Or(c.ReplyTopic, ReplyTopicDefault)
	c.TimerInterval = cmp.Or(c.TimerInterval, TimerIntervalDefault)
	c.TimerBatch = cmp.Or(c.TimerBatch, TimerBatchDefault)
	c.GaugeInterval = cmp.Or(c.GaugeInterval, GaugeIntervalDefault)
	c.StartBatch = cmp.Or(c.StartBatch, StartBatchDefault)
	c.StartLanes = cmp.Or(c.StartLanes, StartLanesDefault)
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
func (c Config) validate() error {
	switch {
	case c.ReplyTopic != "" && !topicRE.MatchString(c.ReplyTopic):
		return fmt.Errorf("saga engine: Config.ReplyTopic %q is not a valid topic name", c.ReplyTopic)
	case !topicRE.MatchString(c.TopicPrefix):
		return fmt.Errorf("saga engine: Config.TopicPrefix %q has characters a topic name cannot have", c.TopicPrefix)
	case c.Schema != "" && !pgid.ValidIdentifier(c.Schema):
		return fmt.Errorf("saga engine: Config.Schema %q must match %s", c.Schema, pgid.IdentifierPattern)
	case c.TimerInterval < 0:
		return fmt.Errorf("saga engine: Config.TimerInterval is %s, want > 0", c.TimerInterval)
	case c.TimerBatch < 0:
		return fmt.Errorf("saga engine: Config.TimerBatch is %d, want > 0", c.TimerBatch)
	case c.GaugeInterval < 0:
		return fmt.Errorf("saga engine: Config.GaugeInterval is %s, want > 0", c.GaugeInterval)
	case c.StartBatch < 0:
		return fmt.Errorf("saga engine: Config.StartBatch is %d, want > 0", c.StartBatch)
	case c.StartLanes < 0:
		return fmt.Errorf("saga engine: Config.StartLanes is %d, want > 0", c.StartLanes)
	}
	return nil
}

// Engine applies events to sagas through Decide, each in one Postgres
// transaction together with the journal row and the outgoing commands.
type Engine struct {
	pool *pgxpool.Pool
	reg  *Registry
	cfg  Config
	st   *store
	ob   *outbox.Outbox

	starts *startBatcher
	// ignored samples the log lines of ignored events.
	ignored ignoredSampler
	// traceDrops samples the log lines of dropped trace contexts.
	traceDrops dropSampler
}

// NewEngine returns an engine over pool for the definitions in reg.
func NewEngine(pool *pgxpool.Pool, reg *Registry, cfg *Config) (*Engine, error) {
	if pool == nil || reg == nil {
		return nil, errors.New("saga engine: pool and registry are required")
	}
	var c Config
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
	e := &Engine{pool: pool, reg: reg, cfg: c, st: newStore(c.Schema), ob: ob}
	e.starts = &startBatcher{e: e, max: c.StartBatch, lanes: c.StartLanes}
	return e, nil
}

// Outbox is the orchestrator's outbox (for its relay).
func (e *Engine) Outbox() *outbox.Outbox { return e.ob }

// Registry is the engine's definitions.
func (e *Engine) Registry() *Registry { return e.reg }

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

func (e *Engine) prepare(req *StartRequest) (*Def, json.RawMessage, error) {
	e.admitTrace(req)
	if err := startHeadersProblem(req.TraceParent, req.TraceState, message.MaxSendHeadersBytes); err != nil {
		return nil, nil, fmt.Errorf("start saga %q: %w", req.Type, err)
	}
	def, ok := e.reg.Latest(req.Type)
	if !ok {
		return nil, nil, fmt.Errorf("start saga: type %q: %w", req.Type, ErrUnknownType)
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
// Concurrent calls share transactions (see Config.StartBatch): the saga is
// committed when Start returns without error, as with a transaction of its
// own. If ctx ends while the start is already being committed, Start waits
// for that commit and reports it.
func (e *Engine) Start(ctx context.Context, req StartRequest) (Instance, bool, error) {
	def, data, err := e.prepare(&req)
	if err != nil {
		return Instance{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return Instance{}, false, fmt.Errorf("start saga %q: %w", req.Type, err)
	}
	if e.singleLive(req.Type) {
		return e.startSingleLive(ctx, req, def, data)
	}
	return e.starts.do(ctx, &pendingStart{req: req, def: def, data: data, done: make(chan struct{})})
}

// StartTx starts a saga inside the caller's transaction, so a service can
// start it atomically with its own writes.
func (e *Engine) StartTx(ctx context.Context, tx pgx.Tx, req StartRequest) (Instance, bool, error) {
	def, data, err := e.prepare(&req)
	if err != nil {
		return Instance{}, false, err
	}
	return e.startPrepared(ctx, tx, req, def, data, nil)
}

func (e *Engine) startPrepared(ctx context.Context, tx pgx.Tx, req StartRequest, def *Def, data json.RawMessage, pc *postCommit) (Instance, bool, error) {
	s, err := e.startDecision(req, def, data)
	if err != nil {
		return Instance{}, false, err
	}
	if e.singleLive(req.Type) {
		if existing, found, err := e.checkLive(ctx, tx, req); err != nil || found {
			return existing, false, err
		}
	}
	d := s.d
	ok, err := e.st.insert(ctx, tx, &d.Next)
	if err != nil {
		return Instance{}, false, err
	}
	if !ok {
		existing, err := e.st.loadByKey(ctx, tx, req.Type, req.IdempotencyKey)
		return existing, false, err
	}
	if err := e.write(ctx, tx, d, pc); err != nil {
		return Instance{}, false, err
	}
	e.startedLog(ctx, s)
	return d.Next, true, nil
}

// write appends the decision's journal and enqueues its commands.
func (e *Engine) write(ctx context.Context, tx DB, d Decision, pc *postCommit) error {
	return e.writeMany(ctx, tx, []Decision{d}, pc)
}

// writeMany appends the decisions' journals and enqueues their commands,
// one statement each.
func (e *Engine) writeMany(ctx context.Context, tx DB, ds []Decision, pc *postCommit) error {
	b := &pgx.Batch{}
	if err := e.queueWrites(b, ds, pc); err != nil {
		return err
	}
	return sendBatch(ctx, tx, b, "write journal and commands")
}

// sendBatch sends b's statements in one round trip.
func sendBatch(ctx context.Context, tx DB, b *pgx.Batch, what string) error {
	if b.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// queueWrites adds to b the journal rows and the outbox rows of ds.
func (e *Engine) queueWrites(b *pgx.Batch, ds []Decision, pc *postCommit) error {
	var journal []JournalEntry
	var msgs []outbox.Message
	for _, d := range ds {
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
func (e *Engine) apply(ctx context.Context, tx DB, id uuid.UUID, mk func() Event, pc *postCommit) (Instance, Decision, error) {
	for attempt := 0; ; attempt++ {
		in, err := e.st.load(ctx, tx, id)
		if err != nil {
			return Instance{}, Decision{}, err
		}
		def, ok := e.reg.Lookup(in.Type, in.DefVersion)
		if !ok {
			return in, Decision{}, fmt.Errorf("saga %s: type %q version %d: %w", id, in.Type, in.DefVersion, ErrUnknownType)
		}
		ev := mk()
		d, err := Decide(def, in, ev)
		if err != nil {
			return in, Decision{}, err
		}
		if !d.Changed {
			if err := e.writeMany(ctx, tx, []Decision{d}, nil); err != nil {
				return in, d, err
			}
			e.cfg.Metrics.observe(in.Type, ev.Kind, in, d)
			e.logIgnored(ctx, &in, d)
			return in, d, nil
		}
		ok, err = e.st.update(ctx, tx, &d.Next, in.Version)
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
		if err := e.write(ctx, tx, d, pc); err != nil {
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

// ApplyReply applies a participant's reply inside tx (the inbox's
// transaction). A reply for an unknown saga or step returns an error
// wrapping message.ErrInvalid, so the inbox sends it to the dead-letter topic.
func (e *Engine) ApplyReply(ctx context.Context, tx pgx.Tx, r message.Reply) error {
	// One hot path: a reply alone is a batch of one, re-decided on the
	// saga's new version when someone else moved it since it was loaded.
	for attempt := 0; ; attempt++ {
		err := e.ApplyReplies(ctx, tx, []message.Reply{r})
		switch {
		case !errors.Is(err, ErrBatchFallback):
			return err
		case errors.Is(err, ErrNotFound):
			return unknownSaga(&r)
		case errors.Is(err, ErrUnknownStep):
			return fmt.Errorf("%w: %w", ErrStrayReply, err)
		case errors.Is(err, ErrReplySigner):
			if u, ok := err.(interface{ Unwrap() []error }); ok {
				return u.Unwrap()[0] // without the batch fallback
			}
			return err
		case attempt >= maxVersionConflicts:
			return fmt.Errorf("saga %s: gave up after %d version conflicts", r.SagaID, attempt+1)
		}
	}
}

// ErrBatchFallback is wrapped by ApplyReplies when the batch cannot be
// applied as one: a saga was moved by someone else since it was loaded (a
// version conflict), or a reply is for an unknown saga or step. Nothing of
// the batch was written; apply the replies one by one with ApplyReply, which
// reloads and re-decides on a conflict and reports bad replies one by one.
var ErrBatchFallback = errors.New("apply the replies one by one")

// unknownSaga is the error of a reply for a saga that does not exist: a
// stray reply (it answers nothing this orchestrator sent).
func unknownSaga(r *message.Reply) error {
	return fmt.Errorf("%w: reply %s: unknown saga %s", ErrStrayReply, r.MessageID, r.SagaID)
}

// ApplyReplies applies a batch of replies inside tx with a constant number
// of statements: one load of every saga concerned, Decide per reply in
// order (replies to the same saga see each other's effect), one conditional
// update of every changed saga (each on its loaded version), one journal
// insert and one outbox insert. On an error wrapping ErrBatchFallback,
// nothing was written (tx is as before); any other error means tx must be
// rolled back.
func (e *Engine) ApplyReplies(ctx context.Context, tx pgx.Tx, rs []message.Reply) error {
	return e.ApplyRepliesPreloaded(ctx, tx, rs, nil)
}

// ApplyRepliesPreloaded is ApplyReplies taking the sagas pre loaded, in
// the same transaction, before the replies were decoded (QueueLoad); the
// sagas pre did not load are loaded here. A nil pre loads them all.
func (e *Engine) ApplyRepliesPreloaded(ctx context.Context, tx pgx.Tx, rs []message.Reply, pre *Preloaded) error {
	return e.applyReplies(ctx, tx, rs, pre, nil)
}

// ApplyReplyBatch is ApplyRepliesPreloaded leaving out, each alone, the
// replies that cannot be applied by their content: a stray reply (for an
// unknown saga or step, or answering nothing the saga sent: errors
// wrapping ErrStrayReply) or one Decide refuses as invalid (wrapping
// message.ErrInvalid). refused[k] is rs[k]'s error, nil when it was
// applied (or journaled as ignored); the rest of the batch is applied as
// one, so one stray reply does not send its batch down the one-by-one
// path. The error is as ApplyRepliesPreloaded's: on one wrapping
// ErrBatchFallback (a version conflict) nothing was written.
func (e *Engine) ApplyReplyBatch(ctx context.Context, tx pgx.Tx, rs []message.Reply, pre *Preloaded) (refused []error, err error) {
	refused = make([]error, len(rs))
	return refused, e.applyReplies(ctx, tx, rs, pre, refused)
}

// applyReplies applies rs; with refused non-nil (len(rs)), a reply that is
// invalid by its content is left out and its error put there instead of
// ending the batch.
func (e *Engine) applyReplies(ctx context.Context, tx pgx.Tx, rs []message.Reply, pre *Preloaded, refused []error) error {
	if len(rs) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, 0, len(rs))
	seen := make(map[uuid.UUID]bool, len(rs))
	for i := range rs {
		if !seen[rs[i].SagaID] {
			seen[rs[i].SagaID] = true
			ids = append(ids, rs[i].SagaID)
		}
	}
	loaded, err := pre.take(ctx, e.st, tx, ids)
	if err != nil {
		return err
	}
	type change struct {
		prev    Instance // as loaded
		changed bool
	}
	cur := make(map[uuid.UUID]*change, len(loaded))
	next := make(map[uuid.UUID]Instance, len(loaded))
	var decided []Decision
	obs := make([]observed, 0, len(rs))
	for i := range rs {
		r := &rs[i]
		in, ok := next[r.SagaID]
		if !ok {
			if in, ok = loaded[r.SagaID]; !ok {
				if refused != nil {
					refused[i] = unknownSaga(r)
					continue
				}
				return fmt.Errorf("reply %s: saga %s: %w: %w", r.MessageID, r.SagaID, ErrNotFound, ErrBatchFallback)
			}
			cur[r.SagaID] = &change{prev: in}
		}
		def, ok := e.reg.Lookup(in.Type, in.DefVersion)
		if !ok {
			return fmt.Errorf("saga %s: type %q version %d: %w", r.SagaID, in.Type, in.DefVersion, ErrUnknownType)
		}
		if err := e.checkSigner(def, r); err != nil {
			if refused != nil {
				refused[i] = err
				continue
			}
			return fmt.Errorf("%w: %w", err, ErrBatchFallback)
		}
		d, err := Decide(def, in, Event{Kind: EventReply, At: e.cfg.Now(), Reply: r})
		if refused != nil && err != nil && (errors.Is(err, ErrUnknownStep) || errors.Is(err, message.ErrInvalid)) {
			if errors.Is(err, ErrUnknownStep) {
				err = fmt.Errorf("%w: %w", ErrStrayReply, err)
			}
			refused[i] = err
			continue
		}
		if errors.Is(err, ErrUnknownStep) {
			return fmt.Errorf("%w: %w", err, ErrBatchFallback)
		}
		if err != nil {
			return err
		}
		decided = append(decided, d)
		obs = append(obs, observed{in: in, d: d})
		if !d.Changed {
			next[r.SagaID] = in
			continue
		}
		next[r.SagaID] = d.Next
		cur[r.SagaID].changed = true
	}
	var upd []*Instance
	var prev []int64
	for _, id := range ids {
		c := cur[id]
		if c == nil || !c.changed {
			continue
		}
		n := next[id]
		upd = append(upd, &n)
		prev = append(prev, c.prev.Version)
	}
	pc := e.inboxPost(ctx)
	if pc != nil && canDefer(ctx) {
		return e.deferWrites(ctx, upd, prev, decided, pc, func() { e.observeReplies(ctx, obs) })
	}
	// One round trip: a savepoint, the version-checked update of every
	// changed saga, the journal and the commands. On a version conflict the
	// savepoint undoes all of it.
	b := &pgx.Batch{}
	done := make(map[uuid.UUID]bool, len(upd))
	if len(upd) > 0 {
		queuePlanSettings(b, len(upd))
		b.Queue("SAVEPOINT " + applySavepoint)
		if err := e.st.queueUpdateMany(b, upd, prev, done); err != nil {
			return err
		}
	}
	if err := e.queueWrites(b, decided, pc); err != nil {
		return err
	}
	if err := sendBatch(ctx, tx, b, fmt.Sprintf("apply %d replies", len(rs))); err != nil {
		return err
	}
	if len(done) != len(upd) {
		if e.cfg.Metrics != nil {
			e.cfg.Metrics.conflicts.Add(float64(len(upd) - len(done)))
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+applySavepoint); err != nil {
			return fmt.Errorf("apply %d replies: roll back after a version conflict: %w", len(rs), err)
		}
		return fmt.Errorf("apply %d replies: %d of %d sagas moved since loaded: %w", len(rs), len(upd)-len(done), len(upd), ErrBatchFallback)
	}
	e.observeReplies(ctx, obs)
	e.afterInbox(ctx, pc)
	return nil
}

// Operate applies an operator action in its own transaction. A refused
// action returns a *RefusedError and writes nothing.
func (e *Engine) Operate(ctx context.Context, id uuid.UUID, op Operator) (Instance, error) {
	var out Instance
	var pc *postCommit
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		pc = &postCommit{}
		in, _, err := e.apply(ctx, tx, id, func() Event {
			return Event{Kind: EventOperator, At: e.cfg.Now(), Operator: &op}
		}, pc)
		out = in
		return err
	})
	if err == nil {
		e.flush(pc)
		e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "operator action", slog.String("saga_id", id.String()),
			slog.String("action", string(op.Action)), slog.String("actor", op.Actor), slog.String("reason", op.Reason), traceAttr(&out))
	}
	return out, err
}
