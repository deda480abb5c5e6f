package participants_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
)

// fixture is a migrated participant "pt" with a business table pt.effects
// that handlers write, so effects can be counted.
type fixture struct {
	pool *pgxpool.Pool
	p    *participants.Participant
	ctx  context.Context
}

func setup(t *testing.T) *fixture {
	t.Helper()
	pool := testkit.Pool(t)
	p, err := participants.New(pool, &participants.Config{Name: "pt", ReplyTopics: []string{"saga.replies", "orders.replies"}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	testkit.Migrate(t, pool, testkit.MustSets(t)(p.Migrations()))
	ctx := testkit.Context(t, 60*time.Second)
	if _, err := pool.Exec(ctx, `CREATE TABLE pt.effects (saga_id uuid NOT NULL, step text NOT NULL, action text NOT NULL)`); err != nil {
		t.Fatalf("create effects table: %v", err)
	}
	return &fixture{pool: pool, p: p, ctx: ctx}
}

// effect is a handler that writes one effects row and answers res.
func effect(res participants.Result, calls *atomic.Int32) participants.Handler {
	return participants.One(effectOne(res, calls))
}

// effectOne is effect as a function of one command.
func effectOne(res participants.Result, calls *atomic.Int32) func(context.Context, pgx.Tx, message.Command) (participants.Result, error) {
	return func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
		if calls != nil {
			calls.Add(1)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO pt.effects VALUES ($1, $2, $3)`, cmd.SagaID, cmd.Step, string(cmd.Action)); err != nil {
			return participants.Result{}, err
		}
		return res, nil
	}
}

func command(sagaID uuid.UUID, step string, action message.Action) message.Command {
	return message.Command{
		MessageID:   uuid.New(),
		SagaID:      sagaID,
		SagaType:    "test",
		AggregateID: "agg-1",
		Step:        step,
		Action:      action,
		Attempt:     1,
		ReplyTo:     "saga.replies",
		SentAt:      time.Now().UTC(),
		Payload:     json.RawMessage(`{"sku":"a","qty":2}`),
	}
}

// copyOf is another send of cmd: a fresh message id, same idempotency key.
func copyOf(cmd message.Command) message.Command {
	c := cmd
	c.MessageID = uuid.New()
	c.Attempt++
	return c
}

// exec runs cmd in its own committed transaction.
func (f *fixture) exec(t *testing.T, cmd message.Command) message.Reply {
	t.Helper()
	r, err := f.execErr(cmd)
	if err != nil {
		t.Fatalf("Execute %s %s: %v", cmd.Step, cmd.Action, err)
	}
	if r.InReplyTo != cmd.MessageID || r.SagaID != cmd.SagaID || r.Step != cmd.Step || r.Action != cmd.Action || r.MessageID == uuid.Nil || r.MessageID == cmd.MessageID {
		t.Fatalf("reply ids do not match command: %+v for %+v", r, cmd)
	}
	if _, err := message.EncodeReply(r); err != nil {
		t.Fatalf("reply does not encode: %v", err)
	}
	return r
}

func (f *fixture) execErr(cmd message.Command) (message.Reply, error) {
	var r message.Reply
	err := pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
		var err error
		r, err = f.p.Execute(f.ctx, tx, cmd)
		return err
	})
	return r, err
}

func (f *fixture) effects(t *testing.T, sagaID uuid.UUID, action message.Action) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pt.effects WHERE saga_id = $1 AND action = $2`, sagaID, string(action)).Scan(&n); err != nil {
		t.Fatalf("count effects: %v", err)
	}
	return n
}

func wantOutcome(t *testing.T, r message.Reply, o message.Outcome, reason string) {
	t.Helper()
	if r.Outcome != o || r.Reason != reason {
		t.Fatalf("reply outcome %q reason %q, want %q reason %q", r.Outcome, r.Reason, o, reason)
	}
}

func TestForwardSuccessExecutesOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var calls atomic.Int32
	type out struct {
		Reservation string `json:"reservation"`
		Qty         int    `json:"qty"`
	}
	if err := f.p.Handle("reserve", effect(participants.Success(out{Reservation: "r-1", Qty: 2}), &calls), nil); err != nil {
		t.Fatal(err)
	}
	saga := uuid.New()
	cmd := command(saga, "reserve", message.Forward)
	first := f.exec(t, cmd)
	wantOutcome(t, first, message.Success, "")
	var got out
	if err := json.Unmarshal(first.Payload, &got); err != nil || got != (out{"r-1", 2}) {
		t.Fatalf("payload %s (%v), want the handler's output", first.Payload, err)
	}
	again := f.exec(t, cmd)          // the same record redelivered
	copied := f.exec(t, copyOf(cmd)) // an orchestrator re-send
	for _, r := range []message.Reply{again, copied} {
		wantOutcome(t, r, message.Success, "")
		if string(r.Payload) != string(first.Payload) {
			t.Fatalf("duplicate payload %s, want %s", r.Payload, first.Payload)
		}
	}
	if n := f.effects(t, saga, message.Forward); n != 1 {
		t.Fatalf("%d forward effects, want 1", n)
	}
	if c := calls.Load(); c != 1 {
		t.Fatalf("handler called %d times, want 1", c)
	}
}

func TestForwardSuccessWithoutPayload(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if err := f.p.Handle("s", effect(participants.Success(nil), nil), nil); err != nil {
		t.Fatal(err)
	}
	cmd := command(uuid.New(), "s", message.Forward)
	for _, c := range []message.Command{cmd, copyOf(cmd)} {
		r := f.exec(t, c)
		wantOutcome(t, r, message.Success, "")
		if r.Payload != nil {
			t.Fatalf("payload %s, want none", r.Payload)
		}
	}
}

func TestForwardFailureLeavesNoEffect(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var calls atomic.Int32
	if err := f.p.Handle("reserve", effect(participants.Fail("out of stock"), &calls), nil); err != nil {
		t.Fatal(err)
	}
	saga := uuid.New()
	cmd := command(saga, "reserve", message.Forward)
	wantOutcome(t, f.exec(t, cmd), message.Failure, "out of stock")
	if n := f.effects(t, saga, message.Forward); n != 0 {
		t.Fatalf("%d effects remain after a failure, want 0", n)
	}
	wantOutcome(t, f.exec(t, copyOf(cmd)), message.Failure, "out of stock")
	if c := calls.Load(); c != 1 {
		t.Fatalf("handler called %d times, want 1", c)
	}
}

func TestForwardRetryRecordsNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var calls atomic.Int32
	retry := effectOne(participants.RetryLater("warehouse busy"), nil)
	succeed := effectOne(participants.Success(map[string]any{"ok": true}), nil)
	fwd := func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
		if calls.Add(1) == 1 {
			return retry(ctx, tx, cmd)
		}
		return succeed(ctx, tx, cmd)
	}
	if err := f.p.Handle("reserve", participants.One(fwd), nil); err != nil {
		t.Fatal(err)
	}
	saga := uuid.New()
	cmd := command(saga, "reserve", message.Forward)
	wantOutcome(t, f.exec(t, cmd), message.Retry, "warehouse busy")
	if n := f.effects(t, saga, message.Forward); n != 0 {
		t.Fatalf("%d effects after retry, want 0", n)
	}
	var rows int
	if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pt.barrier WHERE saga_id = $1`, saga).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d barrier rows after retry (%v), want 0", rows, err)
	}
	r := f.exec(t, copyOf(cmd))
	wantOutcome(t, r, message.Success, "")
	if string(r.Payload) != `{"ok": true}` && string(r.Payload) != `{"ok":true}` {
		t.Fatalf("payload %s", r.Payload)
	}
	if n := f.effects(t, saga, message.Forward); n != 1 {
		t.Fatalf("%d effects after the second copy, want 1", n)
	}
}

func TestCompensationAfterSuccessRunsOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var comps atomic.Int32
	if err := f.p.Handle("reserve", effect(participants.Success(nil), nil), effect(participants.Success(nil), &comps)); err != nil {
		t.Fatal(err)
	}
	saga := uuid.New()
	wantOutcome(t, f.exec(t, command(saga, "reserve", message.Forward)), message.Success, "")
	comp := command(saga, "reserve", message.Compensate)
	wantOutcome(t, f.exec(t, comp), message.Success, "")
	wantOutcome(t, f.exec(t, comp), message.Success, "")
	wantOutcome(t, f.exec(t, copyOf(comp)), message.Success, "")
	if n := f.effects(t, saga, message.Compensate); n != 1 {
		t.Fatalf("%d compensation effects, want 1", n)
	}
	if c := comps.Load(); c != 1 {
		t.Fatalf("compensate handler called %d times, want 1", c)
	}
	// A late forward copy still answers its recorded success, not a re-run.
	wantOutcome(t, f.exec(t, command(saga, "reserve", message.Forward)), message.Success, "")
	if n := f.effects(t, saga, message.Forward); n != 1 {
		t.Fatalf("%d forward effects, want 1", n)
	}
}

func TestEmptyCompensationRefusesLateForward(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var fwds, comps atomic.Int32
	if err := f.p.Handle("reserve", effect(participants.Success(nil), &fwds), effect(participants.Success(nil), &comps)); err != nil {
		t.Fatal(err)
	}
	saga := uuid.New()
	comp := command(saga, "reserve", message.Compensate)
	wantOutcome(t, f.exec(t, comp), message.Success, participants.ReasonEmpty)
	wantOutcome(t, f.exec(t, copyOf(comp)), message.Success, participants.ReasonEmpty)
	fwd := command(saga, "reserve", message.Forward)
	wantOutcome(t, f.exec(t, fwd), message.Failure, participants.ReasonCompensated)
	wantOutcome(t, f.exec(t, copyOf(fwd)), message.Failure, participants.ReasonCompensated)
	if fwds.Load() != 0 || comps.Load() != 0 {
		t.Fatalf("handlers called: forward %d compensate %d, want 0 and 0", fwds.Load(), comps.Load())
	}
	if n := f.effects(t, saga, message.Forward) + f.effects(t, saga, message.Compensate); n != 0 {
		t.Fatalf("%d effects, want 0", n)
	}
}

func TestCompensationAfterFailedForwardIsEmpty(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var comps atomic.Int32
	if err := f.p.Handle("reserve", effect(participants.Fail("no stock"), nil), effect(participants.Success(nil), &comps)); err != nil {
		t.Fatal(err)
	}
	saga := uuid.New()
	wantOutcome(t, f.exec(t, command(saga, "reserve", message.Forward)), message.Failure, "no stock")
	wantOutcome(t, f.exec(t, command(saga, "reserve", message.Compensate)), message.Success, participants.ReasonEmpty)
	if c := comps.Load(); c != 0 {
		t.Fatalf("compensate handler called %d times, want 0", c)
	}
	if n := f.effects(t, saga, message.Compensate); n != 0 {
		t.Fatalf("%d compensation effects, want 0", n)
	}
}

func TestCompensationRetryRecordsNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var comps atomic.Int32
	retry := effectOne(participants.RetryLater("ledger locked"), nil)
	fail := effectOne(participants.Fail("cannot undo yet"), nil)
	ok := effectOne(participants.Success(nil), nil)
	compFn := func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
		switch comps.Add(1) {
		case 1:
			return retry(ctx, tx, cmd)
		case 2:
			return fail(ctx, tx, cmd)
		}
		return ok(ctx, tx, cmd)
	}
	if err := f.p.Handle("reserve", effect(participants.Success(nil), nil), participants.One(compFn)); err != nil {
		t.Fatal(err)
	}
	saga := uuid.New()
	wantOutcome(t, f.exec(t, command(saga, "reserve", message.Forward)), message.Success, "")
	comp := command(saga, "reserve", message.Compensate)
	wantOutcome(t, f.exec(t, comp), message.Retry, "ledger locked")
	wantOutcome(t, f.exec(t, copyOf(comp)), message.Retry, "cannot undo yet")
	if n := f.effects(t, saga, message.Compensate); n != 0 {
		t.Fatalf("%d compensation effects after retries, want 0", n)
	}
	wantOutcome(t, f.exec(t, copyOf(comp)), message.Success, "")
	wantOutcome(t, f.exec(t, copyOf(comp)), message.Success, "")
	if n := f.effects(t, saga, message.Compensate); n != 1 {
		t.Fatalf("%d compensation effects, want 1", n)
	}
	if c := comps.Load(); c != 3 {
		t.Fatalf("compensate handler called %d times, want 3", c)
	}
}

func TestCompensateWithoutHandlerAnswersFailure(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if err := f.p.Handle("charge", effect(participants.Success(nil), nil), nil); err != nil {
		t.Fatal(err)
	}
	saga := uuid.New()
	wantOutcome(t, f.exec(t, command(saga, "charge", message.Forward)), message.Success, "")
	wantOutcome(t, f.exec(t, command(saga, "charge", message.Compensate)), message.Failure, participants.ReasonNoCompensation)
	if n := f.effects(t, saga, message.Forward); n != 1 {
		t.Fatalf("%d forward effects, want 1", n)
	}
}

func TestInvalidPayloadAnswersFailure(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var calls atomic.Int32
	type in struct {
		Qty int `json:"qty"`
	}
	fwd := func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
		calls.Add(1)
		if _, err := tx.Exec(ctx, `INSERT INTO pt.effects VALUES ($1, $2, 'forward')`, cmd.SagaID, cmd.Step); err != nil {
			return participants.Result{}, err
		}
		v, err := participants.Decode[in](cmd)
		if err != nil {
			return participants.Result{}, err
		}
		return participants.Success(v), nil
	}
	if err := f.p.Handle("reserve", participants.One(fwd), nil); err != nil {
		t.Fatal(err)
	}
	saga := uuid.New()
	cmd := command(saga, "reserve", message.Forward)
	cmd.Payload = json.RawMessage(`{"qty":"two"}`)
	r := f.exec(t, cmd)
	if r.Outcome != message.Failure || !strings.HasPrefix(r.Reason, participants.ReasonInvalidPayloadPrefix) || !strings.Contains(r.Reason, "qty") {
		t.Fatalf("reply %q %q, want failure with an invalid_payload reason naming qty", r.Outcome, r.Reason)
	}
	again := f.exec(t, copyOf(cmd))
	wantOutcome(t, again, message.Failure, r.Reason)
	if n := f.effects(t, saga, message.Forward); n != 0 {
		t.Fatalf("%d effects after an invalid payload, want 0", n)
	}
	if c := calls.Load(); c != 1 {
		t.Fatalf("handler called %d times, want 1", c)
	}
}

func TestHandlerErrorRollsBack(t *testing.T) {
	t.Parallel()
	f := setup(t)
	boom := errors.New("disk on fire")
	var calls atomic.Int32
	fwd := func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
		if calls.Add(1) == 1 {
			return participants.Result{}, boom
		}
		return effectOne(participants.Success(nil), nil)(ctx, tx, cmd)
	}
	if err := f.p.Handle("reserve", participants.One(fwd), nil); err != nil {
		t.Fatal(err)
	}
	saga := uuid.New()
	cmd := command(saga, "reserve", message.Forward)
	if _, err := f.execErr(cmd); !errors.Is(err, boom) || !strings.Contains(err.Error(), saga.String()) {
		t.Fatalf("Execute error %v, want the handler's error naming the saga", err)
	}
	wantOutcome(t, f.exec(t, cmd), message.Success, "")
	if n := f.effects(t, saga, message.Forward); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

func TestBadResultIsAnError(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if err := f.p.Handle("list", effect(participants.Success([]int{1, 2}), nil), nil); err != nil {
		t.Fatal(err)
	}
	if err := f.p.Handle("zero", effect(participants.Result{}, nil), nil); err != nil {
		t.Fatal(err)
	}
	saga := uuid.New()
	if _, err := f.execErr(command(saga, "list", message.Forward)); err == nil || !strings.Contains(err.Error(), "JSON object") {
		t.Fatalf("Execute with an array payload: %v, want an error", err)
	}
	if _, err := f.execErr(command(saga, "zero", message.Forward)); err == nil || !strings.Contains(err.Error(), "outcome") {
		t.Fatalf("Execute with a zero Result: %v, want an error", err)
	}
	if n := f.effects(t, saga, message.Forward); n != 0 {
		t.Fatalf("%d effects, want 0 (transactions rolled back)", n)
	}
}

func TestUnknownStepIsInvalid(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cmd := command(uuid.New(), "nope", message.Forward)
	_, err := f.execErr(cmd)
	if !errors.Is(err, message.ErrInvalid) || !strings.Contains(err.Error(), `"nope"`) || !strings.Contains(err.Error(), `"pt"`) {
		t.Fatalf("Execute unknown step: %v, want ErrInvalid naming participant and step", err)
	}
}

func TestConcurrentCopiesExecuteOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var calls atomic.Int32
	if err := f.p.Handle("reserve", effect(participants.Success(map[string]int{"n": 1}), &calls), nil); err != nil {
		t.Fatal(err)
	}
	saga := uuid.New()
	cmd := command(saga, "reserve", message.Forward)
	const copies = 8
	replies := make([]message.Reply, copies)
	errs := make([]error, copies)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range copies {
		wg.Go(func() {
			<-start
			c := cmd
			if i%2 == 1 {
				c = copyOf(cmd)
			}
			replies[i], errs[i] = f.execErr(c)
		})
	}
	close(start)
	wg.Wait()
	for i := range copies {
		if errs[i] != nil {
			t.Fatalf("copy %d: %v", i, errs[i])
		}
		wantOutcome(t, replies[i], message.Success, "")
		if string(replies[i].Payload) != string(replies[0].Payload) {
			t.Fatalf("copy %d payload %s, copy 0 %s", i, replies[i].Payload, replies[0].Payload)
		}
	}
	if n := f.effects(t, saga, message.Forward); n != 1 {
		t.Fatalf("%d effects from %d concurrent copies, want 1", n, copies)
	}
	if c := calls.Load(); c != 1 {
		t.Fatalf("handler called %d times, want 1", c)
	}
}

// A forward racing its compensation must never leave a forward effect
// without its compensation: either both ran, or neither did.
func TestForwardRacingCompensation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if err := f.p.Handle("reserve", effect(participants.Success(nil), nil), effect(participants.Success(nil), nil)); err != nil {
		t.Fatal(err)
	}
	ids, fwd, comp := f.race(t, 50, message.Forward, message.Compensate)
	type pair struct{ fwd, comp message.Reply }
	replies := make([]pair, len(ids))
	for i := range ids {
		replies[i] = pair{fwd[i], comp[i]}
	}
	var both, neither int
	for i, id := range ids {
		fe, ce := f.effects(t, id, message.Forward), f.effects(t, id, message.Compensate)
		r := replies[i]
		if r.comp.Outcome != message.Success {
			t.Fatalf("saga %d: compensation answered %q %q, want success", i, r.comp.Outcome, r.comp.Reason)
		}
		switch {
		case fe == 1 && ce == 1:
			both++
			wantOutcome(t, r.fwd, message.Success, "")
			wantOutcome(t, r.comp, message.Success, "")
		case fe == 0 && ce == 0:
			neither++
			wantOutcome(t, r.fwd, message.Failure, participants.ReasonCompensated)
			wantOutcome(t, r.comp, message.Success, participants.ReasonEmpty)
		default:
			t.Fatalf("saga %d: %d forward and %d compensation effects; want 1/1 or 0/0", i, fe, ce)
		}
	}
	t.Logf("%d sagas compensated a done forward, %d closed the forward first", both, neither)
}

// A handler's reason longer than the wire allows, or with a NUL or invalid
// UTF-8, is cut and cleaned: the failure is recorded and answered, the
// command is not made invalid by its own answer.
func TestUncleanLongReasonIsCutNotFatal(t *testing.T) {
	t.Parallel()
	f := setup(t)
	reason := "declined\x00 " + strings.Repeat("é", 2000) + "\xff"
	if err := f.p.Handle("reserve", effect(participants.Fail(reason), nil), nil); err != nil {
		t.Fatal(err)
	}
	cmd := command(uuid.New(), "reserve", message.Forward)
	r := f.exec(t, cmd)
	if r.Outcome != message.Failure || len(r.Reason) > message.MaxReasonBytesDefault || !utf8.ValidString(r.Reason) || strings.ContainsRune(r.Reason, 0) || !strings.HasPrefix(r.Reason, "declined") {
		t.Fatalf("reply %s with a %d-byte reason %.40q, want a failure with a clean reason of at most %d bytes", r.Outcome, len(r.Reason), r.Reason, message.MaxReasonBytesDefault)
	}
	if _, err := message.EncodeReply(r); err != nil {
		t.Fatalf("the answer does not encode: %v", err)
	}
	if again := f.exec(t, copyOf(cmd)); again.Reason != r.Reason {
		t.Fatalf("a copy is answered %q, want the recorded %q", again.Reason, r.Reason)
	}
}

// race sends, for each of n new sagas, the step "reserve" with action a and
// with action b at the same moment, and returns the sagas and both answers.
func (f *fixture) race(t *testing.T, n int, a, b message.Action) (ids []uuid.UUID, ra, rb []message.Reply) {
	t.Helper()
	ids, ra, rb = make([]uuid.UUID, n), make([]message.Reply, n), make([]message.Reply, n)
	errs := make(chan error, 2*n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		ids[i] = uuid.New()
		for _, side := range []struct {
			action message.Action
			into   []message.Reply
		}{{a, ra}, {b, rb}} {
			wg.Go(func() {
				<-start
				r, err := f.execErr(command(ids[i], "reserve", side.action))
				if err != nil {
					errs <- fmt.Errorf("saga %d %s: %w", i, side.action, err)
				}
				side.into[i] = r
			})
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return ids, ra, rb
}
