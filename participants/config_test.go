package participants_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
)

// WithDefaults derives the zero fields from Name and keeps what is set.
func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	d := participants.Config{Name: "hotel"}.WithDefaults()
	if d.Schema != "hotel" || d.GroupID != "hotel" || d.CommandTopic != "hotel.commands" ||
		len(d.ReplyTopics) != 1 || d.ReplyTopics[0] != message.ReplyTopicDefault || d.Logger == nil {
		t.Errorf("zero fields not set to their defaults: %+v", d)
	}
	set := participants.Config{Name: "hotel", Schema: "h", GroupID: "g", CommandTopic: "c", ReplyTopics: []string{"r"}}.WithDefaults()
	if set.Schema != "h" || set.GroupID != "g" || set.CommandTopic != "c" || set.ReplyTopics[0] != "r" {
		t.Errorf("WithDefaults changed set fields: %+v", set)
	}
}

// New refuses a bad Config naming the field, nil included.
func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	pool := &pgxpool.Pool{} // never used: New does not connect
	for _, tc := range []struct {
		cfg   *participants.Config
		field string
	}{
		{nil, "Config.Name"},
		{&participants.Config{}, "Config.Name"},
		{&participants.Config{Name: "p", InboxBatchSize: -1}, "Config.InboxBatchSize"},
		{&participants.Config{Name: "p", InboxLanes: -1}, "Config.InboxLanes"},
		{&participants.Config{Name: "p", CommandTopic: "no spaces"}, "Config.CommandTopic"},
		{&participants.Config{Name: "p", ReplyTopics: []string{"saga.replies", ""}}, "Config.ReplyTopics[1]"},
		{&participants.Config{Name: "p", Schema: "Bad-Schema"}, "Config.Schema"},
	} {
		if _, err := participants.New(pool, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := participants.New(pool, &participants.Config{Name: "p"}); err != nil {
		t.Fatalf("New with defaults: %v", err)
	}
}
