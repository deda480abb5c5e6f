package e2e

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/viper"
)

// TestComposeFileSafeDefaults: docker-compose.yml publishes every port on
// 127.0.0.1 only (it published the API, Postgres and a plaintext Kafka on
// every interface), and takes every token and password from the
// environment with no default (the admin token was change-me): each secret
// is a ${VAR:?message} that makes compose refuse to start without it, the
// API's reads are protected, and no credential is written in the file.
func TestComposeFileSafeDefaults(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	v := viper.New()
	v.SetConfigType("yaml")
	if err := v.ReadConfig(strings.NewReader(string(raw))); err != nil {
		t.Fatalf("docker-compose.yml does not parse: %v", err)
	}
	published := 0
	for svc := range v.GetStringMap("services") {
		ports, ok := v.Get("services." + svc + ".ports").([]any)
		if v.IsSet("services."+svc+".ports") && !ok {
			t.Fatalf("%s ports: %T, want a list", svc, v.Get("services."+svc+".ports"))
		}
		for _, p := range ports {
			s, ok := p.(string)
			if !ok || !strings.HasPrefix(s, "127.0.0.1:") || strings.Count(s, ":") != 2 {
				t.Errorf("%s publishes port %v; want \"127.0.0.1:<host>:<container>\" (loopback only)", svc, p)
			}
			published++
		}
	}
	if published != 3 {
		t.Errorf("%d published ports, want 3 (API, Postgres, Kafka's host listener)", published)
	}

	// Secrets: every one is ${VAR:?...}, never a literal or a default.
	interp := regexp.MustCompile(`^\$\{([A-Z0-9_]+):\?[^}]+\}$`)
	secret := regexp.MustCompile(`(?i)token|password|secret`)
	envs := map[string]map[string]string{"x-sagaflow-env": v.GetStringMapString("x-sagaflow-env")}
	for svc := range v.GetStringMap("services") {
		envs[svc] = v.GetStringMapString("services." + svc + ".environment")
	}
	need := map[string]bool{"sagaflow_http_admin_token": false, "sagaflow_http_client_token": false, "postgres_password": false, "pgpassword": false}
	for where, env := range envs {
		for k, val := range env {
			if !secret.MatchString(k) {
				continue
			}
			if _, ok := need[k]; ok {
				need[k] = true
			}
			if !interp.MatchString(val) {
				t.Errorf("%s %s = %q; want ${VAR:?message}: from the environment, no default", where, strings.ToUpper(k), val)
			}
		}
		if u := env["sagaflow_database_url"]; u != "" && regexp.MustCompile(`//[^/@]*:[^/@]*@`).MatchString(u) {
			t.Errorf("%s SAGAFLOW_DATABASE_URL %q carries a password; want it from PGPASSWORD", where, u)
		}
	}
	for k, seen := range need {
		if !seen {
			t.Errorf("%s is not set from the environment anywhere", strings.ToUpper(k))
		}
	}
	if got := envs["orchestrator"]["sagaflow_http_protect_reads"]; got != "true" {
		t.Errorf("orchestrator SAGAFLOW_HTTP_PROTECT_READS = %q, want true", got)
	}
	// No interpolation anywhere falls back to a default (${X:-d}, ${X-d}).
	for _, m := range regexp.MustCompile(`\$\{[^}]*\}`).FindAllString(string(raw), -1) {
		if strings.Contains(m, ":-") || regexp.MustCompile(`^\$\{[A-Z0-9_]+-`).MatchString(m) {
			t.Errorf("docker-compose.yml interpolates %s with a default", m)
		}
	}
	for _, bad := range []string{"change-me", "sagaflow:sagaflow@"} {
		if strings.Contains(string(raw), bad) {
			t.Errorf("docker-compose.yml still holds %q", bad)
		}
	}
}
