package external_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/external"
	"github.com/sagaflow/sagaflow/participants/external/fakeprovider"
	"github.com/sagaflow/sagaflow/participants/participanttest"
)

const step = "charge"

// clock is the caller's clock, moved by the test.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// charge is a CallFunc against the fake provider: a 5xx or a transport
// error (a timeout) is transient.
func charge(url string) external.CallFunc {
	return func(ctx context.Context, c external.Call) (external.Outcome, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/charges", bytes.NewReader(c.Request))
		if err != nil {
			return external.Outcome{}, err
		}
		req.Header.Set("Idempotency-Key", c.IdempotencyKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return external.Outcome{}, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return external.Outcome{}, fmt.Errorf("provider answered %s", resp.Status)
		}
		var ch fakeprovider.Charge
		if err := json.NewDecoder(resp.Body).Decode(&ch); err != nil {
			return external.Outcome{}, err
		}
		if ch.Declined {
			return external.Declined("card_declined"), nil
		}
		return external.Done(map[string]string{"charge_id": ch.ID}), nil
	}
}

type env struct {
	t        *testing.T
	kit      *participanttest.Kit
	provider *fakeprovider.Server
	clock    *clock
	caller   *external.Caller
	ctx      context.Context
}

// newEnv is a participant whose step "charge" records a call to the fake
// provider (declining over 10 000) and answers accepted.
func newEnv(t *testing.T, cfg external.Config) *env {
	t.Helper()
	e := &env{t: t, provider: fakeprovider.Start(10_000), clock: &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, ctx: testkit.Context(t, time.Minute)}
	t.Cleanup(e.provider.Close)
	e.kit = participanttest.New(t, "pay", external.Migrations, func(p *participants.Participant) error {
		return p.Handle(step, participants.One(func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
			in, err := participants.Decode[fakeprovider.Request](cmd)
			if err != nil {
				return participants.Result{}, err
			}
			return e.caller.Intend(ctx, tx, cmd, in)
		}), nil)
	})
	e.caller = e.newCaller(cfg)
	return e
}

// newCaller is another Caller of the step (another process, or the same
// one restarted), on the provider and the clock.
func (e *env) newCaller(cfg external.Config) *external.Caller {
	e.t.Helper()
	cfg.Step, cfg.Now = step, e.clock.Now
	if cfg.Call == nil {
		cfg.Call = charge(e.provider.URL())
	}
	c, err := external.New(e.kit.P, e.kit.Pool, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// start sends the forward of a new saga charging amount: answered accepted.
func (e *env) start(amount int64) participants.Ref {
	e.t.Helper()
	cmd := participanttest.Command(e.t, uuid.New(), step, message.Forward, 1, fakeprovider.Request{AmountCents: amount})
	participanttest.WantReply(e.t, e.kit.Send(cmd)[0], message.Accepted, "")
	return participants.RefOf(cmd)
}

// recorded is what the participant's barrier answers a query of ref.
func (e *env) recorded(ref participants.Ref) message.QueryAnswer {
	e.t.Helper()
	a := e.kit.Send(participanttest.Command(e.t, ref.SagaID, step, message.Query, 1, nil))[0]
	ans, err := message.DecodeQueryAnswer(a.Reply.Payload)
	if err != nil {
		e.t.Fatalf("query answer %+v: %v", a, err)
	}
	return ans
}

func (e *env) runOnce(want int) {
	e.t.Helper()
	n, err := e.caller.RunOnce(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if n != want {
		e.t.Fatalf("RunOnce made %d calls, want %d", n, want)
	}
}

func (e *env) wantState(ref participants.Ref, state string, attempts int) {
	e.t.Helper()
	got, n, last, found, err := e.caller.State(e.ctx, ref)
	if err != nil || !found || got != state || n != attempts {
		e.t.Fatalf("call %s: %q after %d attempts (last error %q, found %v, %v); want %q after %d", ref, got, n, last, found, err, state, attempts)
	}
}

// The call is made after the handler's commit, once, and its answer
// completes the step with the provider's output.
func TestCallCompletesTheStepOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, external.Config{})
	ref := e.start(500)
	if e.provider.Calls() != 0 {
		t.Fatal("the provider was called inside the handler")
	}
	if got := e.recorded(ref).State; got != message.QueryAccepted {
		t.Fatalf("before the call the step is %s, want accepted", got)
	}
	e.runOnce(1)
	ans := e.recorded(ref)
	var out map[string]string
	if ans.State != message.QueryDone || json.Unmarshal(ans.Output, &out) != nil || out["charge_id"] == "" {
		t.Fatalf("after the call the step is %s %s, want done with the charge", ans.State, ans.Output)
	}
	e.wantState(ref, "done", 1)
	e.runOnce(0)
	if n := e.provider.Charged(external.IdempotencyKey(ref)); n != 1 || e.provider.Calls() != 1 {
		t.Fatalf("charged %d times in %d calls, want once", n, e.provider.Calls())
	}
}

// Transient errors (500s) are retried after a growing backoff with the
// same idempotency key; a decline fails the step.
func TestRetriesWithBackoffAndDecline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, external.Config{BackoffInitial: time.Second})
	ref := e.start(700)
	e.provider.FailFirst(2)
	e.runOnce(1)
	e.runOnce(0) // within the backoff
	e.clock.Advance(time.Second)
	e.runOnce(1)
	e.clock.Advance(time.Second)
	e.runOnce(0) // the second backoff is 2s
	e.clock.Advance(time.Second)
	e.runOnce(1)
	e.wantState(ref, "done", 3)
	if e.provider.Charges() != 1 || e.provider.Calls() != 3 {
		t.Fatalf("%d charges in %d calls, want 1 in 3", e.provider.Charges(), e.provider.Calls())
	}
	declined := e.start(50_000)
	e.runOnce(1)
	if got := e.recorded(declined).State; got != message.QueryFailed {
		t.Fatalf("a declined charge left the step %s, want failed", got)
	}
	e.wantState(declined, "failed", 1)
}

// A provider that charges but answers after the call's timeout: the call
// is made again with the same key and the provider answers the same
// charge: charged once.
func TestTimeoutAfterTheChargeChargesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, external.Config{CallTimeout: 100 * time.Millisecond, BackoffInitial: time.Second})
	ref := e.start(900)
	e.provider.SetDelay(time.Second)
	e.runOnce(1)
	e.wantState(ref, "pending", 1)
	e.provider.SetDelay(0)
	e.clock.Advance(time.Second)
	e.runOnce(1)
	e.wantState(ref, "done", 2)
	if n := e.provider.Charges(); n != 1 {
		t.Fatalf("%d charges after a timeout and a retry, want 1", n)
	}
}

// A worker that dies between the provider's answer and its record: the
// intent is still there, leased; after the lease another worker makes the
// call again with the same key and settles the step: charged once.
func TestCrashAfterTheCallResumesFromTheIntent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, external.Config{CallTimeout: time.Second, Lease: 5 * time.Second})
	ref := e.start(300)
	ctx, crash := context.WithCancel(e.ctx)
	dying := e.newCaller(external.Config{CallTimeout: time.Second, Lease: 5 * time.Second, Call: func(cctx context.Context, c external.Call) (external.Outcome, error) {
		out, err := charge(e.provider.URL())(cctx, c)
		crash() // the process dies with the answer in hand
		return out, err
	}})
	if n, err := dying.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("dying worker: %d calls, %v", n, err)
	}
	e.wantState(ref, "pending", 1)
	if got := e.recorded(ref).State; got != message.QueryAccepted {
		t.Fatalf("after the crash the step is %s, want still accepted", got)
	}
	e.runOnce(0) // still leased by the dead worker
	e.clock.Advance(5 * time.Second)
	e.runOnce(1)
	e.wantState(ref, "done", 2)
	if n, calls := e.provider.Charges(), e.provider.Calls(); n != 1 || calls != 2 {
		t.Fatalf("%d charges in %d calls, want 1 in 2", n, calls)
	}
}

// A provider that is down opens the circuit: no calls for the cooldown,
// then one trial; when it is back the trial closes the circuit and the
// others go.
func TestCircuitStopsHammeringADownProvider(t *testing.T) {
	t.Parallel()
	e := newEnv(t, external.Config{CircuitAfter: 2, CircuitCooldown: 10 * time.Second, BackoffInitial: time.Second, BackoffMax: time.Second})
	refs := []participants.Ref{e.start(100), e.start(200), e.start(300)}
	e.provider.SetDown(true)
	e.runOnce(3)
	e.clock.Advance(2 * time.Second) // past the backoff, within the cooldown
	e.runOnce(0)
	e.clock.Advance(10 * time.Second)
	e.runOnce(1) // the half-open trial, still down
	e.clock.Advance(2 * time.Second)
	e.runOnce(0)
	if calls := e.provider.Calls(); calls != 4 {
		t.Fatalf("the provider got %d calls, want 4 (3, then one trial)", calls)
	}
	e.provider.SetDown(false)
	e.clock.Advance(10 * time.Second)
	e.runOnce(1) // the trial succeeds: closed
	e.runOnce(2)
	for _, ref := range refs {
		if got := e.recorded(ref).State; got != message.QueryDone {
			t.Fatalf("step %s is %s, want done", ref, got)
		}
	}
	if e.provider.Charges() != 3 {
		t.Fatalf("%d charges, want 3", e.provider.Charges())
	}
}

// At most MaxInFlight calls are out at once.
func TestCallsInFlightAreBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, external.Config{MaxInFlight: 2})
	for range 5 {
		e.start(100)
	}
	e.provider.SetDelay(50 * time.Millisecond)
	e.runOnce(2)
	e.runOnce(2)
	e.runOnce(1)
	if m := e.provider.MaxInFlight(); m > 2 || m < 1 {
		t.Fatalf("%d calls in flight at once, want at most 2", m)
	}
	if e.provider.Charges() != 5 {
		t.Fatalf("%d charges, want 5", e.provider.Charges())
	}
}

// Run works the calls off until its context ends.
func TestRunWorksTheCallsOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, external.Config{PollInterval: 10 * time.Millisecond})
	ref := e.start(400)
	ctx, stop := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- e.caller.Run(ctx) }()
	testkit.Eventually(t, 10*time.Second, "the call made and recorded", func() (bool, error) {
		st, _, _, _, err := e.caller.State(e.ctx, ref)
		return st == "done", err
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// lookup is a LookupFunc against the fake provider.
func lookup(url string) external.LookupFunc {
	return func(ctx context.Context, c external.Call) (external.Outcome, bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/charges/"+c.IdempotencyKey, nil)
		if err != nil {
			return external.Outcome{}, false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return external.Outcome{}, false, err
		}
		defer resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusNotFound:
			return external.Outcome{}, false, nil
		case http.StatusOK:
		default:
			return external.Outcome{}, false, fmt.Errorf("provider answered %s", resp.Status)
		}
		var ch fakeprovider.Charge
		if err := json.NewDecoder(resp.Body).Decode(&ch); err != nil {
			return external.Outcome{}, false, err
		}
		if ch.Declined {
			return external.Declined("card_declined"), true, nil
		}
		return external.Done(map[string]string{"charge_id": ch.ID}), true, nil
	}
}

// A query of the accepted step (the orchestrator gave up waiting) reaches
// the provider through the lookup hook: a charge whose answer was lost
// settles the step done; a call the provider never did fails it, and it is
// never made afterwards.
func TestQueryLooksTheCallUpAtTheProvider(t *testing.T) {
	t.Parallel()
	var e *env
	e = newEnv(t, external.Config{CallTimeout: 100 * time.Millisecond, BackoffInitial: time.Hour, Lookup: func(ctx context.Context, c external.Call) (external.Outcome, bool, error) {
		return lookup(e.provider.URL())(ctx, c)
	}})
	lost := e.start(600)
	e.provider.SetDelay(time.Second) // charged, but the answer comes too late
	e.runOnce(1)
	e.provider.SetDelay(0)
	never := e.start(800)
	e.provider.SetDown(true) // never charged
	e.runOnce(1)
	e.provider.SetDown(false)
	e.runOnce(0) // both wait out an hour's backoff
	for _, ref := range []participants.Ref{lost, never} {
		if got := e.recorded(ref).State; got != message.QueryAccepted { // the orchestrator's query: hook fires
			t.Fatalf("query of %s: %s, want accepted", ref, got)
		}
	}
	calls := e.provider.Calls()
	e.runOnce(2) // the lookups, at once
	if got := e.recorded(lost); got.State != message.QueryDone || !bytes.Contains(got.Output, []byte("ch_1")) {
		t.Fatalf("the charge whose answer was lost: %s %s, want done with ch_1", got.State, got.Output)
	}
	if got := e.recorded(never).State; got != message.QueryFailed {
		t.Fatalf("the call never made: %s, want failed", got)
	}
	e.wantState(never, "failed", 2)
	e.clock.Advance(2 * time.Hour)
	e.runOnce(0)
	if e.provider.Charges() != 1 || e.provider.Charged(external.IdempotencyKey(never)) != 0 || e.provider.Calls() != calls+2 {
		t.Fatalf("%d charges (never: %d), %d calls after the lookups; want 1, 0, 2 lookups only", e.provider.Charges(), e.provider.Charged(external.IdempotencyKey(never)), e.provider.Calls()-calls)
	}
}
