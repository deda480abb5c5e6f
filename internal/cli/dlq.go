package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/sagaflow/sagaflow/inbox/dlq"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants/reference"
)

// dlqCmd is `orchestrator dlq`: dead letters and dead outbox rows of the
// orchestrator's schema or, with --schema, of a participant's, read and
// repaired straight in Postgres (database.url).
func dlqCmd(cfg *Config) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, show and redrive dead letters; list and requeue dead outbox rows (audited; --schema for a participant's)",
	}
	cmd.PersistentFlags().String("schema", "", "schema whose dead letters and outbox to use (default orchestrator.schema; a participant's schema works too)")
	cmd.PersistentFlags().Bool("json", false, "print JSON")
	cmd.PersistentFlags().StringSlice("consumes", nil, "topics the schema's consumer reads, the only ones a redrive may publish to (default: kafka.reply_topic for the orchestrator's schema, <topic_prefix><name>.commands for a reference participant's; required for any other schema's redrive)")
	cmd.AddCommand(dlqListCmd(cfg), dlqShowCmd(cfg), dlqRedriveCmd(cfg), dlqOutboxCmd(cfg), dlqRequeueCmd(cfg), dlqAuditCmd(cfg))
	return cmd
}

// withStore opens the pool and the store of --schema for one command.
func withStore(cmd *cobra.Command, cfg *Config, run func(ctx context.Context, st *dlq.Store, asJSON bool) error) error {
	ctx := cmd.Context()
	schema, _ := cmd.Flags().GetString("schema")
	schema = cmp(schema, cfg.Orchestrator.Schema)
	asJSON, _ := cmd.Flags().GetBool("json")
	pool, err := newPool(ctx, cfg.Database, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	consumes, _ := cmd.Flags().GetStringSlice("consumes")
	if len(consumes) == 0 {
		consumes = consumedTopics(cfg, schema)
	}
	st, err := dlq.New(pool, schema, consumes...)
	if err != nil {
		return err
	}
	if err := run(ctx, st, asJSON); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table
			return fmt.Errorf("schema %s: %w (is it a sagaflow schema, migrated? `orchestrator migrate`, or starting its process, creates the tables)", schema, err)
		}
		if errors.Is(err, dlq.ErrTopicNotConsumed) && len(consumes) == 0 {
			return fmt.Errorf("schema %s: %w (name the topics its consumer reads with --consumes)", schema, err)
		}
		return fmt.Errorf("schema %s: %w", schema, err)
	}
	return nil
}

// consumedTopics is what the consumer of schema reads, as far as this
// binary knows it: the reply, start and event topics for the
// orchestrator's schema, the command topic for a reference participant's;
// nil for any other.
func consumedTopics(cfg *Config, schema string) []string {
	if schema == cfg.Orchestrator.Schema {
		return []string{cfg.Kafka.ReplyTopic, cfg.Kafka.StartTopic, cfg.Kafka.EventTopic}
	}
	for _, name := range reference.AllNames {
		if schema == cfg.Participants.SchemaPrefix+name {
			return []string{message.CommandTopic(cfg.Kafka.TopicPrefix, name)}
		}
	}
	return nil
}

func printJSON(w io.Writer, v any) error {
	return writeJSON(w, v, true)
}

func parseIDs(args []string) ([]int64, error) {
	ids := make([]int64, 0, len(args))
	for _, a := range args {
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("id %q: want a positive integer", a)
		}
		ids = append(ids, n)
	}
	return ids, nil
}

func addAuditFlags(cmd *cobra.Command) {
	cmd.Flags().String("actor", "", "who acts (default $USER)")
	cmd.Flags().String("reason", "", "why (required)")
}

func auditOf(cmd *cobra.Command) dlq.Audit {
	actor, _ := cmd.Flags().GetString("actor")
	reason, _ := cmd.Flags().GetString("reason")
	return dlq.Audit{Actor: cmp(actor, os.Getenv("USER")), Reason: reason}
}

func dlqListCmd(cfg *Config) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Open dead letters, newest first (--redriven: redriven ones too)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := dlqFilter(cmd)
			f.Redriven, _ = cmd.Flags().GetBool("redriven")
			f.Limit, _ = cmd.Flags().GetInt("limit")
			f.Before, _ = cmd.Flags().GetInt64("before")
			return withStore(cmd, cfg, func(ctx context.Context, st *dlq.Store, asJSON bool) error {
				ls, next, err := st.List(ctx, f)
				if err != nil {
					return err
				}
				c, err := st.Count(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), map[string]any{"dead_letters": ls, "next": next, "counts": c})
				}
				return printDeadLetters(cmd.OutOrStdout(), ls, next, c)
			})
		},
	}
	addFilterFlags(cmd)
	cmd.Flags().Bool("redriven", false, "include dead letters already redriven")
	cmd.Flags().Int("limit", 0, fmt.Sprintf("dead letters per page (default %d, at most %d)", dlq.ListLimitDefault, dlq.ListLimitMax))
	cmd.Flags().Int64("before", 0, "continue below this id (the `more:` line of the previous page)")
	return cmd
}

func addFilterFlags(cmd *cobra.Command) {
	cmd.Flags().String("topic", "", "only dead letters from this topic")
	cmd.Flags().String("filter", "", "only dead letters whose reason contains this text (case-insensitive)")
}

func dlqFilter(cmd *cobra.Command) dlq.Filter {
	topic, _ := cmd.Flags().GetString("topic")
	match, _ := cmd.Flags().GetString("filter")
	return dlq.Filter{Topic: topic, Match: match}
}

func printDeadLetters(w io.Writer, ls []dlq.DeadLetter, next int64, c dlq.Counts) error {
	fmt.Fprintf(w, "%d open dead letters, %d dead outbox rows\n", c.DeadLetters, c.DeadOutbox)
	if len(ls) == 0 {
		_, err := fmt.Fprintln(w, "no dead letter matches")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTOPIC\tPART\tOFFSET\tMESSAGE ID\tDEAD AT\tREDRIVEN\tREASON")
	for _, d := range ls {
		red := "-"
		if d.RedrivenAt != nil {
			red = d.RedrivenAt.UTC().Format(time.RFC3339) + " by " + d.RedrivenBy
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", d.ID, safe(d.Topic), d.Partition, d.Offset, safe(dash(d.MessageID)),
			d.DeadAt.UTC().Format(time.RFC3339), safe(red), oneLine(d.Reason))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next > 0 {
		_, err := fmt.Fprintf(w, "more: --before %d\n", next)
		return err
	}
	return nil
}

func dlqShowCmd(cfg *Config) *cobra.Command {
	return &cobra.Command{
		Use:   "show <id>",
		Short: "One dead letter: coordinates, reason, headers, key and value",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			return withStore(cmd, cfg, func(ctx context.Context, st *dlq.Store, asJSON bool) error {
				d, err := st.Get(ctx, ids[0])
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), d)
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "dead letter %d\nfrom     %s partition %d offset %d\nmessage  %s\nreason   %s\ndead at  %s\n",
					d.ID, safe(d.Topic), d.Partition, d.Offset, safe(dash(d.MessageID)), safe(d.Reason), d.DeadAt.UTC().Format(time.RFC3339Nano))
				if d.RedrivenAt != nil {
					fmt.Fprintf(w, "redriven %s by %s: %s\n", d.RedrivenAt.UTC().Format(time.RFC3339Nano), safe(d.RedrivenBy), safe(d.RedriveReason))
				}
				fmt.Fprintf(w, "key      %s\nheaders\n", safe(d.Key))
				hs, _ := json.MarshalIndent(d.Headers, "  ", "  ")
				fmt.Fprintf(w, "  %s\nvalue (%d bytes)\n", safeJSON(hs), d.ValueBytes)
				if utf8.Valid(d.Value) {
					_, err = fmt.Fprintf(w, "  %s\n", safe(string(d.Value)))
				} else {
					_, err = fmt.Fprintf(w, "  %q\n", d.Value)
				}
				return err
			})
		},
	}
}

func dlqRedriveCmd(cfg *Config) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "redrive [id...]",
		Short: "Send dead letters back to their topic through the outbox (same key, value, headers, message id); audited",
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			all, _ := cmd.Flags().GetBool("all")
			f := dlqFilter(cmd)
			bulk := all || f.Topic != "" || f.Match != ""
			switch {
			case len(ids) == 0 && !bulk:
				return errors.New("redrive: name dead letter ids, or --all, or --topic/--filter")
			case len(ids) > 0 && bulk:
				return errors.New("redrive: ids and --all/--topic/--filter exclude each other")
			}
			a := auditOf(cmd)
			return withStore(cmd, cfg, func(ctx context.Context, st *dlq.Store, asJSON bool) error {
				var done []int64
				var err error
				if bulk {
					done, err = st.RedriveMatching(ctx, f, a)
				} else {
					done, err = st.Redrive(ctx, ids, a)
				}
				if err != nil {
					return partlyRepaired(cmd, asJSON, "redriven", done, err)
				}
				return printRepaired(cmd.OutOrStdout(), asJSON, "redriven", ids, done)
			})
		},
	}
	addAuditFlags(cmd)
	addFilterFlags(cmd)
	cmd.Flags().Bool("all", false, "every open dead letter (with --topic/--filter: every matching one)")
	return cmd
}

// printRepaired reports what a redrive or requeue did; asked ids that were
// not acted on are named (already done, or not found).
func printRepaired(w io.Writer, asJSON bool, verb string, asked, done []int64) error {
	if done == nil {
		done = []int64{}
	}
	if asJSON {
		return printJSON(w, map[string]any{"ids": done})
	}
	did := map[int64]bool{}
	for _, id := range done {
		did[id] = true
	}
	fmt.Fprintf(w, "%s %d: %v\n", verb, len(done), done)
	for _, id := range asked {
		if !did[id] {
			fmt.Fprintf(w, "skipped %d: not open (done before, or no such id)\n", id)
		}
	}
	return nil
}

// partlyRepaired reports a bulk repair that failed after some batches
// committed: those are printed (they stay repaired), then the error.
func partlyRepaired(cmd *cobra.Command, asJSON bool, verb string, done []int64, err error) error {
	if len(done) == 0 {
		return err
	}
	if asJSON {
		if perr := printJSON(cmd.OutOrStdout(), map[string]any{"ids": done, "error": err.Error()}); perr != nil {
			return perr
		}
	} else {
		fmt.Fprintf(cmd.OutOrStdout(), "%s %d before the error: %v\n", verb, len(done), done)
	}
	return fmt.Errorf("%w (%d %s before it stay so; run it again for the rest)", err, len(done), verb)
}

func dlqOutboxCmd(cfg *Config) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "outbox",
		Short: "Outbox rows the relay parked dead after its publish attempts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			after, _ := cmd.Flags().GetInt64("after")
			limit, _ := cmd.Flags().GetInt("limit")
			return withStore(cmd, cfg, func(ctx context.Context, st *dlq.Store, asJSON bool) error {
				rows, err := st.DeadOutbox(ctx, after, limit)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), map[string]any{"rows": rows})
				}
				w := cmd.OutOrStdout()
				if len(rows) == 0 {
					_, err := fmt.Fprintln(w, "no dead outbox row")
					return err
				}
				tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tTOPIC\tKEY\tATTEMPTS\tDEAD AT\tLAST ERROR")
				for _, r := range rows {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\n", r.ID, safe(r.Topic), safe(r.Key), r.Attempts, r.DeadAt.UTC().Format(time.RFC3339), oneLine(r.LastError))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().Int64("after", 0, "rows with ids above this one")
	cmd.Flags().Int("limit", 0, fmt.Sprintf("rows (default %d, at most %d)", dlq.ListLimitDefault, dlq.ListLimitMax))
	return cmd
}

func dlqRequeueCmd(cfg *Config) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "requeue [id...]",
		Short: "Make dead outbox rows due again (attempts reset) so the relay publishes them; audited",
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			all, _ := cmd.Flags().GetBool("all")
			if (len(ids) == 0) == !all {
				return errors.New("requeue: name dead outbox row ids or --all, not both")
			}
			a := auditOf(cmd)
			return withStore(cmd, cfg, func(ctx context.Context, st *dlq.Store, asJSON bool) error {
				var done []int64
				var err error
				if all {
					done, err = st.RequeueAll(ctx, a)
				} else {
					done, err = st.Requeue(ctx, ids, a)
				}
				if err != nil {
					return partlyRepaired(cmd, asJSON, "requeued", done, err)
				}
				return printRepaired(cmd.OutOrStdout(), asJSON, "requeued", ids, done)
			})
		},
	}
	addAuditFlags(cmd)
	cmd.Flags().Bool("all", false, "every dead outbox row")
	return cmd
}

func dlqAuditCmd(cfg *Config) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "The latest redrives and requeues: when, who, why, what",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			limit, _ := cmd.Flags().GetInt("limit")
			return withStore(cmd, cfg, func(ctx context.Context, st *dlq.Store, asJSON bool) error {
				log, err := st.AuditLog(ctx, limit)
				if err != nil {
					return err
				}
				if asJSON {
					if log == nil {
						log = []dlq.AuditEntry{}
					}
					return printJSON(cmd.OutOrStdout(), map[string]any{"audit": log})
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "AT\tACTION\tTARGET\tACTOR\tREASON")
				for _, e := range log {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.At.UTC().Format(time.RFC3339), safe(e.Action), safe(e.Target), safe(e.Actor), oneLine(e.Reason))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().Int("limit", 0, fmt.Sprintf("entries (default %d, at most %d)", dlq.ListLimitDefault, dlq.ListLimitMax))
	return cmd
}
