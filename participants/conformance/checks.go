package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
)

// Check names, in the order they run (the reply checks over every answer,
// and the check of the other topics, come last).
const (
	CheckAnswers                  = "answers"
	CheckForwardSucceeds          = "forward-succeeds"
	CheckIdempotentCopies         = "idempotent-copies"
	CheckCopiesInOneBatch         = "copies-in-one-batch"
	CheckRedeliveryDeduped        = "redelivery-deduped"
	CheckFailureRecorded          = "failure-recorded"
	CheckRetryRecordsNothing      = "retry-records-nothing"
	CheckEmptyCompensation        = "empty-compensation"
	CheckForwardAfterCompensation = "forward-after-compensation-refused"
	CheckCompensationUndoes       = "compensation-undoes"
	CheckCompensationCopies       = "compensation-copies"
	CheckQueryDone                = "query-done"
	CheckQueryFailed              = "query-failed"
	CheckQueryCompensated         = "query-compensated"
	CheckQueryClosed              = "query-closed"
	CheckForwardAfterQueryClosed  = "forward-after-query-closed-refused"
	CheckPoisonUndecodable        = "poison-undecodable-json"
	CheckPoisonHeaderMismatch     = "poison-header-contradicts-body"
	CheckPoisonNoMessageID        = "poison-no-message-id"
	CheckPoisonUnknownStep        = "poison-unknown-step"
	CheckPoisonNUL                = "poison-nul-in-string"
	CheckPoisonUTF8               = "poison-invalid-utf8"
	CheckPoisonReplyTo            = "poison-reply-to-not-allowed"
	CheckCommandUnsigned          = "command-unsigned-refused"
	CheckCommandBadSignature      = "command-bad-signature-refused"
	CheckNothingElsewhere         = "replies-only-to-reply-topic"
	CheckReplyEnvelope            = "reply-envelope"
	CheckReplyHeaders             = "reply-headers"
	CheckReplyCopiesCommand       = "reply-copies-command"
	CheckReplyKey                 = "reply-keyed-by-saga-id"
	CheckReplyPartition           = "reply-partition"
	CheckReplySigned              = "reply-signed"
	CheckKeepsRunning             = "keeps-running"
)

// IdempotencyChecks are the checks a participant that skips its barrier
// (executes every copy) fails.
var IdempotencyChecks = []string{CheckIdempotentCopies, CheckCopiesInOneBatch, CheckFailureRecorded, CheckCompensationCopies}

// SignatureChecks are the checks a participant that does not verify the
// commands' signatures fails.
var SignatureChecks = []string{CheckCommandUnsigned, CheckCommandBadSignature}

func (r *run) runChecks(ctx context.Context) {
	for _, c := range []struct {
		name string
		fn   func(context.Context) error
	}{
		{CheckForwardSucceeds, r.forwardSucceeds},
		{CheckIdempotentCopies, r.idempotentCopies},
		{CheckCopiesInOneBatch, r.copiesInOneBatch},
		{CheckRedeliveryDeduped, r.redeliveryDeduped},
		{CheckFailureRecorded, r.failureRecorded},
		{CheckRetryRecordsNothing, r.retryRecordsNothing},
		{CheckEmptyCompensation, r.emptyCompensation},
		{CheckForwardAfterCompensation, r.forwardAfterCompensation},
		{CheckCompensationUndoes, r.compensationUndoes},
		{CheckCompensationCopies, r.compensationCopies},
		{CheckQueryDone, r.queryDone},
		{CheckQueryFailed, r.queryFailed},
		{CheckQueryCompensated, r.queryCompensated},
		{CheckQueryClosed, r.queryClosed},
		{CheckForwardAfterQueryClosed, r.forwardAfterQueryClosed},
		{CheckAcceptedCompletedLater, r.acceptedCompletedLater},
		{CheckAcceptedCompensationHeld, r.acceptedCompensationHeld},
		{CheckPoisonUndecodable, r.poison(poisonUndecodable)},
		{CheckPoisonHeaderMismatch, r.poison(poisonHeaderMismatch)},
		{CheckPoisonNoMessageID, r.poison(poisonNoMessageID)},
		{CheckPoisonUnknownStep, r.poison(poisonUnknownStep)},
		{CheckPoisonNUL, r.poison(poisonNUL)},
		{CheckPoisonUTF8, r.poison(poisonUTF8)},
		{CheckPoisonReplyTo, r.poison(poisonReplyTo)},
		{CheckCommandUnsigned, r.poisonSigned(poisonUnsigned, false)},
		{CheckCommandBadSignature, r.poisonSigned(poisonBadSignature, false)},
	} {
		if ctx.Err() != nil {
			return
		}
		err := c.fn(ctx)
		if err == nil {
			r.report.add(Check{Name: c.name, Passed: true})
			continue
		}
		if perr := r.proc.exitedEarly(); perr != nil {
			err = fmt.Errorf("%w (%v; its output ends:\n%s)", err, perr, r.proc.out)
		}
		r.report.add(Check{Name: c.name, Why: err.Error()})
		r.cfg.Logger.Warn("check failed", "check", c.name, "why", err.Error())
	}
}

// saga is one saga of a check: its id, aggregate id (also the key of the
// step's effect) and the attempts sent so far per action.
type saga struct {
	id       uuid.UUID
	key      string
	attempts map[message.Action]int
}

func newSaga(key string) *saga {
	return &saga{id: uuid.New(), key: key, attempts: map[message.Action]int{}}
}

func newKey(what string) string { return what + "-" + uuid.NewString()[:13] }

// do sends the next copy of action for s (mode for a forward; a
// compensation carries the key, a query nothing) and waits for the answer.
func (r *run) do(ctx context.Context, s *saga, action message.Action, mode string) (message.Reply, error) {
	s.attempts[action]++
	var payload any
	switch action {
	case message.Forward:
		payload = Input{Key: s.key, Mode: mode}
	case message.Compensate:
		payload = Input{Key: s.key}
	}
	return r.exchange(ctx, r.newCommand(s.id, s.key, action, s.attempts[action], payload))
}

// expect checks a reply's outcome and, if reason is not empty, its reason.
func expect(what string, rep message.Reply, outcome message.Outcome, reason string) error {
	if rep.Outcome != outcome || (reason != "" && rep.Reason != reason) {
		want := string(outcome)
		if reason != "" {
			want += " (" + reason + ")"
		}
		return fmt.Errorf("%s: answered %s, want %s", what, describe(rep), want)
	}
	return nil
}

func describe(rep message.Reply) string {
	s := string(rep.Outcome)
	if rep.Reason != "" {
		s += fmt.Sprintf(" (reason %q)", rep.Reason)
	}
	if len(rep.Payload) > 0 {
		s += " payload " + string(rep.Payload)
	}
	return s
}

// effects reads the Output of a successful forward or compensation and
// checks its key and count.
func effects(what string, rep message.Reply, key string, want int) error {
	if err := expect(what, rep, message.Success, ""); err != nil {
		return err
	}
	var out Output
	dec := json.NewDecoder(bytes.NewReader(rep.Payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil || out.Key != key {
		return fmt.Errorf("%s: payload %s, want {\"key\":%q,\"effects\":N} (the conformance step's output)", what, rep.Payload, key)
	}
	if out.Effects != want {
		return fmt.Errorf("%s: payload %s says %d effect rows for the key, want %d", what, rep.Payload, out.Effects, want)
	}
	return nil
}

// probe executes the forward of a new saga with key and checks that the key
// then has want effect rows: what earlier commands left behind. Sent with
// the same record key, it is handled after them.
func (r *run) probe(ctx context.Context, key string, want int) error {
	rep, err := r.do(ctx, &saga{id: uuid.New(), key: key, attempts: map[message.Action]int{}}, message.Forward, ModeSucceed)
	if err != nil {
		return fmt.Errorf("probe forward of a new saga with the key: %w", err)
	}
	if err := effects("probe forward of a new saga with the same key", rep, key, want); err != nil {
		return fmt.Errorf("%w (so earlier commands left %d effect rows behind)", err, effectCount(rep)-1)
	}
	return nil
}

func effectCount(rep message.Reply) int {
	var out Output
	_ = json.Unmarshal(rep.Payload, &out)
	return out.Effects
}

func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("conformance: encode %T: %v", v, err))
	}
	return b
}

// ask sends the next copy of action for s and checks the answer's outcome
// (and its reason, if reason is set).
func (r *run) ask(ctx context.Context, s *saga, action message.Action, mode, what string, outcome message.Outcome, reason string) (message.Reply, error) {
	rep, err := r.do(ctx, s, action, mode)
	if err == nil {
		err = expect(what, rep, outcome, reason)
	}
	return rep, err
}

// askEffects sends the next copy of action for s and checks that it
// answers success with want effect rows for s's key.
func (r *run) askEffects(ctx context.Context, s *saga, action message.Action, mode, what string, want int) (message.Reply, error) {
	rep, err := r.do(ctx, s, action, mode)
	if err == nil {
		err = effects(what, rep, s.key, want)
	}
	return rep, err
}

func (r *run) forwardSucceeds(ctx context.Context) error {
	_, err := r.askEffects(ctx, newSaga(newKey("forward")), message.Forward, ModeSucceed, "forward (mode succeed)", 1)
	return err
}

func (r *run) idempotentCopies(ctx context.Context) error {
	s := newSaga(newKey("copies"))
	first, err := r.askEffects(ctx, s, message.Forward, ModeSucceed, "first forward", 1)
	if err != nil {
		return err
	}
	for range 2 {
		what := fmt.Sprintf("copy %d of the forward (new message id, same saga_id, step, action)", s.attempts[message.Forward]+1)
		rep, err := r.askEffects(ctx, s, message.Forward, ModeSucceed, what, 1)
		if err != nil {
			return fmt.Errorf("%w: the copy was executed again instead of answered from the record", err)
		}
		if !sameJSON(rep.Payload, first.Payload) {
			return fmt.Errorf("%s: payload %s, want the recorded %s", what, rep.Payload, first.Payload)
		}
	}
	return nil
}

// copiesBurst is how many copies copiesInOneBatch sends back to back.
const copiesBurst = 5

// copiesInOneBatch sends copies of a forward without waiting between them,
// so that a participant that consumes in batches sees them together.
func (r *run) copiesInOneBatch(ctx context.Context) error {
	s := newSaga(newKey("burst"))
	var ids []uuid.UUID
	for range copiesBurst {
		s.attempts[message.Forward]++
		cmd := r.newCommand(s.id, s.key, message.Forward, s.attempts[message.Forward], Input{Key: s.key, Mode: ModeSucceed})
		if _, err := r.send(ctx, cmd); err != nil {
			return err
		}
		ids = append(ids, cmd.MessageID)
	}
	var first message.Reply
	for i, id := range ids {
		rep, err := r.answer(ctx, id)
		if err != nil {
			return err
		}
		if err := effects(fmt.Sprintf("copy %d of %d sent back to back", i+1, copiesBurst), rep, s.key, 1); err != nil {
			return fmt.Errorf("%w: the effect must happen once whatever the copies", err)
		}
		if i == 0 {
			first = rep
		} else if !sameJSON(rep.Payload, first.Payload) {
			return fmt.Errorf("copy %d: payload %s, want the recorded %s", i+1, rep.Payload, first.Payload)
		}
	}
	return nil
}

func (r *run) redeliveryDeduped(ctx context.Context) error {
	s := newSaga(newKey("redelivery"))
	s.attempts[message.Forward]++
	cmd := r.newCommand(s.id, s.key, message.Forward, 1, Input{Key: s.key, Mode: ModeSucceed})
	first, err := r.send(ctx, cmd)
	if err != nil {
		return err
	}
	rep, err := r.answer(ctx, cmd.MessageID)
	if err != nil {
		return err
	}
	if err := effects("forward", rep, s.key, 1); err != nil {
		return err
	}
	if err := r.produce(ctx, first); err != nil { // the same record again
		return err
	}
	rep, err = r.do(ctx, s, message.Forward, ModeSucceed)
	if err != nil {
		return err
	}
	if err := effects("a copy sent after the redelivered record", rep, s.key, 1); err != nil {
		return fmt.Errorf("%w: the redelivered record (same message id) or the copy after it was executed again", err)
	}
	if n := r.repliesTo(cmd.MessageID); n != 1 {
		return fmt.Errorf("message %s delivered twice was answered %d times, want once: dedupe records by their message-id", cmd.MessageID, n)
	}
	return nil
}

func (r *run) failureRecorded(ctx context.Context) error {
	s := newSaga(newKey("failure"))
	if _, err := r.ask(ctx, s, message.Forward, ModeFail, "forward (mode fail)", message.Failure, ReasonFail); err != nil {
		return err
	}
	// A copy that would succeed if executed: the recorded failure answers it.
	if _, err := r.ask(ctx, s, message.Forward, ModeSucceed, "a copy of the failed forward (its payload says succeed)", message.Failure, ReasonFail); err != nil {
		return fmt.Errorf("%w: copies must be answered with the recorded outcome, not executed", err)
	}
	return r.probe(ctx, s.key, 1)
}

func (r *run) retryRecordsNothing(ctx context.Context) error {
	s := newSaga(newKey("retry"))
	if _, err := r.ask(ctx, s, message.Forward, ModeRetry, "forward (mode retry)", message.Retry, ReasonRetry); err != nil {
		return err
	}
	if _, err := r.askEffects(ctx, s, message.Forward, ModeSucceed, "the next copy (mode succeed)", 1); err != nil {
		return fmt.Errorf("%w: after a retry answer the next copy must execute afresh", err)
	}
	return nil
}

func (r *run) emptyCompensation(ctx context.Context) error {
	s := newSaga(newKey("empty"))
	if _, err := r.ask(ctx, s, message.Compensate, "", "compensation without its forward", message.Success, ""); err != nil {
		return err
	}
	return r.probe(ctx, s.key, 1)
}

func (r *run) forwardAfterCompensation(ctx context.Context) error {
	s := newSaga(newKey("late-forward"))
	if _, err := r.do(ctx, s, message.Compensate, ""); err != nil {
		return err
	}
	if _, err := r.ask(ctx, s, message.Forward, ModeSucceed, "forward arriving after its compensation", message.Failure, ""); err != nil {
		return err
	}
	return r.probe(ctx, s.key, 1)
}

// forwardThenCompensate runs a successful forward of a new saga and its
// compensation, returning the saga and the compensation's answer.
func (r *run) forwardThenCompensate(ctx context.Context, what string) (*saga, message.Reply, error) {
	s := newSaga(newKey(what))
	if _, err := r.askEffects(ctx, s, message.Forward, ModeSucceed, "forward", 1); err != nil {
		return nil, message.Reply{}, err
	}
	rep, err := r.do(ctx, s, message.Compensate, "")
	return s, rep, err
}

func (r *run) compensationUndoes(ctx context.Context) error {
	s, rep, err := r.forwardThenCompensate(ctx, "undo")
	if err != nil {
		return err
	}
	if err := effects("compensation of a successful forward", rep, s.key, 0); err != nil {
		return err
	}
	return r.probe(ctx, s.key, 1)
}

func (r *run) compensationCopies(ctx context.Context) error {
	s, first, err := r.forwardThenCompensate(ctx, "undo-copies")
	if err != nil {
		return err
	}
	rep, err := r.do(ctx, s, message.Compensate, "")
	if err != nil {
		return err
	}
	if rep.Outcome != first.Outcome || !sameJSON(rep.Payload, first.Payload) {
		return fmt.Errorf("a copy of the compensation: answered %s, want the recorded %s", describe(rep), describe(first))
	}
	// A copy of the forward after the compensation must not execute again.
	if _, err := r.do(ctx, s, message.Forward, ModeSucceed); err != nil {
		return err
	}
	return r.probe(ctx, s.key, 1)
}

// query sends a query for s and decodes the answer.
func (r *run) query(ctx context.Context, s *saga) (message.QueryAnswer, error) {
	rep, err := r.ask(ctx, s, message.Query, "", "query", message.Success, "")
	if err != nil {
		return message.QueryAnswer{}, err
	}
	ans, err := message.DecodeQueryAnswer(rep.Payload)
	if err != nil {
		return message.QueryAnswer{}, fmt.Errorf("query: answer payload %s: %w", rep.Payload, err)
	}
	return ans, nil
}

func wantState(ans message.QueryAnswer, want message.QueryState) error {
	if ans.State != want {
		return fmt.Errorf("query answered state %q, want %q", ans.State, want)
	}
	if want != message.QueryDone && len(ans.Output) > 0 {
		return fmt.Errorf("query answered state %q with an output; only done carries one", ans.State)
	}
	return nil
}

func (r *run) queryDone(ctx context.Context) error {
	s := newSaga(newKey("query-done"))
	fwd, err := r.askEffects(ctx, s, message.Forward, ModeSucceed, "forward", 1)
	if err != nil {
		return err
	}
	for range 2 { // every copy reads the barrier afresh
		ans, err := r.query(ctx, s)
		if err != nil {
			return err
		}
		if err := wantState(ans, message.QueryDone); err != nil {
			return err
		}
		if !sameJSON(ans.Output, fwd.Payload) {
			return fmt.Errorf("query answered done with output %s, want the forward's recorded output %s", ans.Output, fwd.Payload)
		}
	}
	return nil
}

func (r *run) queryFailed(ctx context.Context) error {
	s := newSaga(newKey("query-failed"))
	if _, err := r.ask(ctx, s, message.Forward, ModeFail, "forward (mode fail)", message.Failure, ReasonFail); err != nil {
		return err
	}
	ans, err := r.query(ctx, s)
	if err != nil {
		return err
	}
	return wantState(ans, message.QueryFailed)
}

func (r *run) queryCompensated(ctx context.Context) error {
	s, rep, err := r.forwardThenCompensate(ctx, "query-compensated")
	if err == nil {
		err = expect("compensation", rep, message.Success, "")
	}
	if err != nil {
		return err
	}
	ans, err := r.query(ctx, s)
	if err != nil {
		return err
	}
	return wantState(ans, message.QueryCompensated)
}

func (r *run) queryClosed(ctx context.Context) error {
	ans, err := r.query(ctx, newSaga(newKey("query-closed")))
	if err != nil {
		return err
	}
	return wantState(ans, message.QueryClosed)
}

func (r *run) forwardAfterQueryClosed(ctx context.Context) error {
	s := newSaga(newKey("query-late-forward"))
	ans, err := r.query(ctx, s)
	if err == nil {
		err = wantState(ans, message.QueryClosed)
	}
	if err != nil {
		return err
	}
	if _, err := r.ask(ctx, s, message.Forward, ModeSucceed, "forward arriving after a query answered closed", message.Failure, ""); err != nil {
		return err
	}
	return r.probe(ctx, s.key, 1)
}
