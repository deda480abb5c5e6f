package inbox_test

import (
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/inbox"
)

// WithDefaults fills every zero field and keeps what is set.
func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	d := inbox.Config{GroupID: "g"}.WithDefaults()
	for name, ok := range map[string]bool{
		"Name":              d.Name == "g",
		"DLQSuffix":         d.DLQSuffix == inbox.DLQSuffixDefault,
		"BatchSize":         d.BatchSize == inbox.BatchSizeDefault,
		"Lanes":             d.Lanes == inbox.LanesDefault,
		"MaxWait":           d.MaxWait == inbox.MaxWaitDefault,
		"SessionTimeout":    d.SessionTimeout == inbox.SessionTimeoutDefault,
		"HeartbeatInterval": d.HeartbeatInterval == inbox.HeartbeatIntervalMax,
		"QueueMessages":     d.QueueMessages == 2*inbox.BatchSizeDefault,
		"IsolateAfter":      d.IsolateAfter == inbox.IsolateAfterDefault,
		"DeadLetterBytes":   d.DeadLetterBytes == inbox.DeadLetterBytesDefault,
		"Logger":            d.Logger != nil,
	} {
		if !ok {
			t.Errorf("zero %s not set to its default: %+v", name, d)
		}
	}
	set := inbox.Config{GroupID: "g", Name: "n", BatchSize: 7, Advanced: inbox.Advanced{SessionTimeout: 3 * time.Second}}.WithDefaults()
	if set.Name != "n" || set.BatchSize != 7 || set.QueueMessages != 14 || set.SessionTimeout != 3*time.Second || set.HeartbeatInterval != time.Second {
		t.Errorf("WithDefaults changed set fields or ignored them: %+v", set)
	}
}
