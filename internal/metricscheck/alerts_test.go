package metricscheck_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/retention"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/relay"
)

// rulesDir is deploy/prometheus from this package.
var rulesDir = filepath.Join("..", "..", "deploy", "prometheus")

// reconcileMetrics are exported by the reconciler (issue 14, items 1-3),
// built beside these rules; the alerts are written against their names.
var reconcileMetrics = map[string]bool{
	"sagaflow_reconcile_differences":                true,
	"sagaflow_reconcile_last_run_timestamp_seconds": true,
}

// TestAlertRules runs `promtool check rules` on deploy/prometheus/alerts.yml
// and `promtool test rules` on its unit tests (each alert fires on a series
// that should trigger it and stays silent otherwise). A missing promtool
// fails the test.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	pt := promtool(t)
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(pt, args...)
		cmd.Dir = rulesDir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// exportedNames registers every collector of the binaries on a registry
// and returns their metric names (histograms with _bucket, _count, _sum).
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	reg := &recorder{Registry: prometheus.NewRegistry()}
	if _, err := orchestrator.NewMetrics(reg, "sagaflow"); err != nil {
		t.Fatal(err)
	}
	if _, err := inbox.NewMetrics(reg, "sagaflow"); err != nil {
		t.Fatal(err)
	}
	if _, err := relay.NewMetrics(reg, "sagaflow"); err != nil {
		t.Fatal(err)
	}
	if _, err := retention.NewMetrics(reg, "sagaflow"); err != nil {
		t.Fatal(err)
	}
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for _, c := range reg.cs {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			if m := fq.FindStringSubmatch(d.String()); m != nil {
				for _, suffix := range []string{"", "_bucket", "_count", "_sum"} {
					names[m[1]+suffix] = true
				}
			}
		}
	}
	return names
}

// recorder keeps what is registered on it.
type recorder struct {
	*prometheus.Registry
	cs []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.cs = append(r.cs, c)
	return nil
}

// TestAlertRulesUseExportedMetrics fails on a rule naming a metric that no
// collector of the code exports (a typo, a renamed metric), except the
// reconciler's two.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(rulesDir, "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	exported := exportedNames(t)
	if !exported["sagaflow_saga_duration_seconds_bucket"] || !exported["sagaflow_outbox_dead"] {
		t.Fatalf("the collectors' names were not read: %v", exported)
	}
	var unknown []string
	used := map[string]bool{}
	for _, n := range regexp.MustCompile(`\bsagaflow_[a-z_]+`).FindAllString(string(b), -1) {
		used[n] = true
		if !exported[n] && !reconcileMetrics[n] {
			unknown = append(unknown, n)
		}
	}
	sort.Strings(unknown)
	if len(unknown) > 0 {
		t.Errorf("alerts.yml names metrics nothing exports: %v", unknown)
	}
	for n := range reconcileMetrics {
		if !used[n] {
			t.Errorf("alerts.yml has no rule on %s", n)
		}
	}
}
