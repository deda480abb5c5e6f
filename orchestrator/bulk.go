package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/saga"
)

// BulkLimitDefault and BulkLimitMax bound how many sagas one OperateMatching
// touches (BulkRequest.Limit).
const (
	BulkLimitDefault = 100
	BulkLimitMax     = 1000
)

// BulkRequest applies one operator action to every saga a filter matches.
type BulkRequest struct {
	// Filter selects the sagas (State, Type, Step, OlderThan, Stuck with
	// StuckAfter); its Limit and Cursor are ignored. At least one
	// criterion is required, so an empty filter never touches everything.
	Filter Filter
	// Operator is the action, actor, reason (and outcome for resolve)
	// applied to each saga, audited like a single action.
	Operator saga.Operator
	// DryRun lists what would be touched (and what refused) and writes
	// nothing.
	DryRun bool
	// Limit is the most sagas looked at, newest first; 0:
	// BulkLimitDefault; at most BulkLimitMax.
	Limit int
}

// Bulk outcomes of one saga.
const (
	BulkWouldApply = "would_apply"
	BulkApplied    = "applied"
	BulkRefused    = "refused"
	BulkError      = "error"
)

// BulkItem is what OperateMatching did, or would do, to one saga.
type BulkItem struct {
	ID    uuid.UUID  `json:"id"`
	Type  string     `json:"type"`
	State saga.State `json:"state"`
	Step  string     `json:"step,omitempty"`
	// Outcome is would_apply (dry run), applied, refused (the state does
	// not allow the action) or error.
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
}

// BulkResult is the answer of OperateMatching.
type BulkResult struct {
	Action saga.OperatorAction `json:"action"`
	DryRun bool                `json:"dry_run"`
	// Matched counts the sagas looked at; Truncated is true when more
	// matched than Limit.
	Matched   int        `json:"matched"`
	Truncated bool       `json:"truncated"`
	Counts    BulkCounts `json:"counts"`
	Items     []BulkItem `json:"items"`
}

// BulkCounts counts the items by outcome.
type BulkCounts struct {
	WouldApply int `json:"would_apply"`
	Applied    int `json:"applied"`
	Refused    int `json:"refused"`
	Errors     int `json:"errors"`
}

// Empty reports whether f has no criterion.
func (f Filter) Empty() bool {
	return f.State == "" && f.Type == "" && f.Step == "" && f.OlderThan <= 0 && !f.Stuck
}

// OperateMatching applies req.Operator to each saga req.Filter matches (at
// most req.Limit, newest first), each through Operate: its own
// transaction, journaled with actor and reason like a single action. A saga
// whose state refuses the action is listed as refused and the others go
// on. With DryRun nothing is written: each saga is run through Decide to
// tell would_apply from refused.
func (e *Engine) OperateMatching(ctx context.Context, req BulkRequest) (BulkResult, error) {
	res := BulkResult{Action: req.Operator.Action, DryRun: req.DryRun, Items: []BulkItem{}}
	if req.Filter.Empty() {
		return res, fmt.Errorf("%w: filter: at least one of state, type, step, older_than, stuck is required", ErrInvalidInput)
	}
	limit := req.Limit
	if limit <= 0 {
		limit = BulkLimitDefault
	}
	limit = min(limit, BulkLimitMax)
	var matched []saga.Instance
	f := req.Filter
	f.Cursor = ""
	for {
		f.Limit = min(ListLimitMax, limit+1-len(matched))
		page, err := e.List(ctx, f)
		if err != nil {
			return res, err
		}
		matched = append(matched, page.Sagas...)
		if page.Next == "" || len(matched) > limit {
			break
		}
		f.Cursor = page.Next
	}
	if len(matched) > limit {
		matched, res.Truncated = matched[:limit], true
	}
	res.Matched = len(matched)
	for _, in := range matched {
		item := BulkItem{ID: in.ID, Type: in.Type, State: in.State, Step: in.CurrentStep()}
		var err error
		if e.cfg.FourEyes.Requires(in.Type, req.Operator.Action) {
			item.Outcome, item.Reason = BulkRefused, fmt.Sprintf("%s on a %s saga needs four eyes: propose it on the saga", req.Operator.Action, in.Type)
			res.Counts.Refused++
			res.Items = append(res.Items, item)
			continue
		}
		if req.DryRun {
			err = e.wouldOperate(in, req.Operator)
		} else {
			var after saga.Instance
			after, err = e.Operate(ctx, in.ID, req.Operator)
			if err == nil {
				item.State, item.Step = after.State, after.CurrentStep()
			}
		}
		var refused *saga.RefusedError
		switch {
		case err == nil && req.DryRun:
			item.Outcome = BulkWouldApply
			res.Counts.WouldApply++
		case err == nil:
			item.Outcome = BulkApplied
			res.Counts.Applied++
		case errors.As(err, &refused):
			item.Outcome, item.Reason = BulkRefused, refused.Why
			res.Counts.Refused++
		case ctx.Err() != nil:
			return res, ctx.Err()
		default:
			item.Outcome, item.Reason = BulkError, err.Error()
			res.Counts.Errors++
		}
		res.Items = append(res.Items, item)
	}
	e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "operator bulk action", slog.String("action", string(req.Operator.Action)),
		slog.String("actor", req.Operator.Actor), slog.String("reason", req.Operator.Reason), slog.Bool("dry_run", req.DryRun),
		slog.Int("matched", res.Matched), slog.Int("applied", res.Counts.Applied), slog.Int("refused", res.Counts.Refused),
		slog.Int("errors", res.Counts.Errors))
	return res, nil
}

// wouldOperate reports whether op would be accepted by in as loaded (nil)
// or refused (a *RefusedError), without writing.
func (e *Engine) wouldOperate(in saga.Instance, op saga.Operator) error {
	def, ok := e.reg.Lookup(in.Type, in.DefVersion)
	if !ok {
		return fmt.Errorf("saga %s: type %q version %d: %w", in.ID, in.Type, in.DefVersion, saga.ErrUnknownType)
	}
	_, err := saga.Decide(def, in, saga.Event{Kind: saga.EventOperator, At: e.cfg.Now(), Operator: &op})
	return err
}
