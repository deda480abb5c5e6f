package orchestrator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
)

// WithDefaults fills every zero field and keeps what is set.
func TestEngineConfigWithDefaults(t *testing.T) {
	t.Parallel()
	d := orchestrator.EngineConfig{}.WithDefaults()
	if d.Schema != orchestrator.SchemaDefault || d.ReplyTopic != orchestrator.ReplyTopicDefault || d.TimerInterval != orchestrator.TimerIntervalDefault ||
		d.TimerBatch != orchestrator.TimerBatchDefault || d.GaugeInterval != orchestrator.GaugeIntervalDefault || d.StartBatch != orchestrator.StartBatchDefault ||
		d.StartLanes != orchestrator.StartLanesDefault || d.Logger == nil || d.Now == nil {
		t.Errorf("zero fields not set to their defaults: %+v", d)
	}
	set := orchestrator.EngineConfig{Schema: "s", TimerBatch: 3, Advanced: orchestrator.Advanced{StartBatch: 1}}.WithDefaults()
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
		cfg   orchestrator.EngineConfig
		field string
	}{
		{orchestrator.EngineConfig{ReplyTopic: "no spaces"}, "Config.ReplyTopic"},
		{orchestrator.EngineConfig{TopicPrefix: "a/b"}, "Config.TopicPrefix"},
		{orchestrator.EngineConfig{Schema: "Bad-Schema"}, "Config.Schema"},
		{orchestrator.EngineConfig{TimerInterval: -time.Second}, "Config.TimerInterval"},
		{orchestrator.EngineConfig{TimerBatch: -1}, "Config.TimerBatch"},
		{orchestrator.EngineConfig{GaugeInterval: -time.Second}, "Config.GaugeInterval"},
		{orchestrator.EngineConfig{Advanced: orchestrator.Advanced{StartBatch: -1}}, "Config.StartBatch"},
		{orchestrator.EngineConfig{Advanced: orchestrator.Advanced{StartLanes: -2}}, "Config.StartLanes"},
	} {
		if _, err := orchestrator.NewEngine(pool, reg, &tc.cfg); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("NewEngine(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
	eng, err := orchestrator.NewEngine(pool, reg, nil)
	if err != nil {
		t.Fatalf("NewEngine with nil config: %v", err)
	}
	if eng.ReplyTopic() != orchestrator.ReplyTopicDefault || eng.Outbox().Schema() != orchestrator.SchemaDefault {
		t.Errorf("nil config: reply topic %q, schema %q; want the defaults", eng.ReplyTopic(), eng.Outbox().Schema())
	}
}
