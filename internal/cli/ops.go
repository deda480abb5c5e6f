package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/saga"
)

// APIDefault is where `status` and `list` find the HTTP API.
const APIDefault = "http://127.0.0.1:8080"

// opsClient talks to the orchestrator's HTTP API for the ops commands.
type opsClient struct {
	base  string
	token string
	http  *http.Client
}

func addOpsFlags(cmd *cobra.Command) {
	cmd.Flags().String("api", "", "base URL of the orchestrator's HTTP API (default $SAGAFLOW_API or "+APIDefault+")")
	cmd.Flags().String("token", "", "bearer token when reads are protected (default $SAGAFLOW_TOKEN, http.admin_token or http.client_token)")
	cmd.Flags().Bool("json", false, "print the API's JSON answer as is")
	cmd.Flags().Duration("timeout", 10*time.Second, "bound on the HTTP request")
}

func newOpsClient(cmd *cobra.Command, h HTTPConfig) (*opsClient, error) {
	base, _ := cmd.Flags().GetString("api")
	base = cmp(base, os.Getenv("SAGAFLOW_API"), APIDefault)
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--api %q: want a URL like %s", base, APIDefault)
	}
	tok, _ := cmd.Flags().GetString("token")
	timeout, _ := cmd.Flags().GetDuration("timeout")
	return &opsClient{base: strings.TrimRight(base, "/"), token: cmp(tok, os.Getenv("SAGAFLOW_TOKEN"), h.AdminToken, h.ClientToken),
		http: &http.Client{Timeout: timeout}}, nil
}

func cmp(vals ...string) string {
	for _, s := range vals {
		if s != "" {
			return s
		}
	}
	return ""
}

// get fetches path and returns the body of a 200 answer; other answers
// become an error carrying the API's message.
func (c *opsClient) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w (is `orchestrator serve` running there? --api sets the address)", c.base+path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: read answer: %w", c.base+path, err)
	}
	if res.StatusCode != http.StatusOK {
		var e api.Error
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			msg := e.Error
			if res.StatusCode == http.StatusUnauthorized {
				msg += " (pass --token or set SAGAFLOW_TOKEN)"
			}
			return nil, fmt.Errorf("GET %s: %s: %s", path, res.Status, msg)
		}
		return nil, fmt.Errorf("GET %s: %s", path, res.Status)
	}
	return body, nil
}

func statusCmd(cfg *Config) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status <saga-id>",
		Short: "Show one saga: state, steps with attempts and errors, and its last journal lines (via the HTTP API)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newOpsClient(cmd, cfg.HTTP)
			if err != nil {
				return err
			}
			n, _ := cmd.Flags().GetInt("journal")
			limit := api.JournalLimitMax
			if n > 0 {
				limit = min(n, api.JournalLimitMax)
			}
			path := "/sagas/" + url.PathEscape(args[0]) + "?journal_limit=" + fmt.Sprint(limit)
			body, err := c.get(cmd.Context(), path)
			if err != nil {
				return err
			}
			if j, _ := cmd.Flags().GetBool("json"); j {
				_, err := cmd.OutOrStdout().Write(safeJSON(body))
				return err
			}
			var sv api.SagaView
			if err := json.Unmarshal(body, &sv); err != nil {
				return fmt.Errorf("saga %s: decode the API's answer: %w", args[0], err)
			}
			// --journal 0: every page of the journal, older pages first
			for n <= 0 && sv.JournalNext != "" {
				body, err := c.get(cmd.Context(), path+"&journal_before="+url.QueryEscape(sv.JournalNext))
				if err != nil {
					return err
				}
				var older api.SagaView
				if err := json.Unmarshal(body, &older); err != nil {
					return fmt.Errorf("saga %s: decode the API's answer: %w", args[0], err)
				}
				if len(older.Journal) == 0 {
					break
				}
				sv.Journal, sv.JournalNext = append(older.Journal, sv.Journal...), older.JournalNext
			}
			return printStatus(cmd.OutOrStdout(), sv, n, time.Now())
		},
	}
	addOpsFlags(cmd)
	cmd.Flags().Int("journal", 10, "how many of the last journal lines to show (0: all)")
	return cmd
}

func listCmd(cfg *Config) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List sagas, newest first, filtered by state, type, step, stuck or business key (via the HTTP API)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newOpsClient(cmd, cfg.HTTP)
			if err != nil {
				return err
			}
			q := url.Values{}
			for _, f := range []string{"state", "type", "step", "older-than", "cursor", "aggregate-id", "idempotency-key"} {
				if s, _ := cmd.Flags().GetString(f); s != "" {
					q.Set(strings.ReplaceAll(f, "-", "_"), s)
				}
			}
			if s, _ := cmd.Flags().GetBool("stuck"); s {
				q.Set("stuck", "true")
			}
			if n, _ := cmd.Flags().GetInt("limit"); n > 0 {
				q.Set("limit", fmt.Sprint(n))
			}
			all, _ := cmd.Flags().GetBool("all")
			asJSON, _ := cmd.Flags().GetBool("json")
			var page struct {
				Sagas []api.SagaView `json:"sagas"`
				Next  string         `json:"next"`
			}
			var rows []api.SagaView
			for {
				body, err := c.get(cmd.Context(), "/sagas?"+q.Encode())
				if err != nil {
					return err
				}
				if asJSON && !all {
					_, err := cmd.OutOrStdout().Write(safeJSON(body))
					return err
				}
				page.Sagas, page.Next = nil, ""
				if err := json.Unmarshal(body, &page); err != nil {
					return fmt.Errorf("list sagas: decode the API's answer: %w", err)
				}
				rows = append(rows, page.Sagas...)
				if !all || page.Next == "" {
					break
				}
				q.Set("cursor", page.Next)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"sagas": rows}, true)
			}
			next := ""
			if !all {
				next = page.Next
			}
			return printList(cmd.OutOrStdout(), rows, next, time.Now())
		},
	}
	addOpsFlags(cmd)
	f := cmd.Flags()
	f.Bool("stuck", false, "only sagas that need an operator: failed, flagged, past their deadline or unmoved for a minute")
	f.String("state", "", "running, compensating, completed, compensated or failed")
	f.String("type", "", "saga type")
	f.String("step", "", "open sagas whose active step is this one")
	f.String("older-than", "", "only sagas created longer ago than this duration (e.g. 10m)")
	f.String("aggregate-id", "", "only sagas of this business key (e.g. the order id)")
	f.String("idempotency-key", "", "only sagas started with this idempotency key")
	f.Int("limit", 0, "sagas per page (default 50, at most 500)")
	f.String("cursor", "", "continue from a previous page")
	f.Bool("all", false, "follow every page")
	return cmd
}

// printList writes sagas as aligned columns.
func printList(w io.Writer, sagas []api.SagaView, next string, now time.Time) error {
	if len(sagas) == 0 {
		_, err := fmt.Fprintln(w, "no saga matches")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTYPE\tSTATE\tSTEP\tAGE\tMOVED\tFLAG")
	for _, s := range sagas {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s ago\t%s\n", s.ID, safe(s.Type), safe(string(s.State)), safe(dash(s.CurrentStep)),
			ago(now.Sub(s.CreatedAt)), ago(now.Sub(s.UpdatedAt)), safe(s.Flag))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		_, err := fmt.Fprintf(w, "more: --cursor %s (or --all)\n", safe(next))
		return err
	}
	return nil
}

// printStatus writes one saga: facts, a step table and the last n journal
// lines (all when n <= 0).
func printStatus(w io.Writer, s api.SagaView, n int, now time.Time) error {
	fmt.Fprintf(w, "saga     %s\n", s.ID)
	fmt.Fprintf(w, "type     %s (definition v%d)\n", safe(s.Type), s.DefVersion)
	state := string(s.State)
	if s.Flag != "" {
		state += "  FLAG: " + s.Flag
	}
	fmt.Fprintf(w, "state    %s\n", safe(state))
	if s.CurrentStep != "" {
		fmt.Fprintf(w, "step     %s\n", safe(s.CurrentStep))
	}
	fmt.Fprintf(w, "order    aggregate %s, idempotency key %s\n", safe(s.AggregateID), safe(s.IdempotencyKey))
	fmt.Fprintf(w, "created  %s (%s ago)\n", s.CreatedAt.UTC().Format(time.RFC3339), ago(now.Sub(s.CreatedAt)))
	if s.FinishedAt != nil {
		fmt.Fprintf(w, "finished %s (took %s)\n", s.FinishedAt.UTC().Format(time.RFC3339), ago(s.FinishedAt.Sub(s.CreatedAt)))
	}
	if s.NextWakeup != nil {
		fmt.Fprintf(w, "timer    %s\n", s.NextWakeup.UTC().Format(time.RFC3339))
	}
	if len(s.ActiveSteps) > 1 {
		// a parallel group's members in flight, side by side
		fmt.Fprintf(w, "active   %s\n", safe(strings.Join(s.ActiveSteps, " | ")))
	}
	for _, wv := range s.WaitingFor {
		deadline := "no deadline"
		if wv.DeadlineAt != nil {
			deadline = "until " + wv.DeadlineAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "waiting  event %s at step %s (%s)\n", safe(wv.Event), safe(wv.Step), deadline)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tSTEP\tKIND\tSTATE\tATTEMPTS\tTOOK\tCOMPENSATION\tLAST ERROR")
	for i, st := range s.Steps {
		name := st.Name
		if st.Pivot {
			name += " [pivot]"
		}
		if st.Name == s.CurrentStep || slices.Contains(s.ActiveSteps, st.Name) {
			name = "> " + name
		}
		kind := string(st.Kind)
		if st.Group != "" {
			kind += " | group " + st.Group // members side by side
		}
		comp := "-"
		if st.CompStartedAt != nil {
			comp = fmt.Sprintf("%d attempt(s)", st.CompAttempts)
			if st.CompFinishedAt != nil {
				comp += ", took " + ago(st.CompFinishedAt.Sub(*st.CompStartedAt))
			}
		}
		end := st.FinishedAt
		if end == nil && st.State != saga.StepRunning && st.State != saga.StepRetrying {
			end = st.CompStartedAt // an abandoned forward ends where its compensation starts
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", i+1, safe(name), safe(kind), safe(string(st.State)), st.Attempts, took(st.StartedAt, end, now), comp, dash(oneLine(st.LastError)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	j := s.Journal
	total := max(s.JournalTotal, len(j))
	if n > 0 && len(j) > n {
		j = j[len(j)-n:]
	}
	if len(j) < total {
		fmt.Fprintf(w, "\njournal (last %d of %d)\n", len(j), total)
	} else {
		fmt.Fprintf(w, "\njournal (%d)\n", len(j))
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tEVENT\tSTEP\tSTATE\tACTOR\tREASON")
	for _, e := range j {
		states := string(e.To)
		if e.From != "" && e.From != e.To {
			states = string(e.From) + " -> " + string(e.To)
		}
		ev := e.Event
		if e.Ignored {
			ev += " (ignored)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.At.UTC().Format("2006-01-02 15:04:05.000"), safe(ev), safe(dash(e.Step)), safe(dash(states)), safe(dash(e.Actor)), dash(oneLine(e.Reason)))
	}
	return tw.Flush()
}

func took(from, to *time.Time, now time.Time) string {
	switch {
	case from == nil:
		return "-"
	case to == nil:
		return ago(now.Sub(*from)) + "+"
	}
	return ago(to.Sub(*from))
}

func ago(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < 48*time.Hour:
		return d.Round(time.Second).String()
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine is s on one line for a table cell: runs of white space as one
// space, at most 120 characters, escaped by safe.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > 120 {
		s = string([]rune(s)[:117]) + "..."
	}
	return safe(s)
}
