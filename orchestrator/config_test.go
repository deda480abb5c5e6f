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
