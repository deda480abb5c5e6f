package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// Every bad POST /sagas body answers 4xx with a JSON error naming the field
// at fault (when there is one), and starts nothing.
func TestStartBodyValidation(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	with := func(mut func(m map[string]any)) map[string]any {
		b := startBody("order-v")
		mut(b)
		return b
	}
	// raw builds a body by hand, for values json.Marshal would not produce.
	raw := func(typ, key, agg, data string) string {
		return fmt.Sprintf(`{"type": %s, "idempotency_key": %s, "aggregate_id": %s, "data": %s}`, typ, key, agg, data)
	}
	goodData := `{"order_id": "o-1", "customer": "c-1", "sku": "sku-apple", "qty": 1, "amount_cents": 100}`
	typ, key, agg := `"`+orderapi.SagaType+`"`, `"k-1"`, `"o-1"`
	cases := []struct {
		name  string
		body  any
		code  int
		field string
	}{
		{"empty body", ``, 400, ""},
		{"malformed JSON", `{"type": "place-order", "data": {`, 400, ""},
		{"a JSON array", `[1, 2]`, 400, ""},
		{"a JSON string", `"place-order"`, 400, ""},
		{"JSON null", `null`, 400, "type"},
		{"unknown field", with(func(m map[string]any) { m["priority"] = 1 }), 400, "priority"},
		{"unknown nested-looking field", with(func(m map[string]any) { m["data.qty"] = 1 }), 400, "data.qty"},
		// Wrong types, each field.
		{"type a number", raw(`7`, key, agg, goodData), 400, "type"},
		{"type an object", raw(`{}`, key, agg, goodData), 400, "type"},
		{"type null", raw(`null`, key, agg, goodData), 400, "type"},
		{"idempotency_key a number", raw(typ, `12`, agg, goodData), 400, "idempotency_key"},
		{"idempotency_key a bool", raw(typ, `true`, agg, goodData), 400, "idempotency_key"},
		{"aggregate_id a number", raw(typ, key, `3.5`, goodData), 400, "aggregate_id"},
		{"aggregate_id an array", raw(typ, key, `["o"]`, goodData), 400, "aggregate_id"},
		// Missing each required field.
		{"missing type", with(func(m map[string]any) { delete(m, "type") }), 400, "type"},
		{"empty type", with(func(m map[string]any) { m["type"] = "" }), 400, "type"},
		{"missing idempotency_key", with(func(m map[string]any) { delete(m, "idempotency_key") }), 400, "idempotency_key"},
		{"missing aggregate_id", with(func(m map[string]any) { delete(m, "aggregate_id") }), 400, "aggregate_id"},
		{"missing data", with(func(m map[string]any) { delete(m, "data") }), 400, "data"},
		// data not an object.
		{"data null", raw(typ, key, agg, `null`), 400, "data"},
		{"data an array", raw(typ, key, agg, `[{"qty": 1}]`), 400, "data"},
		{"data a string", raw(typ, key, agg, `"{}"`), 400, "data"},
		{"data a number", raw(typ, key, agg, `42`), 400, "data"},
		{"data a bool", raw(typ, key, agg, `false`), 400, "data"},
		// Unknown type, invalid order data.
		{"unknown type", with(func(m map[string]any) { m["type"] = "refund-order" }), 400, "type"},
		{"order without sku", raw(typ, key, agg, `{"order_id": "o-1", "customer": "c-1", "qty": 1}`), 400, "data"},
		{"order with negative amount", raw(typ, key, agg, `{"order_id": "o-1", "customer": "c-1", "sku": "s", "qty": 1, "amount_cents": -1}`), 400, "data"},
		{"order with zero amount", raw(typ, key, agg, `{"order_id": "o-1", "customer": "c-1", "sku": "s", "qty": 1, "amount_cents": 0}`), 400, "data"},
		{"order without amount", raw(typ, key, agg, `{"order_id": "o-1", "customer": "c-1", "sku": "s", "qty": 1}`), 400, "data"},
		{"order qty a string", raw(typ, key, agg, `{"order_id": "o-1", "customer": "c-1", "sku": "s", "qty": "two"}`), 400, "data"},
		{"order qty fractional", raw(typ, key, agg, `{"order_id": "o-1", "customer": "c-1", "sku": "s", "qty": 1.5}`), 400, "data"},
		{"empty data object", raw(typ, key, agg, `{}`), 400, "data"},
		// Text Postgres cannot store, and keys over the limit.
		{"NUL in idempotency_key", raw(typ, `"k\u0000"`, agg, goodData), 400, "idempotency_key"},
		{"idempotency_key too long", raw(typ, `"`+strings.Repeat("k", 201)+`"`, agg, goodData), 400, "idempotency_key"},
		{"aggregate_id too long", raw(typ, key, `"`+strings.Repeat("o", 201)+`"`, goodData), 400, "aggregate_id"},
		{"NUL in data", raw(typ, key, agg, `{"order_id": "o\u0000", "customer": "c-1", "sku": "s", "qty": 1}`), 400, "data"},
		{"text after the body", raw(typ, key, agg, goodData) + ` {}`, 400, ""},
		// Oversize: the body, and the data alone.
		{"body over 1 MiB", raw(typ, key, agg, `{"order_id": "`+strings.Repeat("x", 1<<20)+`"}`), 413, ""},
		{"data over http.max_data_bytes", raw(typ, key, agg, `{"order_id": "`+strings.Repeat("x", api.DefaultMaxDataBytes)+`"}`), 413, "data"},
	}
	for _, c := range cases {
		code, out := e.do("POST", "/sagas", c.body)
		wantError(t, c.name, code, out, c.code, c.field)
		if msg, _ := out["error"].(string); c.field != "" && !strings.Contains(msg, c.field) && c.field != "data" {
			t.Errorf("%s: error %q does not name %q", c.name, msg, c.field)
		}
	}
	p, err := e.eng.List(context.Background(), orchestrator.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Sagas) != 0 {
		t.Fatalf("%d sagas exist after only bad requests", len(p.Sagas))
	}
	// A body padded past the data limit (but not the body's) is read and
	// judged on its content.
	pad := strings.Repeat(" ", api.DefaultMaxDataBytes)
	code, out := e.do("POST", "/sagas", raw(typ, key, agg, goodData)+pad)
	if code != http.StatusCreated {
		t.Fatalf("a valid body padded with %d spaces: %d %v, want 201", len(pad), code, out)
	}
}

// TestStartRefusesNonPositiveAmount: the reference place-order saga refuses
// an order of 0 cents (it completed before: a free order charged nothing),
// a negative amount and a missing one at the start, 400 naming
// amount_cents, and starts nothing; 1 cent starts.
func TestStartRefusesNonPositiveAmount(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	body := func(key, amount string) string {
		return fmt.Sprintf(`{"type": %q, "idempotency_key": %q, "aggregate_id": %q, "data": {"order_id": %q, "customer": "c-1", "sku": "sku-apple", "qty": 1%s}}`,
			orderapi.SagaType, key, key, key, amount)
	}
	for _, c := range []struct{ name, amount string }{
		{"zero", `, "amount_cents": 0`}, {"negative", `, "amount_cents": -5`}, {"missing", ``},
	} {
		code, out := e.do("POST", "/sagas", body("amount-"+c.name, c.amount))
		wantError(t, c.name+" amount", code, out, 400, "data")
		if msg, _ := out["error"].(string); !strings.Contains(msg, "amount_cents must be positive") {
			t.Errorf("%s amount: error %q does not name amount_cents", c.name, msg)
		}
	}
	p, err := e.eng.List(context.Background(), orchestrator.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Sagas) != 0 {
		t.Fatalf("%d sagas started for orders without a positive amount", len(p.Sagas))
	}
	if code, out := e.do("POST", "/sagas", body("amount-one-cent", `, "amount_cents": 1`)); code != http.StatusCreated {
		t.Fatalf("an order of 1 cent: %d %v, want 201", code, out)
	}
}

// Concurrent starts with one idempotency key create exactly one saga: every
// answer carries its id, one says 201 created, the others 200.
func TestConcurrentStartsSameKeyCreateOneSaga(t *testing.T) {
	t.Parallel()
	const n = 50
	e := setup(t, "")
	body := startBody("order-race")
	buf, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		code int
		out  map[string]any
	}
	answers := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			code, out := e.do("POST", "/sagas", string(buf))
			answers[i] = answer{code, out}
		}()
	}
	close(start)
	wg.Wait()
	created, ok := 0, 0
	ids := map[any]int{}
	for i, a := range answers {
		switch a.code {
		case http.StatusCreated:
			created++
			if a.out["created"] != true {
				t.Errorf("answer %d: 201 with created=%v", i, a.out["created"])
			}
		case http.StatusOK:
			ok++
			if a.out["created"] != false {
				t.Errorf("answer %d: 200 with created=%v", i, a.out["created"])
			}
		default:
			t.Errorf("answer %d: status %d %v", i, a.code, a.out)
		}
		ids[a.out["id"]]++
	}
	if created != 1 || ok != n-1 {
		t.Fatalf("%d created and %d found, want 1 and %d", created, ok, n-1)
	}
	if len(ids) != 1 {
		t.Fatalf("answers carry %d different ids: %v", len(ids), ids)
	}
	p, err := e.eng.List(context.Background(), orchestrator.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Sagas) != 1 {
		t.Fatalf("%d sagas for one idempotency key", len(p.Sagas))
	}
	var outbox int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM orch.outbox`).Scan(&outbox); err != nil {
		t.Fatal(err)
	}
	if outbox != 1 {
		t.Fatalf("%d first commands enqueued for one saga, want 1", outbox)
	}
}
