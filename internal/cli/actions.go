package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
)

// actionCmds are the operator actions from a terminal: retry, compensate,
// resolve and the repairs, on one saga by id or on every saga of a --filter (with
// --dry-run first). They run the engine directly on database.url, each
// saga through the same door as the HTTP action (its own transaction,
// journaled with --actor and --reason); the commands they send wait in the
// outbox for the relay of `serve`. An action under four eyes
// (sagas.<type>.four_eyes) on one saga records a proposal instead
// (proposals.go); --filter refuses it.
func actionCmds(cfg *Config) []*cobra.Command {
	docs := map[saga.OperatorAction]string{
		saga.ActionRetry:           "Re-send the active step's command now, skipping the backoff",
		saga.ActionCompensate:      "Compensate now: undo the done steps in reverse (refused once the pivot was sent)",
		saga.ActionResolve:         "Settle a failed saga with the outcome you made true by hand (--outcome completed|compensated)",
		saga.ActionQuery:           "Ask the active step's participant what it recorded and settle the step by the answer (re-opens a failed saga whose step was given up)",
		saga.ActionMarkDone:        "Repair: mark a flagged step after the pivot, or a step being queried, done with --output (JSON) you found elsewhere",
		saga.ActionMarkCompensated: "Repair: mark a compensation that can never succeed done, with --note of what you did instead",
		saga.ActionForceFail:       "Repair: force a running or compensating saga to failed (nothing more is sent)",
		saga.ActionResume:          "Repair: run a failed saga forward again from --step",
	}
	var out []*cobra.Command
	for _, action := range []saga.OperatorAction{saga.ActionRetry, saga.ActionCompensate, saga.ActionResolve, saga.ActionQuery,
		saga.ActionMarkDone, saga.ActionMarkCompensated, saga.ActionForceFail, saga.ActionResume} {
		cmd := &cobra.Command{
			Use:   string(action) + " [saga-id] --actor A --reason R [--filter status=failed,type=place-order [--dry-run]]",
			Short: docs[action] + "; on one saga or every saga of a filter (journaled with actor and reason" + fourEyesNote(action) + ")",
			Args:  cobra.MaximumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return runAction(cmd, cfg, action, args)
			},
		}
		cmd.Flags().String("actor", "", "who acts (required; in the journal)")
		cmd.Flags().String("reason", "", "why (required; in the journal)")
		if action == saga.ActionResolve {
			cmd.Flags().String("outcome", "", "completed or compensated (required)")
		}
		if action.Repair() {
			cmd.Flags().String("ticket", "", "a ticket reference (incident, change request; journaled and audited)")
		}
		switch action {
		case saga.ActionMarkDone:
			cmd.Flags().String("step", "", "the step (default: the active one)")
			cmd.Flags().String("output", "", "the step's output as JSON, merged like a participant's reply")
		case saga.ActionMarkCompensated:
			cmd.Flags().String("step", "", "the step (default: the active one)")
			cmd.Flags().String("note", "", "what you did instead of the compensation (default: --reason)")
		case saga.ActionResume:
			cmd.Flags().String("step", "", "the step the saga goes forward from (required)")
		}
		cmd.Flags().String("filter", "", "apply to every saga matching key=value,... (state or status, type, step, older_than, stuck_after, stuck_since, stuck) instead of one id")
		cmd.Flags().Bool("dry-run", false, "with --filter: list what would be touched and change nothing")
		cmd.Flags().Int("limit", orchestrator.BulkLimitDefault, fmt.Sprintf("with --filter: the most sagas touched, newest first (at most %d)", orchestrator.BulkLimitMax))
		cmd.Flags().Bool("json", false, "print the result as JSON")
		out = append(out, cmd)
	}
	return out
}

// fourEyesNote is what an action's help says about four eyes.
func fourEyesNote(action saga.OperatorAction) string {
	if action == saga.ActionQuery || action == saga.ActionCheck {
		return ""
	}
	return "; under sagas.<type>.four_eyes a proposal another actor approves"
}

func runAction(cmd *cobra.Command, cfg *Config, action saga.OperatorAction, args []string) error {
	ctx := cmd.Context()
	f := cmd.Flags()
	actor, _ := f.GetString("actor")
	reason, _ := f.GetString("reason")
	outcome, _ := f.GetString("outcome")
	spec, _ := f.GetString("filter")
	dry, _ := f.GetBool("dry-run")
	limit, _ := f.GetInt("limit")
	asJSON, _ := f.GetBool("json")
	ticket, _ := f.GetString("ticket")
	step, _ := f.GetString("step")
	output, _ := f.GetString("output")
	note, _ := f.GetString("note")
	switch {
	case len(args) == 1 && spec != "":
		return errors.New("give a saga id or --filter, not both")
	case len(args) == 0 && spec == "":
		return fmt.Errorf("%s needs a saga id or --filter (e.g. --filter status=failed,type=place-order --dry-run)", action)
	case dry && spec == "":
		return errors.New("--dry-run goes with --filter")
	case actor == "" || reason == "":
		return errors.New("--actor and --reason are required: every operator action is journaled with who and why")
	case action == saga.ActionResolve && outcome != string(saga.Completed) && outcome != string(saga.Compensated):
		return errors.New("--outcome must be completed or compensated")
	case action == saga.ActionResume && step == "":
		return errors.New("resume needs --step: the step the saga goes forward from")
	case output != "" && !json.Valid([]byte(output)):
		return errors.New("--output must be JSON")
	case action == saga.ActionMarkDone && spec != "":
		return errors.New("mark-done takes one saga id, not --filter (its output belongs to one saga)")
	}
	op := saga.Operator{Action: action, Actor: actor, Reason: reason, Outcome: saga.State(outcome), Ticket: ticket, Step: step, Note: note}
	if output != "" {
		op.Output = json.RawMessage(output)
	}
	var req orchestrator.BulkRequest
	var id uuid.UUID
	if spec != "" {
		filter, err := api.ParseFilterSpec(spec)
		if err != nil {
			return fmt.Errorf("--filter: %w", err)
		}
		if limit < 1 || limit > orchestrator.BulkLimitMax {
			return fmt.Errorf("--limit %d: want 1 to %d", limit, orchestrator.BulkLimitMax)
		}
		req = orchestrator.BulkRequest{Filter: filter, Operator: op, DryRun: dry, Limit: limit}
	} else {
		var err error
		if id, err = uuid.Parse(args[0]); err != nil {
			return fmt.Errorf("saga id %q is not a UUID", args[0])
		}
	}
	log := cfg.Log.logger()
	reg, err := cfg.registry()
	if err != nil {
		return err
	}
	pool, err := newPool(ctx, cfg.Database, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	ec := cfg.engine()
	ec.Logger = log.With(slog.String("component", "operator"))
	eng, err := orchestrator.NewEngine(pool, reg, &ec)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if spec == "" {
		in, p, err := eng.Request(ctx, id, op)
		if err != nil {
			return fmt.Errorf("%s saga %s: %w", action, id, err)
		}
		if p != nil {
			if asJSON {
				return writeJSON(w, map[string]any{"proposal": p}, false)
			}
			_, err = fmt.Fprintf(w, "%s on saga %s needs four eyes: proposal %d recorded, nothing changed; another actor approves it with `approve %d --actor B` (expires %s)\n",
				action, id, p.ID, p.ID, p.Expires.UTC().Format(time.RFC3339))
			return err
		}
		if asJSON {
			return writeJSON(w, in, false)
		}
		_, err = fmt.Fprintf(w, "%s applied to saga %s: now %s%s (journaled: actor %q, reason %q)\n", action, id, safe(string(in.State)), safe(stepSuffix(in.CurrentStep())), actor, reason)
		return err
	}
	res, err := eng.OperateMatching(ctx, req)
	if err != nil {
		return fmt.Errorf("%s on --filter %s: %w", action, spec, err)
	}
	if asJSON {
		return writeJSON(w, res, false)
	}
	return printBulk(w, res)
}

func stepSuffix(step string) string {
	if step == "" {
		return ""
	}
	return " at " + step
}

func printBulk(w io.Writer, res orchestrator.BulkResult) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTYPE\tSTATE\tSTEP\tOUTCOME\tWHY")
	for _, it := range res.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", it.ID, safe(it.Type), safe(string(it.State)), safe(it.Step), safe(string(it.Outcome)), oneLine(it.Reason))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	more := ""
	if res.Truncated {
		more = fmt.Sprintf(" (more match: only the newest %d were looked at; raise --limit)", res.Matched)
	}
	var err error
	if res.DryRun {
		_, err = fmt.Fprintf(w, "dry run: %s would touch %d of %d sagas, %d refused; nothing was changed%s\n", res.Action, res.Counts.WouldApply, res.Matched, res.Counts.Refused, more)
	} else {
		_, err = fmt.Fprintf(w, "%s: %d of %d sagas touched, %d refused, %d errors%s\n", res.Action, res.Counts.Applied, res.Matched, res.Counts.Refused, res.Counts.Errors, more)
	}
	return err
}
