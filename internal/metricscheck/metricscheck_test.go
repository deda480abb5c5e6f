package metricscheck_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/internal/metricscheck"
)

const sample = `# HELP sagaflow_sagas_started_total Sagas started, by type.
# TYPE sagaflow_sagas_started_total counter
sagaflow_sagas_started_total{type="place-order"} 12
sagaflow_sagas_started_total{type="other"} 3
sagaflow_late_replies_total{type="place-order"} 0
sagaflow_outbox_pending{outbox="sagaflow"} 0
sagaflow_step_duration_seconds_bucket{action="forward",le="+Inf",outcome="success",step="a b"} 4
go_goroutines 17
`

func TestParseAndCheck(t *testing.T) {
	t.Parallel()
	s, err := metricscheck.Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Sum("sagaflow_sagas_started_total"); got != 15 {
		t.Errorf("Sum(started) = %v, want 15", got)
	}
	if got := s.Sum("sagaflow_sagas_started_total", `type="other"`); got != 3 {
		t.Errorf("Sum(started, other) = %v, want 3", got)
	}
	if got := s.Sum("sagaflow_step_duration_seconds_bucket", `step="a b"`); got != 4 {
		t.Errorf("Sum(bucket with a space in a label) = %v, want 4", got)
	}
	if !s.Has("go_goroutines") || s.Has("nope") {
		t.Errorf("Has is wrong: %v", s)
	}
	bad := metricscheck.Check(s, []metricscheck.Requirement{
		{Name: "sagaflow_sagas_started_total", NonZero: true},
		{Name: "sagaflow_late_replies_total", NonZero: true, What: "late"},
		{Name: "sagaflow_outbox_pending"},
		{Name: "sagaflow_dlq_messages_total", What: "dlq"},
	})
	if len(bad) != 2 || !strings.Contains(bad[0], "late_replies_total (late) is zero") || !strings.Contains(bad[1], "dlq_messages_total (dlq) is missing") {
		t.Errorf("Check = %q, want the zero late replies and the missing DLQ counter", bad)
	}
	if _, err := metricscheck.Parse(strings.NewReader("x{a=\"1\" 3\n")); err == nil {
		t.Error("Parse accepted unbalanced braces")
	}
	if _, err := metricscheck.Parse(strings.NewReader("x abc\n")); err == nil {
		t.Error("Parse accepted a non-numeric value")
	}
}

func TestDashboardIsWellFormed(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "sagaflow.json"))
	if err != nil {
		t.Fatal(err)
	}
	names, err := metricscheck.DashboardMetrics(b)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, r := range metricscheck.Required {
		known[strings.TrimSuffix(r.Name, "_count")] = true
	}
	for _, n := range names {
		base := n
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suf)
		}
		if !known[base] && base != "sagaflow_relay_publish_errors_total" {
			t.Errorf("dashboard uses %s, not among the documented metrics", n)
		}
	}
	for _, bad := range []string{`{`, `{"title":"x","panels":[]}`, `{"title":"x","panels":[{"title":"p","type":"timeseries"}]}`,
		`{"title":"x","panels":[{"title":"p","type":"timeseries","targets":[{"expr":"up"}]}]}`} {
		if _, err := metricscheck.DashboardMetrics([]byte(bad)); err == nil {
			t.Errorf("DashboardMetrics(%s) accepted a broken dashboard", bad)
		}
	}
}
