package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
)

// These tests drive the Node.js participant's operations features: parking
// outbox rows Kafka keeps refusing, and its /metrics endpoint. Not
// parallel, as the other Node tests (see node_secure_test.go).

// TestNodeParticipantParksRefusedOutboxRows: in an outbox made before the
// relay kept attempts (the participant adds its columns), a row to a topic
// that does not exist (the participant's producer never auto-creates one)
// and a row larger than the broker's max.message.bytes are retried and,
// after SAGAFLOW_RELAY_MAX_ATTEMPTS=3, parked dead with attempts 3 and the
// broker's refusal as last_error, while the row after them is published at
// once; parked rows are logged and never published again.
func TestNodeParticipantParksRefusedOutboxRows(t *testing.T) {
	nodeDeps(t)
	brokers := testkit.Brokers(t)
	dbURL := testkit.Database(t)
	name := "parking_" + testkit.RandomSuffix(3)
	replies := name + ".replies"
	ctx := testkit.Context(t, 3*time.Minute)
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	outbox := pgx.Identifier{name, "outbox"}.Sanitize()
	// The outbox as the participant made it before parking existed.
	if _, err := conn.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{name}.Sanitize()+`;
		CREATE TABLE `+outbox+` (id bigserial PRIMARY KEY, topic text NOT NULL, key text NOT NULL, value text NOT NULL,
		headers jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}

	p := startNode(t,
		"SAGAFLOW_KAFKA_BROKERS="+strings.Join(brokers, ","), "SAGAFLOW_DATABASE_URL="+dbURL,
		"SAGAFLOW_PARTICIPANT="+name, "SAGAFLOW_REPLY_TOPIC="+replies, "SAGAFLOW_KAFKA_PARTITIONS=1",
		"SAGAFLOW_RELAY_MAX_ATTEMPTS=3",
	)
	testkit.Eventually(t, time.Minute, "the participant running", func() (bool, error) {
		if err := p.exitedEarly(); err != nil {
			return false, err
		}
		return strings.Contains(p.out.String(), `"msg":"participant running"`), nil
	})
	var cols int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'outbox'
		AND column_name IN ('attempts', 'last_error', 'dead_at')`, name).Scan(&cols); err != nil || cols != 3 {
		t.Fatalf("outbox columns attempts, last_error, dead_at: %d of 3 (%v)", cols, err)
	}

	missing := "missing-" + testkit.RandomSuffix(4)
	big := strings.Repeat("x", 1200*1024) // over kfake's (Kafka's) default max.message.bytes, 1 MiB
	good := "published-" + testkit.RandomSuffix(4)
	var ids [3]int64
	rows, err := conn.Query(ctx, `INSERT INTO `+outbox+` (topic, key, value, headers) VALUES
		($1, 'k1', 'to nowhere', '{}'), ($2, 'k2', $3, '{}'), ($2, 'k3', $4, '{"h":"v"}') RETURNING id`, missing, replies, big, good)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; rows.Next(); i++ {
		if err := rows.Scan(&ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	// The row after the refused ones goes at once, long before they are
	// parked (their retries are 1 s, then 2 s apart).
	testkit.Eventually(t, 20*time.Second, "the valid row published and deleted", func() (bool, error) {
		if err := p.exitedEarly(); err != nil {
			return false, err
		}
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM `+outbox+` WHERE id = $1`, ids[2]).Scan(&n)
		return n == 0, err
	})
	var dead int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+outbox+` WHERE id = ANY($1) AND dead_at IS NOT NULL`, ids[:2]).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if dead != 0 {
		t.Fatalf("%d refused rows already parked when the row after them was published: it waited for them", dead)
	}

	type state struct {
		attempts int
		lastErr  string
		dead     bool
	}
	read := func(id int64) state {
		t.Helper()
		var s state
		var lastErr *string
		if err := conn.QueryRow(ctx, `SELECT attempts, last_error, dead_at IS NOT NULL FROM `+outbox+` WHERE id = $1`, id).Scan(&s.attempts, &lastErr, &s.dead); err != nil {
			t.Fatalf("outbox row %d: %v", id, err)
		}
		if lastErr != nil {
			s.lastErr = *lastErr
		}
		return s
	}
	testkit.Eventually(t, 20*time.Second, "both refused rows parked dead", func() (bool, error) {
		if err := p.exitedEarly(); err != nil {
			return false, err
		}
		return read(ids[0]).dead && read(ids[1]).dead, nil
	})
	for i, want := range []string{"UNKNOWN_TOPIC_OR_PARTITION", "MESSAGE_TOO_LARGE"} {
		s := read(ids[i])
		if s.attempts != 3 || !strings.Contains(s.lastErr, want) {
			t.Errorf("row %d: attempts %d, last_error %q; want 3 and the broker's %s", ids[i], s.attempts, s.lastErr, want)
		}
	}
	if s := read(ids[0]); !strings.Contains(s.lastErr, missing) {
		t.Errorf("row %d: last_error %q does not name topic %s", ids[0], s.lastErr, missing)
	}

	// The valid row is on the reply topic, once.
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: brokers, Topic: replies, Partition: 0, MinBytes: 1, MaxBytes: 4 << 20,
		MaxWait: 100 * time.Millisecond, StartOffset: kafka.FirstOffset,
	})
	defer r.Close()
	m, err := r.ReadMessage(rctx)
	if err != nil {
		t.Fatalf("read %s: %v", replies, err)
	}
	if string(m.Key) != "k3" || string(m.Value) != good || len(m.Headers) != 1 || m.Headers[0].Key != "h" || string(m.Headers[0].Value) != "v" {
		t.Fatalf("first record on %s: key %q value %.40q headers %v; want the valid row (k3, %s, h=v)", replies, m.Key, m.Value, m.Headers, good)
	}

	// Parked rows stay parked: a row written after the parking is claimed
	// and published (the relay has claimed again), and the parked ones got
	// no attempt more and were not published.
	var later int64
	if err := conn.QueryRow(ctx, `INSERT INTO `+outbox+` (topic, key, value, headers) VALUES ($1, 'k4', 'after the parking', '{}') RETURNING id`, replies).Scan(&later); err != nil {
		t.Fatal(err)
	}
	if m, err = r.ReadMessage(rctx); err != nil {
		t.Fatalf("read %s: %v", replies, err)
	}
	if string(m.Key) != "k4" {
		t.Fatalf("second record on %s: key %q (%d bytes); want the row written after the parking (k4), not a parked one", replies, m.Key, len(m.Value))
	}
	testkit.Eventually(t, 20*time.Second, "the row written after the parking deleted after its publish", func() (bool, error) {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM `+outbox+` WHERE id = $1`, later).Scan(&n)
		return n == 0, err
	})
	for _, id := range ids[:2] {
		if s := read(id); s.attempts != 3 || !s.dead {
			t.Errorf("row %d after parking: attempts %d, dead %v; want it left alone", id, s.attempts, s.dead)
		}
	}
	p.stop(t)
	out := p.out.String()
	for i, id := range ids[:2] {
		topic := []string{missing, replies}[i]
		if !strings.Contains(out, fmt.Sprintf(`"level":"warn","msg":"relay: row parked dead after its last publish attempt; needs an operator","outbox_row_id":"%d","topic":"%s"`, id, topic)) {
			t.Errorf("parking of row %d (topic %s) not logged at warn:\n%s", id, topic, out)
		}
	}
}

// TestNodeParticipantMetrics: with SAGAFLOW_METRICS_ADDR, /healthz answers
// ok and /metrics is Prometheus text (version 0.0.4) that expfmt parses and
// promtool accepts: after one command, the success counter is 1, the relay
// counted its reply and the outbox gauges read the schema; a failing
// gauge read leaves the gauge out and counts a scrape error, without
// failing the scrape. SIGTERM closes the server (and its idle keep-alive
// connections) and the process exits 0.
func TestNodeParticipantMetrics(t *testing.T) {
	nodeDeps(t)
	brokers := testkit.Brokers(t)
	dbURL := testkit.Database(t)
	name := "metrics_" + testkit.RandomSuffix(3)
	commands, replies := message.CommandTopic("", name), name+".replies"
	ctx := testkit.Context(t, 3*time.Minute)
	if err := kafkaclient.EnsureTopics(ctx, brokers, 1, 1, commands, commands+".dlq", replies); err != nil {
		t.Fatalf("create topics: %v", err)
	}
	addr := testkit.FreeAddr(t)
	p := startNode(t,
		"SAGAFLOW_KAFKA_BROKERS="+strings.Join(brokers, ","), "SAGAFLOW_DATABASE_URL="+dbURL,
		"SAGAFLOW_PARTICIPANT="+name, "SAGAFLOW_REPLY_TOPIC="+replies, "SAGAFLOW_KAFKA_PARTITIONS=1",
		"SAGAFLOW_METRICS_ADDR="+addr,
	)
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) (*http.Response, string, error) {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp, string(body), err
	}
	testkit.Eventually(t, time.Minute, "/healthz answering", func() (bool, error) {
		if err := p.exitedEarly(); err != nil {
			return false, err
		}
		resp, body, err := get("/healthz")
		if err != nil {
			return false, nil
		}
		if resp.StatusCode != http.StatusOK || body != "ok" {
			return false, fmt.Errorf("/healthz: %d %q, want 200 ok", resp.StatusCode, body)
		}
		return true, nil
	})

	cmd, value := conformanceCommand(t, replies, "metrics-1")
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Balancer: kafkaclient.Balancer(), RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	writeCommand(ctx, t, w, commands, cmd, value)
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: brokers, Topic: replies, Partition: 0, MinBytes: 1, MaxBytes: 1 << 20,
		MaxWait: 100 * time.Millisecond, StartOffset: kafka.FirstOffset,
	})
	defer r.Close()
	for {
		m, err := r.ReadMessage(rctx)
		if err != nil {
			t.Fatalf("no reply on %s: %v (participant exited: %v); its output:\n%s", replies, err, p.exitedErr(), p.out.String())
		}
		if rep, err := message.DecodeReply(m.Value); err == nil && rep.InReplyTo == cmd.MessageID {
			if rep.Outcome != message.Success {
				t.Fatalf("reply %+v, want a success", rep)
			}
			break
		}
	}

	lbl := map[string]string{"participant": name}
	var body string
	var fams map[string]*dto.MetricFamily
	scrape := func() {
		t.Helper()
		resp, b, err := get("/metrics")
		if err != nil {
			t.Fatalf("GET /metrics: %v", err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics: %d, want 200:\n%s", resp.StatusCode, b)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") || !strings.Contains(ct, "version=0.0.4") {
			t.Errorf("/metrics Content-Type %q, want text/plain; version=0.0.4", ct)
		}
		body, fams = b, parseMetrics(t, b)
	}
	// The relay counts its publish after the delete that follows the ack.
	testkit.Eventually(t, 20*time.Second, "the reply counted as published", func() (bool, error) {
		scrape()
		v, ok := sample(fams, "sagaflow_relay_published_total", dto.MetricType_COUNTER, lbl)
		return ok && v == 1, nil
	})
	for _, c := range []struct {
		name   string
		typ    dto.MetricType
		labels map[string]string
		want   float64 // -1: present, any value
	}{
		{"sagaflow_participant_commands_total", dto.MetricType_COUNTER, map[string]string{"participant": name, "outcome": "success"}, 1},
		{"sagaflow_participant_commands_total", dto.MetricType_COUNTER, map[string]string{"participant": name, "outcome": "failure"}, 0},
		{"sagaflow_inbox_duplicates_total", dto.MetricType_COUNTER, lbl, -1}, // a rebalance may redeliver the command
		{"sagaflow_dlq_messages_total", dto.MetricType_COUNTER, map[string]string{"participant": name, "reason": "invalid_message"}, 0},
		{"sagaflow_relay_publish_errors_total", dto.MetricType_COUNTER, lbl, -1}, // a transient broker error may come first
		{"sagaflow_relay_parked_total", dto.MetricType_COUNTER, lbl, 0},
		{"sagaflow_retention_purged_total", dto.MetricType_COUNTER, map[string]string{"participant": name, "table": name + ".inbox"}, 0},
		{"sagaflow_outbox_pending", dto.MetricType_GAUGE, lbl, 0},
		{"sagaflow_outbox_dead", dto.MetricType_GAUGE, lbl, 0},
		{"sagaflow_node_scrape_errors_total", dto.MetricType_COUNTER, lbl, 0},
	} {
		v, ok := sample(fams, c.name, c.typ, c.labels)
		if !ok || (c.want >= 0 && v != c.want) {
			t.Errorf("%s%v: %v (present %v), want %v; scrape:\n%s", c.name, c.labels, v, ok, c.want, body)
		}
	}
	promtoolCheck(t, body)

	// A gauge read that fails (the outbox is away) leaves the gauges out
	// and counts a scrape error; the scrape still answers 200.
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `ALTER TABLE `+pgx.Identifier{name, "outbox"}.Sanitize()+` RENAME TO outbox_away`); err != nil {
		t.Fatal(err)
	}
	scrape()
	if _, err := conn.Exec(ctx, `ALTER TABLE `+pgx.Identifier{name, "outbox_away"}.Sanitize()+` RENAME TO outbox`); err != nil {
		t.Fatal(err)
	}
	if v, ok := sample(fams, "sagaflow_node_scrape_errors_total", dto.MetricType_COUNTER, lbl); !ok || v != 1 {
		t.Errorf("sagaflow_node_scrape_errors_total after a failed gauge read: %v (present %v), want 1:\n%s", v, ok, body)
	}
	if _, ok := sample(fams, "sagaflow_outbox_pending", dto.MetricType_GAUGE, lbl); ok {
		t.Errorf("sagaflow_outbox_pending reported though its read failed:\n%s", body)
	}
	if v, ok := sample(fams, "sagaflow_participant_commands_total", dto.MetricType_COUNTER, map[string]string{"participant": name, "outcome": "success"}); !ok || v != 1 {
		t.Errorf("the counters are missing from a scrape whose gauge read failed:\n%s", body)
	}
	promtoolCheck(t, body)
	scrape()
	if _, ok := sample(fams, "sagaflow_outbox_pending", dto.MetricType_GAUGE, lbl); !ok {
		t.Errorf("sagaflow_outbox_pending missing once the outbox is back:\n%s", body)
	}

	// SIGTERM closes the server though the client keeps an idle
	// keep-alive connection to it: status 0 within the stop timeout (a
	// server left open would hold the process until its 10 s forced exit,
	// status 1).
	p.stop(t)
	if !strings.Contains(p.out.String(), `"msg":"metrics served","addr":"`+addr+`"`) {
		t.Errorf("the participant did not log where it served metrics:\n%s", p.out.String())
	}
}

// TestNodeMetricsRegistryEscapes: the registry of lib/metrics.js escapes
// label values (backslash, double quote, newline) and HELP text as the text
// format wants, so expfmt reads the values back as they were.
func TestNodeMetricsRegistryEscapes(t *testing.T) {
	nodeDeps(t)
	const value = "a\"b\\c\nd é"
	script := `const { Registry } = require('./lib/metrics');
const r = new Registry();
const c = r.counter('t_escaped_total', 'help with \\ backslash\nand newline', ['v']);
c.inc({ v: process.argv[1] }, 2);
r.gauge('t_plain', 'no labels').set({}, 1.5);
r.text().then((s) => process.stdout.write(s));`
	cmd := exec.Command("node", "-e", script, value)
	cmd.Dir = nodeDir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	fams := parseMetrics(t, string(out))
	if v, ok := sample(fams, "t_escaped_total", dto.MetricType_COUNTER, map[string]string{"v": value}); !ok || v != 2 {
		t.Fatalf("t_escaped_total{v=%q}: %v (present %v), want 2:\n%s", value, v, ok, out)
	}
	if h := fams["t_escaped_total"].GetHelp(); h != "help with \\ backslash\nand newline" {
		t.Errorf("HELP read back as %q", h)
	}
	if v, ok := sample(fams, "t_plain", dto.MetricType_GAUGE, map[string]string{}); !ok || v != 1.5 {
		t.Errorf("t_plain: %v (present %v), want 1.5", v, ok)
	}
	promtoolCheck(t, string(out))
}

// TestNodeParticipantRefusesBadOpsSettings: a bad SAGAFLOW_METRICS_ADDR or
// SAGAFLOW_RELAY_MAX_ATTEMPTS, or a metrics address already in use, stops
// the participant at start, naming the variable (before it connects to
// anything: the addresses here answer nothing).
func TestNodeParticipantRefusesBadOpsSettings(t *testing.T) {
	nodeDeps(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	base := []string{
		"SAGAFLOW_KAFKA_BROKERS=" + testkit.FreeAddr(t), "SAGAFLOW_PARTICIPANT=refused",
		"SAGAFLOW_DATABASE_URL=postgres://postgres@" + testkit.FreeAddr(t) + "/postgres?sslmode=disable",
	}
	for _, c := range []struct {
		name string
		env  []string
		want []string
	}{
		{"metrics address without port", []string{"SAGAFLOW_METRICS_ADDR=nonsense"}, []string{"SAGAFLOW_METRICS_ADDR", "nonsense"}},
		{"metrics port out of range", []string{"SAGAFLOW_METRICS_ADDR=127.0.0.1:70000"}, []string{"SAGAFLOW_METRICS_ADDR", "70000"}},
		{"metrics address in use", []string{"SAGAFLOW_METRICS_ADDR=" + busy.Addr().String()}, []string{"SAGAFLOW_METRICS_ADDR", "cannot listen"}},
		{"max attempts zero", []string{"SAGAFLOW_RELAY_MAX_ATTEMPTS=0"}, []string{"SAGAFLOW_RELAY_MAX_ATTEMPTS", "over 0"}},
		{"max attempts not a number", []string{"SAGAFLOW_RELAY_MAX_ATTEMPTS=x"}, []string{"SAGAFLOW_RELAY_MAX_ATTEMPTS", "whole number"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			requireRefused(t, startNode(t, append(append([]string{}, base...), c.env...)...), append([]string{"participant failed"}, c.want...)...)
		})
	}
}

// parseMetrics parses a scrape in the text format (legacy metric and label
// names, as format 0.0.4 has them) or fails the test.
func parseMetrics(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("expfmt: %v\n%s", err, body)
	}
	return fams
}

// sample returns the value of the series of family name with exactly
// labels, requiring the family's type to be typ.
func sample(fams map[string]*dto.MetricFamily, name string, typ dto.MetricType, labels map[string]string) (float64, bool) {
	f, ok := fams[name]
	if !ok || f.GetType() != typ {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		match := true
		for _, l := range m.GetLabel() {
			if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
				match = false
			}
		}
		if !match {
			continue
		}
		if typ == dto.MetricType_COUNTER {
			return m.GetCounter().GetValue(), true
		}
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

// promtoolCheck runs `promtool check metrics` on body: required under
// CI=true (scripts/test.sh installs it), skipped otherwise when missing.
func promtoolCheck(t *testing.T, body string) {
	t.Helper()
	if _, err := exec.LookPath("promtool"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool is not on PATH (install: apt-get install -y prometheus): %v", err)
		}
		t.Logf("promtool is not on PATH; not checked (this fails under CI=true)")
		return
	}
	pt := exec.Command("promtool", "check", "metrics")
	pt.Stdin = strings.NewReader(body)
	if out, err := pt.CombinedOutput(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("promtool: %v", err)
		}
		t.Errorf("promtool check metrics: %v\n%s\nscrape:\n%s", err, out, body)
	}
}

// counterValue scrapes http://addr/metrics and returns the counter name of
// the participant (no other label), or fails the test.
func counterValue(t *testing.T, addr, name, participant string) float64 {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	v, ok := sample(parseMetrics(t, string(body)), name, dto.MetricType_COUNTER, map[string]string{"participant": participant})
	if !ok {
		t.Fatalf("no counter %s{participant=%q} in:\n%s", name, participant, body)
	}
	return v
}
