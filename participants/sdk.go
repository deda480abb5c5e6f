package participants

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/outbox"
	"github.com/sagaflow/sagaflow/relay"
)

// Config configures one participant service. Zero fields take their
// defaults (most derive from Name); nil is a Config of zeros (refused:
// Name is required).
type Config struct {
	// Name is the participant's stable external name; required. Commands
	// arrive on "<Name>.commands" unless CommandTopic says otherwise.
	Name string
	// Schema is the Postgres schema of the SDK tables (outbox, inbox,
	// barrier); default Name.
	Schema string
	// Brokers are the Kafka bootstrap brokers (Run needs them).
	Brokers []string
	// Dialer, if set, makes every Kafka connection (TLS, SASL: see
	// kafkaclient.Security); nil dials plain TCP.
	Dialer *kafka.Dialer
	// CommandTopic is the topic the commands arrive on; default
	// "<Name>.commands".
	CommandTopic string
	// ReplyTopics are the topics a command's reply_to may name (the
	// orchestrators' reply topics); a command naming any other is
	// dead-lettered unexecuted, so nobody who can write a command makes
	// the participant write to a topic of their choosing. Default
	// message.ReplyTopicDefault.
	ReplyTopics []string
	// GroupID is the consumer group of the command consumer; default Name.
	GroupID string
	// InboxBatchSize is the number of commands handled per transaction
	// (inbox.Config.BatchSize; default inbox.BatchSizeDefault).
	InboxBatchSize int
	// InboxLanes is the number of command batches handled concurrently
	// (inbox.Config.Lanes; default inbox.LanesDefault, 1). Raise it only if
	// the step handlers do not update shared rows, or concurrent batches
	// deadlock and retry.
	InboxLanes int
	// KeepSent keeps published replies in the outbox as sent history
	// (relay.Config.KeepSent); default false: they are deleted.
	KeepSent bool
	// Logger receives the participant's logs; nil discards them.
	Logger *slog.Logger
	// InboxMetrics and RelayMetrics receive the consumer's and the relay's
	// metrics; nil: see inbox.Config.Metrics and relay.Config.Metrics.
	InboxMetrics *inbox.Metrics
	RelayMetrics *relay.Metrics
	// NoDispatch leaves every reply to the relay's sweep (woken by NOTIFY)
	// instead of publishing it right after the inbox transaction commits
	// (relay.Config.NoDispatch); default false: dispatch.
	NoDispatch bool
	// CommandKeys are the orchestrator's keys (message.Key: id and
	// secret) the participant verifies each command's signature with:
	// several during a rotation, the orchestrator signing with one of
	// them. A command signed otherwise, or unsigned, is dead-lettered with
	// the reason, unexecuted. Empty: commands are not verified.
	CommandKeys []message.Key
	// AllowUnsignedCommands takes unsigned commands even with CommandKeys
	// set, for a migration window while the orchestrator is given its
	// key; a signed command is verified all the same. Default false.
	AllowUnsignedCommands bool
	// ReplyKey is the participant's own key: every reply is signed with
	// it. The orchestrator must know it as this participant's
	// (security.participant_keys). Zero: replies are unsigned.
	ReplyKey message.Key
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Schema = cmp.Or(c.Schema, c.Name)
	c.CommandTopic = cmp.Or(c.CommandTopic, message.CommandTopic("", c.Name))
	c.GroupID = cmp.Or(c.GroupID, c.Name)
	if len(c.ReplyTopics) == 0 {
		c.ReplyTopics = []string{message.ReplyTopicDefault}
	}
	c.ReplyTopics = append([]string(nil), c.ReplyTopics...)
	c.Brokers = append([]string(nil), c.Brokers...)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks c as given (zero fields stand for their defaults); the
// error names the field.
func (c *Config) validate() error {
	switch {
	case c.Name == "":
		return errors.New("Config.Name is required")
	case c.InboxBatchSize < 0:
		return fmt.Errorf("Config.InboxBatchSize is %d, want > 0", c.InboxBatchSize)
	case c.InboxLanes < 0:
		return fmt.Errorf("Config.InboxLanes is %d, want > 0", c.InboxLanes)
	}
	if c.CommandTopic != "" {
		if err := message.CheckTopicName(c.CommandTopic); err != nil {
			return fmt.Errorf("Config.CommandTopic: %w", err)
		}
	}
	for i, t := range c.ReplyTopics {
		if err := message.CheckTopicName(t); err != nil {
			return fmt.Errorf("Config.ReplyTopics[%d]: %w", i, err)
		}
	}
	return nil
}

// Participant runs the forward and compensate handlers of its steps behind
// the barrier, and sends replies through its own outbox and relay.
type Participant struct {
	pool *pgxpool.Pool
	cfg  Config

	barrier barrier
	outbox  *outbox.Outbox
	signing signing
	// dispatch publishes replies right after their inbox transaction
	// commits, while Run runs (nil otherwise, or with Config.NoDispatch).
	dispatch atomic.Pointer[relay.Relay]

	mu       sync.RWMutex
	handlers map[string]stepHandlers
}

type stepHandlers struct {
	forward, compensate Handler
	// acceptedQuery, if set, is told of a query of the step's forward
	// while it is accepted (OnAcceptedQuery).
	acceptedQuery func(ctx context.Context, tx pgx.Tx, ref Ref) error
}

// replyTopicAllowed checks a command's reply_to against Config.ReplyTopics.
func (p *Participant) replyTopicAllowed(cmd message.Command) error {
	if slices.Contains(p.cfg.ReplyTopics, cmd.ReplyTo) {
		return nil
	}
	return &message.FieldError{Field: "reply_to", Reason: fmt.Sprintf("is %s, not one of the reply topics participant %q answers on (participants.Config.ReplyTopics %v)",
		message.Truncate(fmt.Sprintf("%q", cmd.ReplyTo), 120), p.cfg.Name, p.cfg.ReplyTopics)}
}

// New validates cfg and returns a participant with no steps yet.
func New(pool *pgxpool.Pool, cfg *Config) (*Participant, error) {
	if pool == nil {
		return nil, errors.New("participants: New: pool is nil")
	}
	if cfg == nil {
		cfg = &Config{} // validate names what is missing
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("participants: New: %w", err)
	}
	c := cfg.WithDefaults()
	ob, err := outbox.New(c.Schema)
	if err != nil {
		return nil, fmt.Errorf("participants: New: Config.Schema: %w", err)
	}
	sg, err := newSigning(&c)
	if err != nil {
		return nil, fmt.Errorf("participants: New: %w", err)
	}
	return &Participant{pool: pool, cfg: c, barrier: newBarrier(c.Schema), outbox: ob, signing: sg, handlers: map[string]stepHandlers{}}, nil
}

// Handle registers the handlers of step (wrap a function of one command
// with [One]). compensate may be nil for a step that is never compensated
// (the pivot, or a retryable step after it).
func (p *Participant) Handle(step string, forward, compensate Handler) error {
	if step == "" {
		return fmt.Errorf("participant %q: Handle: empty step name", p.cfg.Name)
	}
	if forward == nil {
		return fmt.Errorf("participant %q: Handle step %q: forward handler is nil", p.cfg.Name, step)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, dup := p.handlers[step]; dup {
		return fmt.Errorf("participant %q: Handle step %q: already registered", p.cfg.Name, step)
	}
	p.handlers[step] = stepHandlers{forward: forward, compensate: compensate}
	return nil
}

// OnAcceptedQuery registers fn, called when a query finds step's forward
// accepted and not settled (the orchestrator gave up waiting for the
// final answer), in the query's transaction, before it is answered
// "accepted": a hook to go and find out now (ask the outside system what
// became of the work) and settle the step, typically by scheduling a
// lookup for a worker (package participants/external does). It must not
// make a network call itself (it runs inside the transaction). An error
// fails the query's transaction, which is processed again. The step must
// be registered (Handle) first.
func (p *Participant) OnAcceptedQuery(step string, fn func(ctx context.Context, tx pgx.Tx, ref Ref) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.handlers[step]
	switch {
	case !ok:
		return fmt.Errorf("participant %q: OnAcceptedQuery step %q: not registered (Handle it first)", p.cfg.Name, step)
	case fn == nil:
		return fmt.Errorf("participant %q: OnAcceptedQuery step %q: fn is nil", p.cfg.Name, step)
	case h.acceptedQuery != nil:
		return fmt.Errorf("participant %q: OnAcceptedQuery step %q: already registered", p.cfg.Name, step)
	}
	h.acceptedQuery = fn
	p.handlers[step] = h
	return nil
}

// Name is the participant's name.
func (p *Participant) Name() string { return p.cfg.Name }

// Schema is the schema of the participant's SDK tables.
func (p *Participant) Schema() string { return p.cfg.Schema }
