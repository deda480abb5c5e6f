package cli

import (
	"fmt"
	"log/slog"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/sagaflow/sagaflow/orchestrator"
)

// proposalCmds are four eyes from a terminal: `proposals` lists them,
// `approve` and `reject` decide one. Like the actions they run the engine
// on database.url; approving runs the proposed action through the one
// door, audited with the proposer and the approver.
func proposalCmds(cfg *Config) []*cobra.Command {
	list := &cobra.Command{
		Use:   "proposals [--state proposed|approved|rejected|expired] [--saga ID]",
		Short: "List four-eyes proposals (operator actions waiting for a second person), newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runProposals(cmd, cfg)
		},
	}
	list.Flags().String("state", orchestrator.ProposalProposed, "proposed (open), approved, rejected, expired, or empty for all")
	list.Flags().String("saga", "", "only the proposals of this saga id")
	list.Flags().Int("limit", orchestrator.ProposalLimitDefault, fmt.Sprintf("the most listed (at most %d)", orchestrator.ProposalLimitMax))
	list.Flags().Bool("json", false, "print the proposals as JSON")
	out := []*cobra.Command{list}
	for _, d := range []struct{ decision, short string }{
		{orchestrator.DecisionApprove, "Approve a four-eyes proposal as a second person: the proposed action runs (refused for its proposer and once expired)"},
		{orchestrator.DecisionReject, "Reject a four-eyes proposal (the proposer may withdraw it): nothing changes"},
	} {
		cmd := &cobra.Command{
			Use:   d.decision + " <proposal-id> --actor A [--reason R]",
			Short: d.short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return runDecision(cmd, cfg, d.decision, args[0])
			},
		}
		cmd.Flags().String("actor", "", "who decides (required; approving needs another actor than the proposer)")
		cmd.Flags().String("reason", "", "why (required to reject)")
		cmd.Flags().Bool("json", false, "print the result as JSON")
		out = append(out, cmd)
	}
	return out
}

// operatorEngine opens the engine the operator commands use.
func operatorEngine(cmd *cobra.Command, cfg *Config) (*orchestrator.Engine, func(), error) {
	reg, err := cfg.registry()
	if err != nil {
		return nil, nil, err
	}
	pool, err := newPool(cmd.Context(), cfg.Database, 2)
	if err != nil {
		return nil, nil, err
	}
	ec := cfg.engine()
	ec.Logger = cfg.Log.logger().With(slog.String("component", "operator"))
	eng, err := orchestrator.NewEngine(pool, reg, &ec)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return eng, pool.Close, nil
}

func runProposals(cmd *cobra.Command, cfg *Config) error {
	f := cmd.Flags()
	state, _ := f.GetString("state")
	sagaID, _ := f.GetString("saga")
	limit, _ := f.GetInt("limit")
	asJSON, _ := f.GetBool("json")
	filter := orchestrator.ProposalFilter{State: state, Limit: limit}
	if sagaID != "" {
		id, err := uuid.Parse(sagaID)
		if err != nil {
			return fmt.Errorf("--saga %q is not a UUID", sagaID)
		}
		filter.SagaID = id
	}
	if limit < 1 || limit > orchestrator.ProposalLimitMax {
		return fmt.Errorf("--limit %d: want 1 to %d", limit, orchestrator.ProposalLimitMax)
	}
	eng, done, err := operatorEngine(cmd, cfg)
	if err != nil {
		return err
	}
	defer done()
	list, err := eng.Proposals(cmd.Context(), filter)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if asJSON {
		return writeJSON(w, map[string]any{"proposals": list}, false)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSAGA\tTYPE\tACTION\tPROPOSER\tSTATE\tDECIDER\tEXPIRES\tREASON")
	for _, p := range list {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.SagaID, safe(p.Type), safe(string(p.Action)), safe(p.Proposer),
			p.State, safe(p.Decider), p.Expires.UTC().Format(time.RFC3339), oneLine(p.Reason))
	}
	return tw.Flush()
}

func runDecision(cmd *cobra.Command, cfg *Config, decision, arg string) error {
	f := cmd.Flags()
	actor, _ := f.GetString("actor")
	reason, _ := f.GetString("reason")
	asJSON, _ := f.GetBool("json")
	id, err := strconv.ParseInt(arg, 10, 64)
	switch {
	case err != nil || id < 1:
		return fmt.Errorf("proposal id %q is not a positive number", arg)
	case actor == "":
		return fmt.Errorf("--actor is required: who %ss", decision)
	case decision == orchestrator.DecisionReject && reason == "":
		return fmt.Errorf("--reason is required to reject")
	}
	eng, done, err := operatorEngine(cmd, cfg)
	if err != nil {
		return err
	}
	defer done()
	p, in, err := eng.DecideProposal(cmd.Context(), id, decision, actor, reason)
	if err != nil {
		return fmt.Errorf("%s proposal %d: %w", decision, id, err)
	}
	w := cmd.OutOrStdout()
	if asJSON {
		return writeJSON(w, map[string]any{"proposal": p}, false)
	}
	if p.State == orchestrator.ProposalApproved {
		_, err = fmt.Fprintf(w, "proposal %d approved by %s: %s applied to saga %s, now %s%s (audited: proposed by %s)\n",
			p.ID, safe(actor), p.Action, p.SagaID, safe(string(in.State)), safe(stepSuffix(in.CurrentStep())), safe(p.Proposer))
		return err
	}
	_, err = fmt.Fprintf(w, "proposal %d %s by %s; saga %s unchanged\n", p.ID, p.State, safe(actor), p.SagaID)
	return err
}
