package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
)

// fuzzServer is an API over a real engine on a fresh database, built once
// per fuzz run (each fuzzing worker process builds its own).
func fuzzServer(f *testing.F) (http.Handler, *orchestrator.Engine) {
	f.Helper()
	pool := testkit.Pool(f)
	testkit.Migrate(f, pool, testkit.MustSets(f)(migrations.Orchestrator("orch")))
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		f.Fatal(err)
	}
	eng, err := orchestrator.NewEngine(pool, reg, &orchestrator.EngineConfig{Schema: "orch"})
	if err != nil {
		f.Fatal(err)
	}
	return newAPI(f, eng, &api.Config{AdminToken: adminToken}), eng
}

// serve runs one request through h in process and checks the answer's
// shape: never 5xx, always a JSON object, errors carry a message.
func serve(t *testing.T, h http.Handler, req *http.Request) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := rec.Result()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 500 {
		t.Fatalf("%s %s answered %d: %s", req.Method, req.URL, res.StatusCode, body)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s %s: Content-Type %q: %s", req.Method, req.URL, ct, body)
	}
	var out map[string]any
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("%s %s: answer is not a JSON object: %v: %s", req.Method, req.URL, err, body)
	}
	if res.StatusCode >= 400 {
		if msg, _ := out["error"].(string); msg == "" {
			t.Fatalf("%s %s: %d without an error message: %s", req.Method, req.URL, res.StatusCode, body)
		}
	}
	return res.StatusCode, out
}

func FuzzStartBody(f *testing.F) {
	h, _ := fuzzServer(f)
	for _, s := range []string{
		`{"type":"place-order","idempotency_key":"k","aggregate_id":"o","data":{"order_id":"o","customer":"c","sku":"s","qty":1,"amount_cents":5}}`,
		`{"type":"place-order","idempotency_key":"k2","aggregate_id":"o","data":{"order_id":"o","customer":"c","sku":"s","qty":-1}}`,
		`{"type":"place-order","idempotency_key":"` + strings.Repeat("k", 300) + `","aggregate_id":"o","data":{"order_id":"o","customer":"c","sku":"s","qty":1}}`,
		`{"type":"place-order","idempotency_key":"k3","aggregate_id":"o","data":{"order_id":"o","customer":"c","sku":"s","qty":1e99}}`,
		`{"type":"place-order","idempotency_key":"k4","aggregate_id":"o","data":{"order_id":"o","customer":"c","sku":"s","qty":1,"extra":{"deep":[1,2,{"x":null}]}}}`,
		`{"type":"place-order","data":{}}`, `{"type":"x"}`, `{}`, `null`, `[]`, `"s"`, `{`, ``, "\xff\xfe",
		`{"type":"place-order","idempotency_key":"k","aggregate_id":"o","data":{}} trailing`,
		// Once 500s: NUL in a key, an unpaired surrogate and NUL in data.
		`{"type":"place-order","idempotency_key":"k\u0000","aggregate_id":"o","data":{"order_id":"o","customer":"c","sku":"s","qty":1}}`,
		`{"type":"place-order","idempotency_key":"k5","aggregate_id":"o","data":{"order_id":"\ud800","customer":"c","sku":"s","qty":1}}`,
		`{"type":"place-order","idempotency_key":"k6","aggregate_id":"o","data":{"order_id":"o","customer":"c\u0000","sku":"s","qty":1}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequestWithContext(context.Background(), "POST", "/sagas", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		code, out := serve(t, h, req)
		switch {
		case code == http.StatusCreated || code == http.StatusOK:
			if _, err := uuid.Parse(asString(out["id"])); err != nil {
				t.Fatalf("%d without a saga id: %v", code, out)
			}
		case code == http.StatusBadRequest || code == http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d for a start request: %v", code, out)
		}
	})
}

func asString(v any) string { s, _ := v.(string); return s }

func FuzzParseFilter(f *testing.F) {
	for _, s := range []string{
		"", "state=running", "state=nope", "limit=0", "limit=abc", "limit=1000000", "limit=5&cursor=x",
		"older_than=-1s", "older_than=5m", "stuck=maybe", "stuck=true&stuck_after=0s", "stuck_after=1h",
		"type=%00&step=%ff", "state=&limit=&stuck=", "limit=9223372036854775808", "older_than=9999999999h",
	} {
		f.Add(s)
	}
	fields := []string{"state", "limit", "older_than", "stuck", "stuck_after"}
	f.Fuzz(func(t *testing.T, query string) {
		q, _ := url.ParseQuery(query) // a bad pair is dropped, as net/http does
		flt, field, err := api.ParseFilter(q)
		if err == nil {
			if field != "" {
				t.Fatalf("no error but field %q", field)
			}
			if flt.Limit < 0 || flt.Limit > orchestrator.ListLimitMax || flt.OlderThan < 0 || flt.StuckAfter < 0 {
				t.Fatalf("accepted an out-of-range filter %+v from %q", flt, query)
			}
			if flt.State != "" && !flt.State.Valid() {
				t.Fatalf("accepted state %q", flt.State)
			}
			return
		}
		known := false
		for _, k := range fields {
			known = known || field == k
		}
		if !known {
			t.Fatalf("error %q names field %q, not a filter parameter", err, field)
		}
		if !strings.Contains(err.Error(), field) {
			t.Fatalf("error %q does not name its field %q", err, field)
		}
	})
}

func FuzzActionBody(f *testing.F) {
	h, eng := fuzzServer(f)
	// One running saga and one failed-looking id that does not exist.
	in, _, err := eng.Start(context.Background(), orchestrator.StartRequest{Type: "place-order", IdempotencyKey: "fuzz", AggregateID: "o-f",
		Data: steps.Order{OrderID: "o-f", Customer: "c", SKU: "s", Qty: 1, AmountCents: 1}})
	if err != nil {
		f.Fatal(err)
	}
	ids := []uuid.UUID{in.ID, uuid.New()}
	actions := []string{"retry", "compensate", "resolve", "explode"}
	for _, s := range []string{
		`{"actor":"ann","reason":"stuck"}`, `{"actor":"ann","reason":"x","outcome":"completed"}`,
		`{"actor":"ann","reason":"x","outcome":"running"}`, `{"actor":"","reason":""}`, `{"actor":1}`,
		`{"actor":"ann","reason":"why","colour":"red"}`,
		`{"actor":"a\u0000","reason":"b\u0000","outcome":"completed"}`,
		`null`, `[]`, `{`, ``,
	} {
		for i := range 8 {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, pick uint8, body []byte) {
		id := ids[int(pick)%len(ids)]
		action := actions[int(pick/2)%len(actions)]
		req := httptest.NewRequestWithContext(context.Background(), "POST", "/sagas/"+id.String()+"/actions/"+action, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+adminToken)
		req.Header.Set("Content-Type", "application/json")
		code, out := serve(t, h, req)
		switch code {
		case http.StatusOK, http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d for %s: %v", code, action, out)
		}
		if code == http.StatusBadRequest && asString(out["field"]) == "" && !strings.Contains(asString(out["error"]), "JSON") {
			t.Fatalf("400 naming no field and not about JSON: %v", out)
		}
	})
}
