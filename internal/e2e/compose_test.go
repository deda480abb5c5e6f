package e2e

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/viper"

	"github.com/sagaflow/sagaflow/internal/cli"
)

// TestComposeFile checks docker-compose.yml (which cannot run here: no
// Docker) for what can be checked without Docker: it parses, it has the four
// services with the settings they need, and every SAGAFLOW_* variable it
// sets is a configuration key the binary knows.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	f, err := os.Open("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v := viper.New()
	v.SetConfigType("yaml")
	if err := v.ReadConfig(f); err != nil {
		t.Fatalf("docker-compose.yml does not parse: %v", err)
	}
	for _, s := range []string{"postgres", "kafka", "orchestrator", "participants"} {
		if !v.IsSet("services." + s) {
			t.Errorf("service %s missing", s)
		}
	}
	if got := v.GetString("services.postgres.image"); !strings.HasPrefix(got, "postgres:15") {
		t.Errorf("postgres image %q, want postgres:15", got)
	}
	if got := v.GetString("services.kafka.image"); got != "apache/kafka:3.9.0" {
		t.Errorf("kafka image %q, want apache/kafka:3.9.0", got)
	}
	kenv := v.GetStringMapString("services.kafka.environment")
	for k, want := range map[string]string{
		"kafka_process_roles":             "broker,controller",
		"kafka_controller_listener_names": "CONTROLLER",
		"kafka_controller_quorum_voters":  "1@kafka:9093",
	} {
		if kenv[k] != want {
			t.Errorf("kafka %s = %q, want %q", strings.ToUpper(k), kenv[k], want)
		}
	}
	if !strings.Contains(kenv["kafka_advertised_listeners"], "PLAINTEXT://kafka:9092") {
		t.Errorf("kafka advertised listeners %q lack PLAINTEXT://kafka:9092", kenv["kafka_advertised_listeners"])
	}

	known := map[string]bool{}
	for _, k := range cli.Keys {
		known["SAGAFLOW_"+strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(k.Name))] = true
	}
	cmds := map[string]string{"orchestrator": "serve", "participants": "participants"}
	for svc, sub := range cmds {
		base := "services." + svc
		if cmd := v.GetStringSlice(base + ".command"); len(cmd) == 0 || cmd[0] != sub {
			t.Errorf("%s command %v, want %s ...", svc, cmd, sub)
		}
		if !v.IsSet(base + ".build") {
			t.Errorf("%s is not built from the Dockerfile", svc)
		}
		env := v.GetStringMapString(base + ".environment")
		if !strings.Contains(env["sagaflow_kafka_brokers"], "kafka:9092") {
			t.Errorf("%s SAGAFLOW_KAFKA_BROKERS = %q, want kafka:9092", svc, env["sagaflow_kafka_brokers"])
		}
		if !strings.Contains(env["sagaflow_database_url"], "@postgres:5432/") {
			t.Errorf("%s SAGAFLOW_DATABASE_URL = %q, want the postgres service", svc, env["sagaflow_database_url"])
		}
		for k := range env {
			if name := strings.ToUpper(k); strings.HasPrefix(name, "SAGAFLOW_") && !known[name] {
				t.Errorf("%s sets %s, which is no configuration key", svc, name)
			}
		}
		for _, dep := range []string{"postgres", "kafka"} {
			if got := v.GetString(base + ".depends_on." + dep + ".condition"); got != "service_healthy" {
				t.Errorf("%s depends_on %s condition %q, want service_healthy", svc, dep, got)
			}
		}
	}
	for _, svc := range []string{"postgres", "kafka", "orchestrator"} {
		if len(v.GetStringSlice("services."+svc+".healthcheck.test")) == 0 {
			t.Errorf("%s has no healthcheck", svc)
		}
	}

	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^FROM golang:1\.26 AS build$`).Match(df) || !strings.Contains(string(df), "./cmd/orchestrator") {
		t.Errorf("Dockerfile does not build ./cmd/orchestrator in a golang:1.26 stage")
	}
}
