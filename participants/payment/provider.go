package payment

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/external"
	"github.com/sagaflow/sagaflow/participants/internal/refstep"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// ProviderOptions configures charge-payment through an outside payment
// provider (RegisterProvider).
type ProviderOptions struct {
	// URL is the provider's base URL (required): POST /charges with an
	// Idempotency-Key header and {"amount_cents"} charges once per key
	// and answers {"charge_id", "declined"}; GET /charges/{key} answers
	// what it did for the key (404: nothing). participants/external/
	// fakeprovider is such a provider.
	URL string
	// Client makes the HTTP calls (default: a new http.Client; each call
	// is bounded by External.CallTimeout).
	Client *http.Client
	// External tunes the calls (in flight, timeouts, backoff, circuit);
	// its Step, Call, Lookup and Settled are set by RegisterProvider.
	External external.Config
}

// ProviderMigrations are the business sets of payment in provider mode:
// the ledger and the calls table (external.Migrations).
func ProviderMigrations(schema string) ([]migrations.Set, error) {
	ledger, err := Migrations(schema)
	if err != nil {
		return nil, err
	}
	calls, err := external.Migrations(schema)
	if err != nil {
		return nil, err
	}
	return append(ledger, calls...), nil
}

// RegisterProvider adds the charge-payment forward to p, charged through
// the provider the safe way (package participants/external): the handler
// records the charge to make and answers accepted; the returned Caller,
// run next to the participant (Caller.Run), makes the charge after the
// commit with an idempotency key derived from the step's barrier key,
// retried and bounded, and settles the step with the provider's answer:
// a charge completes it with its id as the payment id (and appends the
// ledger row in that transaction), a decline fails it
// (orderapi.ReasonPaymentDeclined). When the orchestrator queries the
// accepted step, the charge is looked up at the provider. pool is p's.
func RegisterProvider(p *participants.Participant, pool *pgxpool.Pool, opts ProviderOptions) (*external.Caller, error) {
	if opts.URL == "" {
		return nil, errors.New("payment: ProviderOptions.URL is required")
	}
	if opts.Client == nil {
		opts.Client = &http.Client{}
	}
	pr := provider{url: opts.URL, client: opts.Client, ledger: refstep.Table(p.Schema(), "ledger")}
	var caller *external.Caller
	err := refstep.Register(p, orderapi.Payment, func(string) refstep.Step[orderapi.ChargePayment] {
		return refstep.Step[orderapi.ChargePayment]{Name: orderapi.StepChargePayment, Check: check,
			Forward: func(ctx context.Context, tx pgx.Tx, cmd message.Command, in orderapi.ChargePayment) (participants.Result, error) {
				return caller.Intend(ctx, tx, cmd, in)
			}}
	})
	if err != nil {
		return nil, err
	}
	cfg := opts.External
	cfg.Step, cfg.Call, cfg.Lookup, cfg.Settled = orderapi.StepChargePayment, pr.charge, pr.lookup, pr.record
	caller, err = external.New(p, pool, cfg)
	if err != nil {
		return nil, fmt.Errorf("payment: %w", err)
	}
	return caller, nil
}

// provider is the HTTP client of the payment provider.
type provider struct {
	url    string
	client *http.Client
	ledger string // qualified table name
}

// providerCharge is the provider's answer.
type providerCharge struct {
	ID       string `json:"charge_id"`
	Declined bool   `json:"declined"`
}

func (pr provider) charge(ctx context.Context, c external.Call) (external.Outcome, error) {
	var in orderapi.ChargePayment
	if err := json.Unmarshal(c.Request, &in); err != nil {
		return external.Outcome{}, fmt.Errorf("payment: recorded request of %s: %w", c.Ref, err)
	}
	body, _ := json.Marshal(map[string]int64{"amount_cents": in.AmountCents})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, pr.url+"/charges", bytes.NewReader(body))
	if err != nil {
		return external.Outcome{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", c.IdempotencyKey)
	out, _, err := pr.do(req)
	return out, err
}

func (pr provider) lookup(ctx context.Context, c external.Call) (external.Outcome, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, pr.url+"/charges/"+c.IdempotencyKey, nil)
	if err != nil {
		return external.Outcome{}, false, err
	}
	return pr.do(req)
}

// do makes req: 200 is a definite answer, 404 "no such charge", a 5xx or
// a transport error transient; any other status is the provider refusing
// the charge for good (declined).
func (pr provider) do(req *http.Request) (external.Outcome, bool, error) {
	resp, err := pr.client.Do(req)
	if err != nil {
		return external.Outcome{}, false, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return external.Outcome{}, false, nil
	case resp.StatusCode >= 500:
		return external.Outcome{}, false, fmt.Errorf("payment provider: %s %s: %s", req.Method, req.URL.Path, resp.Status)
	case resp.StatusCode != http.StatusOK:
		return external.Declined(orderapi.ReasonPaymentDeclined), true, nil
	}
	var ch providerCharge
	if err := json.NewDecoder(resp.Body).Decode(&ch); err != nil {
		return external.Outcome{}, false, fmt.Errorf("payment provider: %s %s: answer: %w", req.Method, req.URL.Path, err)
	}
	if ch.Declined || ch.ID == "" {
		return external.Declined(orderapi.ReasonPaymentDeclined), true, nil
	}
	return external.Done(orderapi.ChargePaymentResult{PaymentID: ch.ID}), true, nil
}

// record appends the ledger row of a charge the provider made, in the
// transaction that completes the step.
func (pr provider) record(ctx context.Context, tx pgx.Tx, c external.Call, out external.Outcome) error {
	if !out.Done {
		return nil
	}
	var in orderapi.ChargePayment
	if err := json.Unmarshal(c.Request, &in); err != nil {
		return fmt.Errorf("payment: recorded request of %s: %w", c.Ref, err)
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+pr.ledger+` (saga_id, order_id, customer, amount_cents, kind)
VALUES ($1, $2, $3, $4, 'charge') ON CONFLICT (saga_id, kind) DO NOTHING`, c.Ref.SagaID, in.OrderID, in.Customer, in.AmountCents)
	return err
}
