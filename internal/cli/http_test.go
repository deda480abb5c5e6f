package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/internal/dburl"
)

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sagaflow.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// config --effective prints the values in force with the tokens and the
// database password redacted, in either form of connection string.
func TestConfigEffectiveRedactsSecrets(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, want string }{
		{"host=db.internal user=orch password=s3cr3t-pw dbname=sagaflow", "host=db.internal user=orch password=xxxxx dbname=sagaflow"},
		{"host=db.internal password='s3cr3t pw' sslmode=require", "host=db.internal password=xxxxx sslmode=require"},
		{"postgres://orch:s3cr3t-pw@db.internal:5432/sagaflow?sslmode=disable", "postgres://orch:xxxxx@db.internal:5432/sagaflow?sslmode=disable"},
	} {
		cfg := writeConfig(t, "database:\n  url: \""+c.url+"\"\nhttp:\n  admin_token: admin-s3cr3t\n  client_token: client-s3cr3t\n  max_connections: 17\nkafka:\n  sasl:\n    password: kafka-s3cr3t\n")
		out, stderr, code := runCLI(t, "config", "--effective", "--config", cfg)
		if code != 0 {
			t.Fatalf("config --effective: exit %d: %s", code, stderr)
		}
		for _, secret := range []string{"s3cr3t"} {
			if strings.Contains(out, secret) {
				t.Errorf("config --effective prints a secret (%q):\n%s", secret, out)
			}
		}
		for _, want := range []string{"| `http.admin_token` | `<redacted>` |", "| `http.client_token` | `<redacted>` |", "| `kafka.sasl.password` | `<redacted>` |", "| `http.max_connections` | `17` |",
			"| `database.url` | `" + c.want + "` |", "| `http.db_max_conns` | `4` |", "| `http.max_data_bytes` | `65536` |"} {
			if !strings.Contains(out, want) {
				t.Errorf("config --effective lacks %q:\n%s", want, out)
			}
		}
	}
	// unset tokens print empty
	out, _, _ := runCLI(t, "config", "--effective")
	if !strings.Contains(out, "| `http.client_token` | `` |") {
		t.Errorf("an unset client token is not printed empty:\n%s", out)
	}
}

// TestConfigEffectiveFailsClosedOnSecrets: config --effective never prints
// a secret: a database URL that does not parse is printed fully redacted
// (it was printed raw, password and all), sslpassword and sslkey are hidden
// in both forms of connection string, a keyword string it cannot read (an
// unterminated quote) is hidden whole, the credentials of any other URL
// (the OTLP endpoint) are hidden, and keys that look like secrets
// (kafka.tls.key_file) print redacted.
func TestConfigEffectiveFailsClosedOnSecrets(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, url, endpoint string
		want                []string
	}{
		{name: "unparsable URL", url: "postgres://orch:s3cr3t%zz@db.internal/sagaflow", want: []string{"| `database.url` | `<redacted: does not parse>` |"}},
		{name: "URL sslpassword", url: "postgres://orch@db.internal/sagaflow?sslmode=verify-full&sslpassword=s3cr3t&sslkey=/etc/s3cr3t.key",
			want: []string{"| `database.url` | `postgres://orch@db.internal/sagaflow?sslmode=verify-full&sslpassword=xxxxx&sslkey=xxxxx` |"}},
		{name: "keyword sslpassword", url: "host=db.internal sslpassword=s3cr3t sslkey='/etc/s3cr3t key' user=orch",
			want: []string{"| `database.url` | `host=db.internal sslpassword=xxxxx sslkey=xxxxx user=orch` |"}},
		{name: "unterminated quote", url: "host='db.internal password=s3cr3t", want: []string{"| `database.url` | `<redacted: does not parse>` |"}},
		{name: "not a connection string", url: "s3cr3t", want: []string{"| `database.url` | `<redacted: does not parse>` |"}},
		{name: "endpoint credentials", url: "host=db", endpoint: "https://otel:s3cr3t@collector:4318/v1/traces?api_key=s3cr3t&x=1#s3cr3t",
			want: []string{"| `tracing.otlp_endpoint` | `https://otel:xxxxx@collector:4318/v1/traces?api_key=xxxxx&x=1#xxxxx` |"}},
		{name: "unparsable endpoint", url: "host=db", endpoint: "http://otel:s3cr3t@[::1", want: []string{"| `tracing.otlp_endpoint` | `<redacted: does not parse>` |"}},
	} {
		yaml := "database:\n  url: \"" + c.url + "\"\nkafka:\n  tls:\n    key_file: /etc/kafka/s3cr3t.pem\n"
		if c.endpoint != "" {
			yaml += "tracing:\n  otlp_endpoint: \"" + c.endpoint + "\"\n"
		}
		out, stderr, code := runCLI(t, "config", "--effective", "--config", writeConfig(t, yaml))
		if code != 0 {
			t.Fatalf("%s: config --effective: exit %d: %s", c.name, code, stderr)
		}
		if strings.Contains(out, "s3cr3t") {
			t.Errorf("%s: config --effective prints a secret:\n%s", c.name, out)
		}
		for _, want := range append(c.want, "| `kafka.tls.key_file` | `<redacted>` |") {
			if !strings.Contains(out, want) {
				t.Errorf("%s: config --effective lacks %q:\n%s", c.name, want, out)
			}
		}
	}
}

func TestRedactConnectionStrings(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"host=h password=secret":                         "host=h password=xxxxx",
		"password=secret host=h":                         "password=xxxxx host=h",
		"host=h password = secret user=u":                "host=h password = xxxxx user=u",
		`host=h password='it\'s secret' user=u`:          "host=h password=xxxxx user=u",
		"host=h PASSWORD=secret":                         "host=h PASSWORD=xxxxx",
		"host=h user=u":                                  "host=h user=u",
		"postgres://u:secret@h/db":                       "postgres://u:xxxxx@h/db",
		"postgresql://u@h/db?password=secret&x=1":        "postgresql://u@h/db?password=xxxxx&x=1",
		"postgres://u@h/db?sslmode=disable":              "postgres://u@h/db?sslmode=disable",
		"host=h password=":                               "host=h password=xxxxx",
		"host=/var/run/postgresql password=a\\ b dbname": "host=/var/run/postgresql password=xxxxx dbname",
	} {
		got := dburl.Redact(in)
		if got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
		if strings.Contains(got, "secret") {
			t.Errorf("Redact(%q) keeps the password: %q", in, got)
		}
	}
}

// serve refuses HTTP settings that cannot work, before it connects to
// anything.
func TestServeRefusesBadHTTPSettings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ yaml, says string }{
		{"http:\n  protect_reads: true\n", "http.protect_reads and http.protect_metrics need http.client_token or http.admin_token"},
		{"http:\n  protect_metrics: true\n", "need http.client_token or http.admin_token"},
		{"http:\n  admin_token: same\n  client_token: same\n", "config: http.client_token: must differ from http.admin_token"},
		{"http:\n  max_data_bytes: 0\n", "config: http.max_data_bytes: must be at least 2, got 0"},
		{"http:\n  db_max_conns: 0\n", "config: http.db_max_conns: must be at least 1, got 0"},
		{"http:\n  write_timeout: 5s\n  handler_timeout: 20s\n", "config: http.write_timeout: must be longer than http.handler_timeout 20s (or a slow answer is cut off without its error), got 5s"},
		{"http:\n  read_timeout: 0s\n", "config: http.read_timeout: must be a positive duration, got 0s"},
		{"http:\n  max_connections: 0\n", "config: http.max_connections: must be at least 1, got 0"},
		{"http:\n  max_header_bytes: 100\n", "config: http.max_header_bytes: must be at least 4096, got 100"},
		{"http:\n  max_connections_per_client: 0\n", "config: http.max_connections_per_client: must be at least 1, got 0"},
		{"http:\n  busy_idle_timeout: 0s\n", "config: http.busy_idle_timeout: must be a positive duration, got 0s"},
		{"http:\n  max_concurrent_reads: 0\n", "config: http.max_concurrent_reads: must be at least 1, got 0"},
		{"http:\n  db_max_conns: 2\n  max_concurrent_reads: 2\n", "config: http.max_concurrent_reads: must be less than http.db_max_conns 2"},
		{"http:\n  health_addr: 127.0.0.1:0\n", "config: http.health_addr: must differ from http.addr"},
	} {
		_, stderr, code := runCLI(t, "serve", "--config", writeConfig(t, c.yaml), "--brokers", "127.0.0.1:1", "--addr", "127.0.0.1:0")
		if code != 1 || !strings.Contains(stderr, c.says) {
			t.Errorf("serve with %q: exit %d, stderr %q; want 1 saying %q", c.yaml, code, stderr, c.says)
		}
	}
}

// TestSASLPlainWithoutTLSRefusedAtStart: serve and participants refuse SASL
// PLAIN without TLS (the password would cross the network in clear) at
// start, before connecting to anything, naming the keys that fix it;
// kafka.sasl.allow_plaintext: true lets it through (it then fails later,
// on the unreachable database, not on the setting).
func TestSASLPlainWithoutTLSRefusedAtStart(t *testing.T) {
	t.Parallel()
	plain := "kafka:\n  sasl:\n    mechanism: plain\n    username: saga\n    password: pw\n"
	for _, cmd := range []string{"serve", "participants"} {
		_, stderr, code := runCLI(t, cmd, "--config", writeConfig(t, plain), "--brokers", "127.0.0.1:1")
		if code != 1 {
			t.Fatalf("%s with PLAIN without TLS: exit %d, want 1: %s", cmd, code, stderr)
		}
		for _, want := range []string{"kafka.sasl.mechanism PLAIN", "kafka.tls.enabled", "kafka.sasl.allow_plaintext"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%s with PLAIN without TLS: stderr %q does not name %s", cmd, stderr, want)
			}
		}
	}
	_, stderr, code := runCLI(t, "migrate", "--config", writeConfig(t, plain+"    allow_plaintext: true\ndatabase:\n  url: postgres://nobody@127.0.0.1:1/none\n"))
	if code == 0 || strings.Contains(stderr, "allow_plaintext") || !strings.Contains(stderr, "127.0.0.1") {
		t.Fatalf("PLAIN without TLS but allowed: exit %d, stderr %q; want past the setting, failing on the unreachable database", code, stderr)
	}
}
