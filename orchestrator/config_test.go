package orchestrator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/relay"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
)

// New validates every configuration the service will run with, and refuses
// fields of the embedded configs it would otherwise overwrite.
func TestNewValidatesAndNeverOverwrites(t *testing.T) {
	t.Parallel()
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	pool := &pgxpool.Pool{} // never used: New does not connect
	b := []string{"127.0.0.1:9092"}
	for _, tc := range []struct {
		name string
		cfg  orchestrator.Config
		want string
	}{
		{"inbox brokers", orchestrator.Config{Brokers: b, Inbox: inbox.Config{Brokers: b}}, "Config.Inbox.Brokers"},
		{"inbox dialer", orchestrator.Config{Brokers: b, Inbox: inbox.Config{Dialer: &kafka.Dialer{}}}, "Config.Inbox.Dialer"},
		{"inbox group", orchestrator.Config{Brokers: b, Inbox: inbox.Config{GroupID: "g"}}, "Config.Inbox.GroupID"},
		{"inbox topics", orchestrator.Config{Brokers: b, Inbox: inbox.Config{Topics: []string{"t"}}}, "Config.Inbox.Topics"},
		{"inbox schema", orchestrator.Config{Brokers: b, Inbox: inbox.Config{Schema: "s"}}, "Config.Inbox.Schema"},
		{"relay brokers", orchestrator.Config{Brokers: b, Relay: relay.Config{Brokers: b}}, "Config.Relay.Brokers"},
		{"no brokers", orchestrator.Config{}, "Config.Brokers is empty"},
		{"bad inbox value", orchestrator.Config{Brokers: b, Inbox: inbox.Config{Advanced: inbox.Advanced{SessionTimeout: time.Millisecond}}}, "SessionTimeout"},
		{"bad relay value", orchestrator.Config{Brokers: b, Relay: relay.Config{BatchSize: -1}}, "BatchSize"},
		{"bad engine value", orchestrator.Config{Brokers: b, Engine: orchestrator.EngineConfig{TimerBatch: -1}}, "Config.TimerBatch"},
		{"bad inbox lanes", orchestrator.Config{Brokers: b, Inbox: inbox.Config{Lanes: -1}}, "Config.Lanes"},
		{"negative partitions", orchestrator.Config{Brokers: b, Partitions: -1}, "Config.Partitions"},
		{"negative replication", orchestrator.Config{Brokers: b, Replication: -3}, "Config.Replication"},
		{"nil-like zero config", orchestrator.Config{}, "Config.Brokers"},
	} {
		_, err := orchestrator.New(pool, reg, &tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
	if _, err := orchestrator.New(pool, reg, &orchestrator.Config{Brokers: b}); err != nil {
		t.Fatalf("a plain config: %v", err)
	}
	// A service that runs neither consumer nor relay needs no brokers.
	if _, err := orchestrator.New(pool, reg, &orchestrator.Config{Run: orchestrator.RunSet{Timers: true}}); err != nil {
		t.Fatalf("timers only: %v", err)
	}
}

// WithDefaults fills the service's zero fields and the embedded fields it
// owns the defaults of, and keeps what is set.
func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	d := orchestrator.Config{}.WithDefaults()
	if d.GroupID != orchestrator.GroupIDDefault || d.Partitions != orchestrator.PartitionsDefault || d.Replication != orchestrator.ReplicationDefault ||
		d.Run != orchestrator.DefaultRun || d.Logger == nil || d.Engine.Logger != d.Logger || d.Inbox.Logger != d.Logger || d.Relay.Logger != d.Logger ||
		d.Inbox.Lanes != orchestrator.RepliesLanesDefault || d.Inbox.BatchSize != orchestrator.RepliesBatchDefault {
		t.Errorf("zero fields not set to their defaults: %+v", d)
	}
	set := orchestrator.Config{GroupID: "g", Partitions: 2, Run: orchestrator.RunSet{Timers: true}, Inbox: inbox.Config{Lanes: 1, BatchSize: 9}}.WithDefaults()
	if set.GroupID != "g" || set.Partitions != 2 || set.Run != (orchestrator.RunSet{Timers: true}) || set.Inbox.Lanes != 1 || set.Inbox.BatchSize != 9 {
		t.Errorf("WithDefaults changed set fields: %+v", set)
	}
	reg := saga.NewRegistry()
	if _, err := orchestrator.New(&pgxpool.Pool{}, reg, nil); err == nil || !strings.Contains(err.Error(), "Config.Brokers") {
		t.Errorf("New with a nil config = %v, want an error naming Config.Brokers", err)
	}
}
