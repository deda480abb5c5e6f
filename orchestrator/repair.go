package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/saga"
)

// AuditSnapshot is a saga as an operator action found or left it.
type AuditSnapshot struct {
	State saga.State       `json:"state"`
	Flag  string           `json:"flag,omitempty"`
	Step  string           `json:"current_step,omitempty"`
	Data  json.RawMessage  `json:"data"`
	Steps []saga.StepState `json:"steps"`
}

// AuditEntry is one row of the operator audit: an operator action that
// changed a saga, with the saga before and after.
type AuditEntry struct {
	ID     int64     `json:"id"`
	SagaID uuid.UUID `json:"saga_id"`
	Type   string    `json:"saga_type"`
	At     time.Time `json:"at"`
	Action string    `json:"action"`
	Actor  string    `json:"actor"`
	Reason string    `json:"reason"`
	Ticket string    `json:"ticket,omitempty"`
	Step   string    `json:"step,omitempty"`
	// Approver is who approved the action when four eyes applied (Actor
	// proposed it); Proposal is the proposal's id.
	Approver string        `json:"approver,omitempty"`
	Proposal *int64        `json:"proposal_id,omitempty"`
	Before   AuditSnapshot `json:"before"`
	After    AuditSnapshot `json:"after"`
}

func snapshot(in *saga.Instance) AuditSnapshot {
	data := in.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	return AuditSnapshot{State: in.State, Flag: in.Flag, Step: currentStepName(in), Data: data, Steps: in.Steps}
}

// errAuditMoved: the saga moved between the audit's read and the action;
// the transaction is tried again.
var errAuditMoved = errors.New("saga moved while audited")

// auditOperator writes the audit row of op, which moved before to after,
// in tx; approved is the proposal a second person approved, if any.
func (e *Engine) auditOperator(ctx context.Context, tx pgx.Tx, op saga.Operator, at time.Time, before, after *saga.Instance, step string, approved *Proposal) error {
	b, err := json.Marshal(snapshot(before))
	if err != nil {
		return fmt.Errorf("audit saga %s: %w", before.ID, err)
	}
	a, err := json.Marshal(snapshot(after))
	if err != nil {
		return fmt.Errorf("audit saga %s: %w", before.ID, err)
	}
	approver, proposal := "", (*int64)(nil)
	if approved != nil {
		approver, proposal = approved.Decider, &approved.ID
	}
	_, err = tx.Exec(ctx, `INSERT INTO `+e.st.audit+
		` (saga_id, saga_type, at, action, actor, reason, ticket, step, before, after, approver, proposal_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		before.ID, before.Type, at, string(op.Action), op.Actor, op.Reason, op.Ticket, step, b, a, approver, proposal)
	if err != nil {
		return fmt.Errorf("audit operator action %s on saga %s: %w", op.Action, before.ID, err)
	}
	return nil
}

// Audit returns saga id's operator audit, oldest first (at most limit rows).
func (e *Engine) Audit(ctx context.Context, id uuid.UUID, limit int) ([]AuditEntry, error) {
	rows, err := e.pool.Query(ctx, `SELECT id, saga_id, saga_type, at, action, actor, reason, ticket, step, before, after, approver, proposal_id FROM `+
		e.st.audit+` WHERE saga_id = $1 ORDER BY id LIMIT $2`, id, limit)
	if err != nil {
		return nil, fmt.Errorf("read the operator audit of saga %s: %w", id, err)
	}
	defer rows.Close()
	var out []AuditEntry
	for rows.Next() {
		var a AuditEntry
		var b, af []byte
		if err := rows.Scan(&a.ID, &a.SagaID, &a.Type, &a.At, &a.Action, &a.Actor, &a.Reason, &a.Ticket, &a.Step, &b, &af, &a.Approver, &a.Proposal); err != nil {
			return nil, fmt.Errorf("read the operator audit of saga %s: %w", id, err)
		}
		if err := json.Unmarshal(b, &a.Before); err != nil {
			return nil, fmt.Errorf("operator audit %d: before: %w", a.ID, err)
		}
		if err := json.Unmarshal(af, &a.After); err != nil {
			return nil, fmt.Errorf("operator audit %d: after: %w", a.ID, err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}
