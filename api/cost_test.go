package api_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/orchestrator"
)

// Every read parameter is bounded: a value past its bound answers 400
// naming the parameter and the bound, and /stats?window= counts at most
// orchestrator.StatsWindowMax of history.
func TestReadParametersAreCapped(t *testing.T) {
	t.Parallel()
	e, _, _ := setupDLQ(t, adminToken)
	auth := []string{"Authorization", "Bearer " + adminToken}
	for _, c := range []struct {
		method, path, body, field, bound string
	}{
		{"GET", "/stats?window=25h", "", "window", "24h0m0s"},
		{"GET", "/stats?window=100000h", "", "window", "24h0m0s"},
		{"GET", "/stats?window=-1h", "", "window", "24h0m0s"},
		{"GET", "/sagas?limit=501", "", "limit", "500"},
		{"GET", "/sagas?older_than=87601h", "", "older_than", "87600h0m0s"},
		{"GET", "/sagas?stuck=true&stuck_after=87601h", "", "stuck_after", "87600h0m0s"},
		{"GET", "/sagas/00000000-0000-0000-0000-000000000001?journal_limit=1001", "", "journal_limit", "1000"},
		{"GET", "/dlq?limit=501", "", "limit", "500"},
		{"GET", "/dlq?match=" + strings.Repeat("x", 201), "", "match", "200"},
		{"GET", "/outbox/dead?limit=501", "", "limit", "500"},
		{"GET", "/reconcile?limit=1001", "", "limit", "1000"},
		{"POST", "/reconcile/run", `{"dry_run": true, "since": "169h"}`, "since", "168h0m0s"},
	} {
		st, body := e.do(c.method, c.path, c.body, append([]string{"Content-Type", jsonCT}, auth...)...)
		if st != 400 || body["field"] != c.field || !strings.Contains(body["error"].(string), c.bound) {
			t.Errorf("%s %s = %d %v; want 400 naming %s and its bound %s", c.method, c.path, st, body, c.field, c.bound)
		}
	}
	// at the bounds, answers
	for _, p := range []string{"/stats?window=24h", "/sagas?older_than=87600h&limit=500", "/dlq?match=" + url.QueryEscape(strings.Repeat("é", 100))} {
		st, body := e.do("GET", p, nil, auth...)
		if st != 200 {
			t.Errorf("GET %s = %d %v; want 200", p, st, body)
		}
	}
	st, body := e.do("GET", "/stats?window=24h", nil, auth...)
	b, _ := json.Marshal(body)
	if st != 200 || body["window_seconds"] != orchestrator.StatsWindowMax.Seconds() {
		t.Errorf("GET /stats?window=24h = %d %s; want the day's window", st, b)
	}
}
