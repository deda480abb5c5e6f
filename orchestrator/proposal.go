package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/saga"
)

// ErrProposalNotFound: no proposal has the id.
var ErrProposalNotFound = errors.New("no such proposal")

// ProposalArgs are the arguments of a proposed action besides its reason
// and ticket.
type ProposalArgs struct {
	Outcome saga.State      `json:"outcome,omitempty"`
	Step    string          `json:"step,omitempty"`
	Output  json.RawMessage `json:"output,omitempty"`
	Note    string          `json:"note,omitempty"`
}

// Proposal is an operator action under four eyes waiting for, or given,
// its second person's decision.
type Proposal struct {
	ID       int64               `json:"id"`
	SagaID   uuid.UUID           `json:"saga_id"`
	Type     string              `json:"saga_type"`
	Action   saga.OperatorAction `json:"action"`
	Args     ProposalArgs        `json:"args"`
	Reason   string              `json:"reason"`
	Ticket   string              `json:"ticket,omitempty"`
	Proposer string              `json:"proposer"`
	Created  time.Time           `json:"created"`
	Expires  time.Time           `json:"expires"`
	// State is proposed, approved, rejected or expired (a proposal past
	// its expiry reads expired even before a decision recorded it).
	State          string     `json:"state"`
	Decider        string     `json:"decider,omitempty"`
	Decided        *time.Time `json:"decided,omitempty"`
	DecisionReason string     `json:"decision_reason,omitempty"`
}

// operator is the action p proposes, by its proposer.
func (p Proposal) operator() saga.Operator {
	return saga.Operator{Action: p.Action, Actor: p.Proposer, Reason: p.Reason, Ticket: p.Ticket,
		Outcome: p.Args.Outcome, Step: p.Args.Step, Output: p.Args.Output, Note: p.Args.Note}
}

// Request applies op to saga id, or, when four eyes applies to the saga's
// type and op's action, records it as a proposal and changes nothing (the
// proposal is returned, nil otherwise). An action the saga's state refuses
// is refused now (a *RefusedError), proposal or not.
func (e *Engine) Request(ctx context.Context, id uuid.UUID, op saga.Operator) (saga.Instance, *Proposal, error) {
	in, err := e.st.load(ctx, e.pool, id)
	if err != nil {
		return in, nil, err
	}
	if !e.cfg.FourEyes.Requires(in.Type, op.Action) {
		out, err := e.Operate(ctx, id, op)
		return out, nil, err
	}
	if err := e.wouldOperate(in, op); err != nil {
		return in, nil, err
	}
	args, err := json.Marshal(ProposalArgs{Outcome: op.Outcome, Step: op.Step, Output: op.Output, Note: op.Note})
	if err != nil {
		return in, nil, fmt.Errorf("propose %s on saga %s: %w", op.Action, id, err)
	}
	now := e.cfg.Now()
	p := Proposal{SagaID: id, Type: in.Type, Action: op.Action, Reason: op.Reason, Ticket: op.Ticket, Proposer: op.Actor,
		Created: now, Expires: now.Add(e.cfg.ProposalTTL), State: ProposalProposed}
	p.Args = ProposalArgs{Outcome: op.Outcome, Step: op.Step, Output: op.Output, Note: op.Note}
	err = e.pool.QueryRow(ctx, `INSERT INTO `+e.st.proposals+
		` (saga_id, saga_type, action, args, reason, ticket, proposer, created, expires) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id`,
		id, in.Type, string(op.Action), args, op.Reason, op.Ticket, op.Actor, now, p.Expires).Scan(&p.ID)
	if err != nil {
		return in, nil, fmt.Errorf("propose %s on saga %s: %w", op.Action, id, err)
	}
	e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "operator proposal", slog.Int64("proposal", p.ID), slog.String("saga_id", id.String()),
		slog.String("action", string(op.Action)), slog.String("proposer", op.Actor), slog.String("reason", op.Reason))
	return in, &p, nil
}

// DecideProposal approves or rejects proposal id as actor, with an
// optional reason. Approving runs the proposed action through the one
// door in the same transaction, audited with the proposer as actor and
// actor as approver; when the saga's state now refuses it, nothing is
// written (a *RefusedError) and the proposal stays open. A decision the
// rules refuse (decideProposal) is a *ProposalError; deciding an expired
// proposal records it as expired.
func (e *Engine) DecideProposal(ctx context.Context, id int64, decision, actor, reason string) (Proposal, saga.Instance, error) {
	var p Proposal
	var in saga.Instance
	var pc *postCommit
	var refused error
	var err error
	for try := 0; ; try++ {
		refused = nil
		err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			pc = &postCommit{}
			var err error
			if p, err = e.st.lockProposal(ctx, tx, id); err != nil {
				return err
			}
			now := e.cfg.Now()
			next, rerr := decideProposal(p, decision, actor, now)
			if rerr != nil && next != ProposalExpired {
				return rerr
			}
			refused = rerr
			p.State = next
			if next != ProposalExpired {
				p.Decider, p.Decided, p.DecisionReason = actor, &now, reason
			}
			if next == ProposalApproved {
				if in, err = e.operateIn(ctx, tx, p.SagaID, p.operator(), &p, pc); err != nil {
					return err
				}
			}
			_, err = tx.Exec(ctx, `UPDATE `+e.st.proposals+` SET state = $2, decider = $3, decided = $4, decision_reason = $5 WHERE id = $1`,
				p.ID, p.State, p.Decider, p.Decided, p.DecisionReason)
			if err != nil {
				return fmt.Errorf("record the decision on proposal %d: %w", id, err)
			}
			return nil
		})
		if !errors.Is(err, errAuditMoved) || try >= maxVersionConflicts {
			break
		}
	}
	if err != nil {
		return p, in, err
	}
	if refused != nil {
		return p, in, refused
	}
	e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "operator proposal decided", slog.Int64("proposal", p.ID), slog.String("saga_id", p.SagaID.String()),
		slog.String("state", p.State), slog.String("decider", actor), slog.String("reason", reason))
	if p.State == ProposalApproved {
		e.afterOperate(ctx, p.SagaID, p.operator(), in, pc)
	}
	return p, in, nil
}

// ProposalFilter selects proposals: by state (proposed, approved,
// rejected, expired; empty: all) and saga (zero: all), newest first, at
// most Limit (0: ProposalLimitDefault).
type ProposalFilter struct {
	State  string
	SagaID uuid.UUID
	Limit  int
}

// ProposalLimitDefault and ProposalLimitMax bound Proposals.
const (
	ProposalLimitDefault = 100
	ProposalLimitMax     = 1000
)

// proposalColumns read a proposal; a proposed one past its expiry reads
// expired.
const proposalColumns = `id, saga_id, saga_type, action, args, reason, ticket, proposer, created, expires,
 CASE WHEN state = 'proposed' AND expires <= $1 THEN 'expired' ELSE state END, decider, decided, decision_reason`

// Proposals lists the proposals f selects.
func (e *Engine) Proposals(ctx context.Context, f ProposalFilter) ([]Proposal, error) {
	switch f.State {
	case "", ProposalProposed, ProposalApproved, ProposalRejected, ProposalExpired:
	default:
		return nil, fmt.Errorf("%w: state %q: want proposed, approved, rejected or expired", ErrInvalidInput, f.State)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = ProposalLimitDefault
	}
	limit = min(limit, ProposalLimitMax)
	where := `TRUE`
	switch f.State {
	case ProposalProposed:
		where = `state = 'proposed' AND expires > $1`
	case ProposalExpired:
		where = `(state = 'expired' OR state = 'proposed' AND expires <= $1)`
	case ProposalApproved, ProposalRejected:
		where = `state = '` + f.State + `'`
	}
	args := []any{e.cfg.Now(), limit}
	if f.SagaID != uuid.Nil {
		where += ` AND saga_id = $3`
		args = append(args, f.SagaID)
	}
	rows, err := e.pool.Query(ctx, `SELECT `+proposalColumns+` FROM `+e.st.proposals+` WHERE `+where+` ORDER BY id DESC LIMIT $2`, args...)
	if err != nil {
		return nil, fmt.Errorf("list proposals: %w", err)
	}
	defer rows.Close()
	out := []Proposal{}
	for rows.Next() {
		p, err := scanProposal(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list proposals: %w", err)
	}
	return out, nil
}

// lockProposal reads proposal id for update in tx (its stored state:
// expiry is the rules' business).
func (s *store) lockProposal(ctx context.Context, tx pgx.Tx, id int64) (Proposal, error) {
	p, err := scanProposal(tx.QueryRow(ctx, `SELECT `+proposalColumns+` FROM `+s.proposals+` WHERE id = $2 FOR UPDATE`, time.Time{}, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return p, fmt.Errorf("proposal %d: %w", id, ErrProposalNotFound)
	}
	return p, err
}

func scanProposal(row pgx.Row) (Proposal, error) {
	var p Proposal
	var action string
	var args []byte
	if err := row.Scan(&p.ID, &p.SagaID, &p.Type, &action, &args, &p.Reason, &p.Ticket, &p.Proposer, &p.Created, &p.Expires,
		&p.State, &p.Decider, &p.Decided, &p.DecisionReason); err != nil {
		return p, err
	}
	p.Action = saga.OperatorAction(action)
	if err := json.Unmarshal(args, &p.Args); err != nil {
		return p, fmt.Errorf("proposal %d: args: %w", p.ID, err)
	}
	return p, nil
}
