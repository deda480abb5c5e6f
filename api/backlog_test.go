package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/saga"
)

// GET /stats and the list page show the backlog: the unsent commands by
// topic, dead outbox rows by error class, the oldest flagged saga by type
// with its id.
func TestStatsShowsTheBacklog(t *testing.T) {
	t.Parallel()
	e := setup(t, adminToken)
	id := e.start("o-backlog")
	if _, err := e.eng.Operate(context.Background(), id, saga.Operator{Action: saga.ActionForceFail, Actor: "alice", Reason: "carrier outage"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO orch.outbox (topic, key, value, dead_at, last_error) VALUES ('payments.commands', 'k', '\x00', now(), 'MESSAGE_TOO_LARGE: too big')`); err != nil {
		t.Fatal(err)
	}
	code, out := e.do("GET", "/stats", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /stats = %d %v", code, out)
	}
	b, _ := out["backlog"].(map[string]any)
	// Unsent: the saga's first command, and the outcome record of its
	// forced end (each on its own topic).
	topics, _ := b["outbox_by_topic"].([]any)
	pending := map[string]any{}
	for _, tp := range topics {
		m, _ := tp.(map[string]any)
		pending[fmt.Sprint(m["topic"])] = m["pending"]
	}
	if len(topics) != 2 || pending["inventory.commands"] != 1.0 || pending["saga.outcomes"] != 1.0 {
		t.Errorf("outbox_by_topic %v; want the one unsent command's topic and the outcome topic, one row each", b["outbox_by_topic"])
	}
	if dead, _ := b["dead_by_class"].(map[string]any); dead["too_large"] != 1.0 {
		t.Errorf("dead_by_class %v; want too_large 1", b["dead_by_class"])
	}
	flagged, _ := b["oldest_flagged"].([]any)
	if len(flagged) != 1 || flagged[0].(map[string]any)["id"] != id.String() || flagged[0].(map[string]any)["state"] != "failed" {
		t.Errorf("oldest_flagged %v; want the forced-failed saga %s", b["oldest_flagged"], id)
	}
	if slo, ok := b["slo"].([]any); !ok || len(slo) != 0 {
		t.Errorf("slo %v; want an empty list (no type has a window)", b["slo"])
	}
	if c, _ := b["oldest_compensating"].([]any); len(c) != 0 {
		t.Errorf("oldest_compensating %v; want none", c)
	}
	res, err := http.Get(e.srv.URL + "/ui/sagas")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	page, _ := io.ReadAll(res.Body)
	for _, want := range []string{`id="backlog"`, "too_large 1", fmt.Sprintf("/ui/sagas/%s", id), "1 unsent"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the list page lacks %q", want)
		}
	}
}
