package cli

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
)

// clearEnv unsets every SAGAFLOW_* variable of Keys and KAFKA_BROKERS for
// the test, so the defaults are what the code says.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, k := range Keys {
		t.Setenv("SAGAFLOW_"+strings.ToUpper(strings.ReplaceAll(k.Name, ".", "_")), "")
	}
	t.Setenv("KAFKA_BROKERS", "")
}

// Every key of the documented table has exactly one field of Config.
func TestConfigBindsEveryKeyOnce(t *testing.T) {
	t.Parallel()
	bound := map[string]int{}
	for _, b := range (&Config{}).bindings() {
		bound[b.key]++
	}
	for _, k := range Keys {
		if bound[k.Name] != 1 {
			t.Errorf("key %s is bound to %d fields of Config, want 1", k.Name, bound[k.Name])
		}
		delete(bound, k.Name)
	}
	for key := range bound {
		t.Errorf("Config binds %s, which is not in Keys (docs/configuration.md would miss it)", key)
	}
}

// With nothing set, Load gives every field the default of Keys.
func TestLoadDefaults(t *testing.T) {
	clearEnv(t)
	c, err := Load(newViper())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Keys {
		if got, want := c.effective(k.Name), fmt.Sprint(k.Default); got != want {
			t.Errorf("%s = %q, want the default %q", k.Name, got, want)
		}
	}
	if c.HTTP.Addr != "127.0.0.1:8080" || c.Orchestrator.TimerInterval != orchestrator.TimerIntervalDefault || !c.Retention.Enabled || len(c.Kafka.Brokers) != 0 {
		t.Errorf("defaults not in the fields: %+v", c)
	}
}

// A file, the environment above it, and the per-step overrides, sorted.
func TestLoadFileEnvironmentAndOverrides(t *testing.T) {
	clearEnv(t)
	t.Setenv("SAGAFLOW_HTTP_MAX_CONNECTIONS", "17")
	t.Setenv("KAFKA_BROKERS", "b1:9092, b2:9092")
	v := newViper()
	v.SetConfigType("yaml")
	err := v.ReadConfig(strings.NewReader(`
http:
  max_connections: 5
  read_timeout: 3s
kafka:
  tls:
    enabled: true
log:
  level: WARN
participants:
  http_addr: 127.0.0.1:0
demo:
  orders: 7
sagas:
  place-order:
    steps:
      lock-coupon:
        retry:
          max_attempts: 4
      charge-payment:
        timeout: 3s
        accepted_deadline: 2h
        retry:
          multiplier: 1.5
`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(v)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case c.HTTP.MaxConnections != 17:
		t.Errorf("http.max_connections = %d, want 17 (environment over file)", c.HTTP.MaxConnections)
	case c.HTTP.ReadTimeout != 3*time.Second || !c.Kafka.TLS.Enabled || c.Log.Level != "WARN" || c.Demo.Orders != 7:
		t.Errorf("file values not decoded: %+v", c)
	case strings.Join(c.Kafka.Brokers, ",") != "b1:9092,b2:9092":
		t.Errorf("brokers %v, want KAFKA_BROKERS when kafka.brokers is empty", c.Kafka.Brokers)
	case c.Participants.HTTPAddr != "127.0.0.1:0":
		t.Errorf("participants.http_addr = %q", c.Participants.HTTPAddr)
	}
	// kafka.brokers as a YAML list or a string, both over KAFKA_BROKERS.
	for _, body := range []string{"kafka:\n  brokers: [k1:9092, k2:9092]\n", "kafka:\n  brokers: k1:9092,k2:9092\n"} {
		v := newViper()
		v.SetConfigType("yaml")
		if err := v.ReadConfig(strings.NewReader(body)); err != nil {
			t.Fatal(err)
		}
		c, err := Load(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(c.Kafka.Brokers, ","); got != "k1:9092,k2:9092" {
			t.Errorf("brokers from %q: %s", body, got)
		}
	}
	want := []StepOverride{
		{Type: "place-order", Step: "charge-payment", StepOverride: saga.StepOverride{Timeout: 3 * time.Second, AcceptedDeadline: 2 * time.Hour, Retry: saga.RetryPolicy{Multiplier: 1.5}}},
		{Type: "place-order", Step: "lock-coupon", StepOverride: saga.StepOverride{Retry: saga.RetryPolicy{MaxAttempts: 4}}},
	}
	if fmt.Sprint(c.Steps) != fmt.Sprint(want) {
		t.Errorf("overrides %+v, want %+v", c.Steps, want)
	}
	if _, err := c.registry(); err != nil {
		t.Errorf("registry with the overrides: %v", err)
	}
}

// A bad value fails Load with an error that names its key.
func TestLoadRefusesBadValues(t *testing.T) {
	clearEnv(t)
	for _, c := range []struct {
		name string
		set  map[string]any
		says string
	}{
		{"bad duration", map[string]any{"http.read_timeout": "soon"}, `config: http.read_timeout: want a duration such as 500ms or 2m, got "soon"`},
		{"zero duration", map[string]any{"retention.interval": "0s"}, "config: retention.interval: must be a positive duration, got 0s"},
		{"negative duration", map[string]any{"shutdown.timeout": "-1s"}, "config: shutdown.timeout: must be a positive duration, got -1s"},
		{"not a number", map[string]any{"database.max_conns": "many"}, `config: database.max_conns: want an integer, got "many"`},
		{"negative number", map[string]any{"http.max_connections": -1}, "config: http.max_connections: must be at least 1, got -1"},
		{"negative batch", map[string]any{"orchestrator.inbox_batch": -5}, "config: orchestrator.inbox_batch: must be at least 1, got -5"},
		{"not a bool", map[string]any{"relay.keep_sent": "maybe"}, `config: relay.keep_sent: want true or false, got "maybe"`},
		{"unknown log level", map[string]any{"log.level": "loud"}, `config: log.level: want debug, info, warn or error, got "loud"`},
		{"unknown log format", map[string]any{"log.format": "xml"}, `config: log.format: want text or json, got "xml"`},
		{"unknown SASL mechanism", map[string]any{"kafka.sasl.mechanism": "GSSAPI", "kafka.sasl.username": "u"}, "kafka.sasl.mechanism is \"GSSAPI\""},
		{"rate above 1", map[string]any{"demo.decline_rate": 1.5}, "config: demo.decline_rate: must be between 0 and 1, got 1.5"},
		{"no orders", map[string]any{"demo.orders": 0}, "config: demo.orders: must be at least 1, got 0"},
		{"bad reply topic", map[string]any{"kafka.reply_topic": "no spaces"}, "config: kafka.reply_topic: must be a Kafka topic name"},
		{"bad schema", map[string]any{"orchestrator.schema": "Bad-Schema"}, `config: orchestrator.schema: must match`},
		{"empty group", map[string]any{"orchestrator.group_id": ""}, "config: orchestrator.group_id: must not be empty"},
		{"write not above handler", map[string]any{"http.write_timeout": "5s"}, "config: http.write_timeout: must be longer than http.handler_timeout 20s"},
		{"step timeout", map[string]any{"sagas.place-order.steps.charge-payment.timeout": "soon"}, `config: sagas.place-order.steps.charge-payment.timeout: want a positive duration, got "soon"`},
		{"step multiplier", map[string]any{"sagas.place-order.steps.charge-payment.retry.multiplier": 0.5}, `config: sagas.place-order.steps.charge-payment.retry.multiplier: must be at least 1, got "0.5"`},
		{"step attempts", map[string]any{"sagas.place-order.steps.charge-payment.retry.max_attempts": 0}, `config: sagas.place-order.steps.charge-payment.retry.max_attempts: must be at least 1, got "0"`},
		{"step accepted deadline", map[string]any{"sagas.place-order.steps.charge-payment.accepted_deadline": "-1h"}, `config: sagas.place-order.steps.charge-payment.accepted_deadline: want a positive duration, got "-1h"`},
		{"payment provider not a URL", map[string]any{"participants.payment_provider_url": "provider:9000"}, `config: participants.payment_provider_url: must be an http:// or https:// URL`},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newViper()
			for k, val := range c.set {
				v.Set(k, val)
			}
			_, err := Load(v)
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("Load with %v: %v, want an error saying %q", c.set, err, c.says)
			}
		})
	}
}

// Through the environment too: a bad value there names the key.
func TestLoadRefusesBadEnvironment(t *testing.T) {
	for env, want := range map[string]string{
		"SAGAFLOW_HTTP_IDLE_TIMEOUT": `config: http.idle_timeout: want a duration such as 500ms or 2m, got "a while"`,
		"SAGAFLOW_LOG_LEVEL":         `config: log.level: want debug, info, warn or error, got "a while"`,
		"SAGAFLOW_DEMO_SEED":         `config: demo.seed: want an integer, got "a while"`,
	} {
		clearEnv(t)
		t.Setenv(env, "a while")
		if _, err := Load(newViper()); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load with %s: %v, want an error saying %q", env, err, want)
		}
	}
}

// config --effective prints what is in force even when serve would refuse
// it; a value that does not decode is still an error.
func TestConfigCommandDecodesWithoutChecking(t *testing.T) {
	clearEnv(t)
	t.Setenv("SAGAFLOW_LOG_LEVEL", "chatty")
	var out strings.Builder
	root := Root(&out, &out)
	root.SetArgs([]string{"config", "--effective"})
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), "| `log.level` | `chatty` |") {
		t.Fatalf("config --effective: %v:\n%s", err, out.String())
	}
	t.Setenv("SAGAFLOW_HTTP_IDLE_TIMEOUT", "a while")
	root = Root(&out, &out)
	root.SetArgs([]string{"config", "--effective"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "config: http.idle_timeout") {
		t.Fatalf("config --effective with an undecodable value: %v", err)
	}
}

// An unknown step is refused when the overrides meet the registry.
func TestRegistryRefusesUnknownStep(t *testing.T) {
	clearEnv(t)
	v := newViper()
	v.Set("sagas.place-order.steps.charge-paymentx.timeout", "3s")
	c, err := Load(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.registry(); err == nil || !strings.Contains(err.Error(), "config sagas.place-order.steps.charge-paymentx: ") {
		t.Fatalf("registry: %v, want the unknown step named", err)
	}
}

func TestOperatorTokensParse(t *testing.T) {
	for _, tc := range []struct {
		in      []string
		want    map[string]string
		wantErr string
	}{
		{nil, nil, ""},
		{[]string{"alice:tok-a", " bob:tok:b "}, map[string]string{"alice": "tok-a", "bob": "tok:b"}, ""},
		{[]string{"alice"}, nil, "entry 1: want name:token"},
		{[]string{"alice:a", ":b"}, nil, "entry 2: want name:token"},
		{[]string{"alice:a", "alice:b"}, nil, `entry 2: operator "alice" is given twice`},
	} {
		got, err := HTTPConfig{OperatorTokens: tc.in}.operators()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "tok-") {
				t.Errorf("%q: err %v, want one containing %q and no token", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%q: %v %v, want %v", tc.in, got, err, tc.want)
		}
	}
}
