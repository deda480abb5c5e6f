package conformance

import (
	"bytes"
	"strings"
	"testing"
)

func TestReportText(t *testing.T) {
	t.Parallel()
	var r Report
	r.add(Check{Name: "a", Passed: true})
	r.add(Check{Name: "b", Why: "went wrong"})
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if want := "PASS a\nFAIL b: went wrong\n1 passed, 1 failed\n"; b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
	if r.OK() {
		t.Fatal("OK with a failed check")
	}
	if (Report{}).OK() {
		t.Fatal("OK without checks")
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := Config{Participant: "inventory", Command: "true", DatabaseURL: "postgres://x"}.WithDefaults()
	if err := ok.validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no participant", func(c *Config) { c.Participant = "" }, "Config.Participant"},
		{"illegal topic", func(c *Config) { c.Participant = "in ventory" }, "Config.Participant"},
		{"no command", func(c *Config) { c.Command = " " }, "Config.Command"},
		{"no database", func(c *Config) { c.DatabaseURL = "" }, "Config.DatabaseURL"},
		{"partitioner", func(c *Config) { c.Partitioner = "crc32" }, "Config.Partitioner"},
		{"timeout", func(c *Config) { c.Timeout = -1 }, "Config.Timeout"},
	} {
		c := ok
		tc.edit(&c)
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}
