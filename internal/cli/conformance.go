package cli

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/sagaflow/sagaflow/internal/demo"
	"github.com/sagaflow/sagaflow/internal/goparticipant"
	"github.com/sagaflow/sagaflow/participants/conformance"
)

// conformanceCmd runs the wire-contract conformance kit against a
// participant (participants/conformance; docs/conformance.md).
func conformanceCmd(c *Config) *cobra.Command {
	var (
		cfg              conformance.Config
		asJSON, embedded bool
		verbose          bool
	)
	cmd := &cobra.Command{
		Use:   "conformance --participant NAME --cmd COMMAND",
		Short: "Check a participant (any language) against the wire contract: embedded broker, scratch database, a line per duty",
		Long: "Start an embedded broker and a scratch database (a fresh database on database.url, dropped at the end; " +
			"a throwaway Postgres from the machine's server binaries when none answers, or with --embedded-postgres), " +
			"start the participant with SAGAFLOW_KAFKA_BROKERS, SAGAFLOW_DATABASE_URL, SAGAFLOW_PARTICIPANT and SAGAFLOW_REPLY_TOPIC " +
			"in its environment, drive its conformance step and print PASS or FAIL per duty, then `N passed, M failed`. " +
			"Exit status 0 only when every check passed.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			ctx := cmd.Context()
			log := c.Log.logger()
			cfg.Logger = log
			if verbose {
				cfg.Output = cmd.ErrOrStderr()
			}
			url, stop, err := demo.Postgres(ctx, embedded, false, c.Database.URL, probeTimeout, log)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, stop()) }()
			cfg.DatabaseURL = url
			rep, err := conformance.Verify(ctx, cfg)
			if err != nil {
				return err
			}
			if asJSON {
				err = rep.WriteJSON(cmd.OutOrStdout())
			} else {
				err = rep.WriteText(cmd.OutOrStdout())
			}
			if err != nil {
				return err
			}
			if !rep.OK() {
				return exitError{code: 1}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Participant, "participant", "", "the participant's name: it consumes NAME.commands (required)")
	f.StringVar(&cfg.Command, "cmd", "", "the command that starts the participant, run with /bin/sh -c (required)")
	f.BoolVar(&asJSON, "json", false, "print the report as one JSON object")
	f.DurationVar(&cfg.Timeout, "timeout", conformance.TimeoutDefault, "bound on each wait for an answer")
	f.DurationVar(&cfg.StartTimeout, "start-timeout", conformance.StartTimeoutDefault, "bound on the wait for the participant's first answer")
	f.StringVar(&cfg.Partitioner, "partitioner", conformance.PartitionerMurmur2, "partitioner the replies (keyed by saga id) must follow: murmur2 or fnv1a")
	f.BoolVar(&embedded, "embedded-postgres", false, "use a throwaway Postgres even if database.url answers")
	f.BoolVar(&verbose, "verbose", false, "copy the participant's output to stderr")
	_ = cmd.MarkFlagRequired("participant")
	_ = cmd.MarkFlagRequired("cmd")
	cmd.AddCommand(&cobra.Command{
		Use:   "go-participant",
		Short: "Run the Go participant of the conformance step (the participants SDK) from the kit's SAGAFLOW_* environment",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := c.Log.logger()
			env, err := goparticipant.EnvFromOS()
			if err != nil {
				return err
			}
			env.Logger = log
			return goparticipant.Run(cmd.Context(), env)
		},
	})
	return cmd
}
