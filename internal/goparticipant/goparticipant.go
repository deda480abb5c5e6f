// Package goparticipant is the Go participant of the conformance step
// (participants/conformance, docs/DESIGN.md "The conformance step"), built on
// the participants SDK: the SDK does the wire contract (barrier, inbox,
// outbox and relay, dead letters, queries), this package only the step's
// handlers and its effect table. `orchestrator conformance go-participant`
// runs it from the environment the kit gives it (Env, EnvFromOS).
package goparticipant

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/conformance"
)

//go:embed sql/*.up.sql broken/*.up.sql
var sqlFiles embed.FS

// Migrations returns the migration set of the step's effect table in
// schema. With broken, it adds the deliberately broken barrier (a trigger
// that deletes a decided barrier row before its copy is inserted, so every
// copy executes): only tests use it, to show the kit fails such a
// participant.
func Migrations(schema string, broken bool) ([]migrations.Set, error) {
	sets, err := migrations.FromEmbedded("conformance", schema, sqlFiles, "sql")
	if err != nil || !broken {
		return sets, err
	}
	b, err := migrations.FromEmbedded("conformance-broken", schema, sqlFiles, "broken")
	if err != nil {
		return nil, err
	}
	return append(sets, b...), nil
}

// Register adds the conformance step's forward and compensate handlers to
// p; its effect table lives in p.Schema().
func Register(p *participants.Participant) error {
	if p == nil {
		return errors.New("goparticipant: Register: participant is nil")
	}
	h := handlers{p: p, effects: pgx.Identifier{p.Schema(), "conformance_effects"}.Sanitize()}
	if err := p.Handle(conformance.StepName, participants.One(h.forward), participants.One(h.compensate)); err != nil {
		return fmt.Errorf("goparticipant: Register: %w", err)
	}
	if err := p.Handle(conformance.FinishStepName, participants.One(h.finish), nil); err != nil {
		return fmt.Errorf("goparticipant: Register: %w", err)
	}
	return nil
}

type handlers struct {
	p       *participants.Participant
	effects string // qualified table name
}

func decode(cmd message.Command, needMode bool) (conformance.Input, error) {
	in, err := participants.Decode[conformance.Input](cmd)
	if err != nil {
		return in, err
	}
	if in.Key == "" {
		return in, participants.InvalidField(cmd, "key", "is empty")
	}
	if needMode && in.Mode != conformance.ModeSucceed && in.Mode != conformance.ModeFail && in.Mode != conformance.ModeRetry && in.Mode != conformance.ModeAccept {
		return in, participants.InvalidField(cmd, "mode", fmt.Sprintf("is %q, want succeed, fail, retry or accept", in.Mode))
	}
	return in, nil
}

func (h handlers) forward(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
	in, err := decode(cmd, true)
	if err != nil {
		return participants.Result{}, err
	}
	switch in.Mode {
	case conformance.ModeFail:
		return participants.Fail(conformance.ReasonFail), nil
	case conformance.ModeRetry:
		return participants.RetryLater(conformance.ReasonRetry), nil
	case conformance.ModeAccept:
		return participants.Accepted(), nil // settled by a finish
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+h.effects+` (key, saga_id) VALUES ($1, $2)`, in.Key, cmd.SagaID); err != nil {
		return participants.Result{}, fmt.Errorf("conformance forward saga %s: insert effect: %w", cmd.SagaID, err)
	}
	return h.count(ctx, tx, cmd, in.Key)
}

func (h handlers) compensate(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
	in, err := decode(cmd, false)
	if err != nil {
		return participants.Result{}, err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM `+h.effects+` WHERE key = $1 AND saga_id = $2`, in.Key, cmd.SagaID); err != nil {
		return participants.Result{}, fmt.Errorf("conformance compensate saga %s: delete effect: %w", cmd.SagaID, err)
	}
	return h.count(ctx, tx, cmd, in.Key)
}

// finish settles the accepted conformance step it names, in its own
// handler's transaction: the later completion from another code path.
func (h handlers) finish(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
	f, err := participants.Decode[conformance.Finish](cmd)
	if err != nil {
		return participants.Result{}, err
	}
	id, err := uuid.Parse(f.Saga)
	if err != nil || f.Key == "" {
		return participants.Result{}, participants.InvalidField(cmd, "saga_id", "is not a saga id, or the key is empty")
	}
	ref := participants.Ref{SagaID: id, Step: conformance.StepName}
	switch message.Outcome(f.Outcome) {
	case message.Success:
		if _, err := tx.Exec(ctx, `INSERT INTO `+h.effects+` (key, saga_id) VALUES ($1, $2)`, f.Key, id); err != nil {
			return participants.Result{}, fmt.Errorf("conformance finish saga %s: insert effect: %w", id, err)
		}
		res, err := h.count(ctx, tx, cmd, f.Key)
		if err != nil {
			return res, err
		}
		err = h.p.Complete(ctx, tx, ref, res.Payload)
		if errors.Is(err, participants.ErrSettled) || errors.Is(err, participants.ErrUnknownRef) {
			return participants.Fail(conformance.ReasonNotAccepted), nil
		}
		return res, err
	case message.Failure:
		err := h.p.Fail(ctx, tx, ref, conformance.ReasonFail)
		if errors.Is(err, participants.ErrSettled) || errors.Is(err, participants.ErrUnknownRef) {
			return participants.Fail(conformance.ReasonNotAccepted), nil
		}
		if err != nil {
			return participants.Result{}, err
		}
		return h.count(ctx, tx, cmd, f.Key)
	}
	return participants.Result{}, participants.InvalidField(cmd, "outcome", fmt.Sprintf("is %q, want success or failure", f.Outcome))
}

func (h handlers) count(ctx context.Context, tx pgx.Tx, cmd message.Command, key string) (participants.Result, error) {
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+h.effects+` WHERE key = $1`, key).Scan(&n); err != nil {
		return participants.Result{}, fmt.Errorf("conformance %s saga %s: count effects: %w", cmd.Action, cmd.SagaID, err)
	}
	return participants.Success(conformance.Output{Key: key, Effects: n}), nil
}

// Env is what the kit gives the participant.
type Env struct {
	Brokers     []string
	DatabaseURL string
	Participant string
	ReplyTopic  string
	// Broken makes the participant skip its barrier (see Migrations).
	Broken bool
	// CommandKeys are the keys it verifies commands with
	// (EnvOrchestratorKeys); ReplyKey its own (its entry of
	// EnvParticipantKeys). NoVerify makes it execute commands whatever
	// their signature: only tests use it, to show the kit fails such a
	// participant.
	CommandKeys []message.Key
	ReplyKey    message.Key
	NoVerify    bool
	Logger      *slog.Logger
}

// EnvFromOS reads Env from SAGAFLOW_KAFKA_BROKERS, SAGAFLOW_DATABASE_URL,
// SAGAFLOW_PARTICIPANT and SAGAFLOW_REPLY_TOPIC; an error names what is
// missing.
func EnvFromOS() (Env, error) {
	e := Env{
		Brokers:     kafkaclient.ParseBrokers(os.Getenv(conformance.EnvBrokers)),
		DatabaseURL: os.Getenv(conformance.EnvDatabaseURL),
		Participant: os.Getenv(conformance.EnvParticipant),
		ReplyTopic:  os.Getenv(conformance.EnvReplyTopic),
	}
	var err error
	if e.CommandKeys, err = message.ParseKeys(os.Getenv(conformance.EnvOrchestratorKeys)); err != nil {
		return e, fmt.Errorf("%s: %w", conformance.EnvOrchestratorKeys, err)
	}
	owned, err := message.ParseOwnedKeys(os.Getenv(conformance.EnvParticipantKeys))
	if err != nil {
		return e, fmt.Errorf("%s: %w", conformance.EnvParticipantKeys, err)
	}
	if ks := owned[e.Participant]; len(ks) > 0 {
		e.ReplyKey = ks[0]
	}
	return e, e.validate()
}

func (e Env) validate() error {
	var errs []error
	for _, v := range []struct{ name, val string }{
		{conformance.EnvBrokers, fmt.Sprint(len(e.Brokers) > 0)}, {conformance.EnvDatabaseURL, e.DatabaseURL},
		{conformance.EnvParticipant, e.Participant}, {conformance.EnvReplyTopic, e.ReplyTopic},
	} {
		if v.val == "" || v.val == "false" {
			errs = append(errs, fmt.Errorf("%s is not set", v.name))
		}
	}
	return errors.Join(errs...)
}

// Run migrates the participant's schema (named after it), creates its
// topics (command topic, dead-letter topic, reply topic) and runs it until
// ctx is cancelled.
func Run(ctx context.Context, e Env) error {
	if err := e.validate(); err != nil {
		return fmt.Errorf("goparticipant: %w", err)
	}
	log := e.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pool, err := pgxpool.New(ctx, e.DatabaseURL)
	if err != nil {
		return fmt.Errorf("goparticipant: %s: %w", conformance.EnvDatabaseURL, err)
	}
	defer pool.Close()
	cmdKeys := e.CommandKeys
	if e.NoVerify {
		cmdKeys = nil
	}
	p, err := participants.New(pool, &participants.Config{
		Name: e.Participant, Brokers: e.Brokers, ReplyTopics: []string{e.ReplyTopic}, Logger: log,
		CommandKeys: cmdKeys, ReplyKey: e.ReplyKey,
	})
	if err != nil {
		return fmt.Errorf("goparticipant: %w", err)
	}
	if err := Register(p); err != nil {
		return err
	}
	sdk, err := p.Migrations()
	if err != nil {
		return fmt.Errorf("goparticipant: %w", err)
	}
	own, err := Migrations(p.Schema(), e.Broken)
	if err != nil {
		return fmt.Errorf("goparticipant: %w", err)
	}
	if _, err := migrations.Migrate(ctx, pool, append(sdk, own...)...); err != nil {
		return fmt.Errorf("goparticipant: migrate schema %s: %w", p.Schema(), err)
	}
	cmdTopic := message.CommandTopic("", e.Participant)
	if err := kafkaclient.EnsureTopics(ctx, e.Brokers, 4, 1, cmdTopic, cmdTopic+inbox.DLQSuffixDefault, e.ReplyTopic); err != nil {
		return fmt.Errorf("goparticipant: %w", err)
	}
	return p.Run(ctx)
}
