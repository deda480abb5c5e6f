package goparticipant

import (
	"strings"
	"testing"
)

func TestEnvFromOSNamesWhatIsMissing(t *testing.T) {
	for _, k := range []string{"SAGAFLOW_KAFKA_BROKERS", "SAGAFLOW_DATABASE_URL", "SAGAFLOW_PARTICIPANT", "SAGAFLOW_REPLY_TOPIC"} {
		t.Setenv(k, "")
	}
	t.Setenv("SAGAFLOW_PARTICIPANT", "inventory")
	_, err := EnvFromOS()
	if err == nil {
		t.Fatal("no error with three variables unset")
	}
	for _, k := range []string{"SAGAFLOW_KAFKA_BROKERS", "SAGAFLOW_DATABASE_URL", "SAGAFLOW_REPLY_TOPIC"} {
		if !strings.Contains(err.Error(), k) {
			t.Errorf("error %q does not name %s", err, k)
		}
	}
	if strings.Contains(err.Error(), "SAGAFLOW_PARTICIPANT") {
		t.Errorf("error %q names SAGAFLOW_PARTICIPANT, which is set", err)
	}
}
