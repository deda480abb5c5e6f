package holds_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/participants/holds"
)

func TestHandlerListsAndFilters(t *testing.T) {
	t.Parallel()
	pool, shop := setup(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Participant("depot")))
	depot := holds.For("depot")
	ctx := testkit.Context(t, 30*time.Second)
	s1, s2 := uuid.New(), uuid.New()
	if _, err := shop.TakeMany(ctx, pool, []holds.Request{
		{SagaID: s1, Step: "reserve", Resource: "sku-a", Quantity: 1},
		{SagaID: s2, Step: "reserve", Resource: "sku-b", Quantity: 2},
	}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := depot.Take(ctx, pool, s1, "book", "bay-7", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := shop.Confirm(ctx, pool, s2, "reserve"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(holds.Handler(pool, []holds.Owned{{Participant: "shop", Table: shop}, {Participant: "depot", Table: depot}}, nil))
	defer srv.Close()

	get := func(query string) (int, holds.ListResponse, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/holds" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out holds.ListResponse
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatalf("GET /holds%s: decode: %v", query, err)
		}
		return resp.StatusCode, out, resp.Header.Get("Content-Type")
	}
	cases := []struct {
		name, query  string
		participants []string // of the holds listed, in order
		truncated    bool
	}{
		{"all", "", []string{"shop", "shop", "depot"}, false},
		{"by saga", "?saga=" + s1.String(), []string{"shop", "depot"}, false},
		{"by resource", "?resource=bay-7", []string{"depot"}, false},
		{"held", "?state=held", []string{"shop", "depot"}, false},
		{"by saga and state", "?saga=" + s2.String() + "&state=confirmed", []string{"shop"}, false},
		{"limit", "?limit=2", []string{"shop", "shop"}, true},
		{"nothing", "?resource=sku-z", []string{}, false},
	}
	for _, c := range cases {
		code, out, ctype := get(c.query)
		var got []string
		for _, h := range out.Holds {
			got = append(got, h.Participant)
		}
		if code != http.StatusOK || ctype != "application/json" || strings.Join(got, ",") != strings.Join(c.participants, ",") || out.Truncated != c.truncated {
			t.Errorf("%s: %d %s %v truncated=%v; want 200 %v truncated=%v", c.name, code, ctype, got, out.Truncated, c.participants, c.truncated)
		}
	}
	_, byResource, _ := get("?resource=sku-b")
	if h := byResource.Holds; len(h) != 1 || h[0].SagaID != s2 || h[0].Quantity != 2 || h[0].State != holds.Confirmed || h[0].Settled == nil || h[0].Step != "reserve" {
		t.Errorf("the hold of sku-b = %+v; want saga %s's 2 units, confirmed", h, s2)
	}

	for _, bad := range []struct{ query, field string }{
		{"?saga=not-a-uuid", "saga"}, {"?state=lost", "state"}, {"?limit=0", "limit"}, {"?limit=99999", "limit"}, {"?limit=x", "limit"},
	} {
		resp, err := http.Get(srv.URL + "/holds" + bad.query)
		if err != nil {
			t.Fatal(err)
		}
		var e map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || e["field"] != bad.field || e["error"] == "" {
			t.Errorf("GET /holds%s = %d %v; want 400 naming %s", bad.query, resp.StatusCode, e, bad.field)
		}
	}
}
