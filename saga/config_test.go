package saga_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/saga"
)

// WithDefaults fills every zero field and keeps what is set.
func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	d := saga.Config{}.WithDefaults()
	if d.Schema != saga.SchemaDefault || d.ReplyTopic != saga.ReplyTopicDefault || d.TimerInterval != saga.TimerIntervalDefault ||
		d.TimerBatch != saga.TimerBatchDefault || d.GaugeInterval != saga.GaugeIntervalDefault || d.StartBatch != saga.StartBatchDefault ||
		d.StartLanes != saga.StartLanesDefault || d.Logger == nil || d.Now == nil {
		t.Errorf("zero fields not set to their defaults: %+v", d)
	}
	set := saga.Config{Schema: "s", TimerBatch: 3, Advanced: saga.Advanced{StartBatch: 1}}.WithDefaults()
	if set.Schema != "s" || set.TimerBatch != 3 || set.StartBatch != 1 {
		t.Errorf("WithDefaults changed set fields: %+v", set)
	}
}

// NewEngine refuses a bad Config naming the field, and takes nil.
func TestNewEngineValidatesConfig(t *testing.T) {
	t.Parallel()
	pool := &pgxpool.Pool{} // never used: NewEngine does not connect
	reg := saga.NewRegistry()
	for _, tc := range []struct {
		cfg   saga.Config
		field string
	}{
		{saga.Config{ReplyTopic: "no spaces"}, "Config.ReplyTopic"},
		{saga.Config{TopicPrefix: "a/b"}, "Config.TopicPrefix"},
		{saga.Config{Schema: "Bad-Schema"}, "Config.Schema"},
		{saga.Config{TimerInterval: -time.Second}, "Config.TimerInterval"},
		{saga.Config{TimerBatch: -1}, "Config.TimerBatch"},
		{saga.Config{GaugeInterval: -time.Second}, "Config.GaugeInterval"},
		{saga.Config{Advanced: saga.Advanced{StartBatch: -1}}, "Config.StartBatch"},
		{saga.Config{Advanced: saga.Advanced{StartLanes: -2}}, "Config.StartLanes"},
	} {
		if _, err := saga.NewEngine(pool, reg, &tc.cfg); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("NewEngine(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
	eng, err := saga.NewEngine(pool, reg, nil)
	if err != nil {
		t.Fatalf("NewEngine with nil config: %v", err)
	}
	if eng.ReplyTopic() != saga.ReplyTopicDefault || eng.Outbox().Schema() != saga.SchemaDefault {
		t.Errorf("nil config: reply topic %q, schema %q; want the defaults", eng.ReplyTopic(), eng.Outbox().Schema())
	}
}
