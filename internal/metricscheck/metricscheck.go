package metricscheck

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Sample is one line of a scrape.
type Sample struct {
	Name   string
	Labels string // the raw label set without braces, "" for none
	Value  float64
}

// Scrape holds the samples of one exposition, by sample name (histogram
// series appear as <name>_bucket, <name>_sum and <name>_count).
type Scrape map[string][]Sample

// Parse reads the Prometheus text format. Comment lines are skipped.
func Parse(r io.Reader) (Scrape, error) {
	s := Scrape{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, labels, rest := line, "", ""
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				return nil, fmt.Errorf("metricscheck: line %d: unbalanced braces: %q", n, line)
			}
			name, labels, rest = line[:i], line[i+1:j], strings.TrimSpace(line[j+1:])
		} else if i := strings.IndexByte(line, ' '); i >= 0 {
			name, rest = line[:i], strings.TrimSpace(line[i+1:])
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return nil, fmt.Errorf("metricscheck: line %d: no value: %q", n, line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metricscheck: line %d: value %q: %w", n, f[0], err)
		}
		s[name] = append(s[name], Sample{Name: name, Labels: labels, Value: v})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("metricscheck: read scrape: %w", err)
	}
	return s, nil
}

// Has reports whether the scrape has at least one sample named name.
func (s Scrape) Has(name string) bool { return len(s[name]) > 0 }

// Sum adds the values of every sample named name whose label set contains
// each of the given `key="value"` pairs.
func (s Scrape) Sum(name string, match ...string) float64 {
	var t float64
next:
	for _, smp := range s[name] {
		for _, m := range match {
			if !strings.Contains(smp.Labels, m) {
				continue next
			}
		}
		t += smp.Value
	}
	return t
}

// Requirement is a metric sagaflow exposes.
type Requirement struct {
	// Name of the sample to look for (for a histogram, its _count).
	Name string
	// NonZero: the demo workload moves it, so its sum must be > 0.
	NonZero bool
	// What it is, for the report.
	What string
}

// Required lists the metrics the operator documentation promises: sagaflow's
// own in the one namespace "sagaflow", and the standard process_* and go_*. Sagas completed, compensated and failed are
// sagaflow_sagas_finished_total{type,state}.
var Required = []Requirement{
	{"sagaflow_sagas_started_total", true, "sagas started, by type"},
	{"sagaflow_sagas_finished_total", true, "sagas completed/compensated/failed, by type and state"},
	{"sagaflow_saga_transitions_total", true, "transitions applied, by type and event"},
	{"sagaflow_step_duration_seconds_count", true, "step duration histogram, by step, action, outcome"},
	{"sagaflow_saga_duration_seconds_count", true, "saga duration histogram (start to terminal state), by type and state"},
	{"sagaflow_sagas_in_flight", false, "non-terminal sagas, by state"},
	{"sagaflow_outbox_pending", false, "unsent outbox rows, by outbox schema"},
	{"sagaflow_outbox_oldest_unsent_seconds", false, "age of the oldest unsent outbox row, by outbox schema"},
	{"sagaflow_outbox_dead", false, "outbox rows parked as dead"},
	{"sagaflow_relay_published_total", true, "rows published by the relays"},
	{"sagaflow_relay_publish_seconds_count", true, "relay batch publish latency histogram"},
	{"sagaflow_relay_batch_size_count", true, "relay batch size histogram"},
	{"sagaflow_inbox_messages_total", true, "messages handled by inbox consumers"},
	{"sagaflow_inbox_duplicates_total", true, "redelivered messages skipped by the inbox"},
	{"sagaflow_inbox_record_wait_seconds_count", true, "inbox record wait histogram (lag in time)"},
	{"sagaflow_inbox_batch_seconds_count", true, "inbox batch time histogram"},
	{"sagaflow_dlq_messages_total", true, "messages sent to a dead-letter topic"},
	{"sagaflow_late_replies_total", true, "replies for a step no longer awaited"},
	// Stray replies (answering a command never sent) are dead-lettered,
	// not counted here; what is left (a start of a started saga, a timer
	// in the wrong step state) the workload does not produce.
	{"sagaflow_illegal_transitions_total", false, "events the transition table refuses"},
	{"sagaflow_step_retries_total", true, "commands re-sent, by step and action"},
	{"sagaflow_retention_purged_total", true, "rows deleted by retention, by table"},
	{"sagaflow_build_info", true, "build version, revision and Go version (always 1)"},
	// Prometheus' standard collectors, under their usual unprefixed names.
	{"process_cpu_seconds_total", false, "CPU time of the process"},
	{"process_resident_memory_bytes", true, "resident memory of the process"},
	{"go_goroutines", true, "goroutines of the process"},
}

// Check returns one line per requirement s does not meet.
func Check(s Scrape, reqs []Requirement) []string {
	var bad []string
	for _, r := range reqs {
		switch {
		case !s.Has(r.Name):
			bad = append(bad, fmt.Sprintf("%s (%s) is missing", r.Name, r.What))
		case r.NonZero && s.Sum(r.Name) <= 0:
			bad = append(bad, fmt.Sprintf("%s (%s) is zero", r.Name, r.What))
		}
	}
	return bad
}

var metricName = regexp.MustCompile(`\bsagaflow_[a-zA-Z0-9_]+`)

// DashboardMetrics returns the sorted metric names the queries (targets'
// "expr") of a Grafana dashboard JSON use, panels nested in rows included.
func DashboardMetrics(dashboard []byte) ([]string, error) {
	var d struct {
		Title  string  `json:"title"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(dashboard, &d); err != nil {
		return nil, fmt.Errorf("metricscheck: dashboard JSON: %w", err)
	}
	if d.Title == "" || len(d.Panels) == 0 {
		return nil, fmt.Errorf("metricscheck: dashboard has no title or no panels")
	}
	seen := map[string]bool{}
	var walk func([]panel) error
	walk = func(ps []panel) error {
		for _, p := range ps {
			if p.Type != "row" && len(p.Targets) == 0 {
				return fmt.Errorf("metricscheck: panel %q has no targets", p.Title)
			}
			for _, t := range p.Targets {
				names := metricName.FindAllString(t.Expr, -1)
				if len(names) == 0 {
					return fmt.Errorf("metricscheck: panel %q: expr %q names no sagaflow metric", p.Title, t.Expr)
				}
				for _, n := range names {
					seen[n] = true
				}
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

type panel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}
