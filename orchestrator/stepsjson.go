package orchestrator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/internal/jsonlite"
	"github.com/sagaflow/sagaflow/saga"
)

// The step list is encoded and decoded on every reply the engine applies
// (load, decide, write back), and with encoding/json that was the largest
// single cost of the orchestrator's process (measured:
// docs/perf/figures.md#saga-steps-json). These two functions do the same
// without reflection. The format is the one
// encoding/json writes for []StepState (the struct tags are the contract;
// the tests hold both directions to encoding/json), so rows written by
// either decode with either. Unlike encoding/json, member names are matched
// exactly, not case-insensitively, and unknown members are skipped.

// appendSteps appends steps as a JSON array.
func appendSteps(dst []byte, steps []saga.StepState) ([]byte, error) {
	if steps == nil {
		return append(dst, "null"...), nil
	}
	dst = append(dst, '[')
	for i := range steps {
		if i > 0 {
			dst = append(dst, ',')
		}
		var err error
		if dst, err = appendStep(dst, &steps[i]); err != nil {
			return nil, fmt.Errorf("step %d (%q): %w", i, steps[i].Name, err)
		}
	}
	return append(dst, ']'), nil
}

func appendStep(dst []byte, st *saga.StepState) ([]byte, error) {
	dst = append(dst, `{"name":`...)
	dst = jsonlite.AppendString(dst, st.Name)
	dst = append(dst, `,"kind":`...)
	dst = jsonlite.AppendString(dst, string(st.Kind))
	dst = append(dst, `,"state":`...)
	dst = jsonlite.AppendString(dst, string(st.State))
	dst = append(dst, `,"attempts":`...)
	dst = strconv.AppendInt(dst, int64(st.Attempts), 10)
	dst = append(dst, `,"compensation_attempts":`...)
	dst = strconv.AppendInt(dst, int64(st.CompAttempts), 10)
	if st.RetryAnswers != 0 {
		dst = append(dst, `,"retry_answers":`...)
		dst = strconv.AppendInt(dst, int64(st.RetryAnswers), 10)
	}
	if st.QueryAttempts != 0 {
		dst = append(dst, `,"query_attempts":`...)
		dst = strconv.AppendInt(dst, int64(st.QueryAttempts), 10)
	}
	if st.QueryUntil != 0 {
		dst = append(dst, `,"query_until":`...)
		dst = strconv.AppendInt(dst, int64(st.QueryUntil), 10)
	}
	if st.AcceptedAt != nil {
		dst = append(dst, `,"accepted_at":`...)
		var err error
		if dst, err = appendTime(dst, *st.AcceptedAt); err != nil {
			return nil, fmt.Errorf("accepted_at: %w", err)
		}
	}
	if st.Cancellable {
		dst = append(dst, `,"cancellable":true`...)
	}
	if st.AwaitID != (uuid.UUID{}) {
		dst = append(dst, `,"await_id":"`...)
		dst = append(dst, st.AwaitID.String()...)
		dst = append(dst, '"')
	}
	var err error
	for _, t := range [...]struct {
		name string
		at   *time.Time
	}{
		{"due_at", st.DueAt}, {"started_at", st.StartedAt}, {"finished_at", st.FinishedAt},
		{"compensation_started_at", st.CompStartedAt}, {"compensation_finished_at", st.CompFinishedAt},
	} {
		if t.at == nil {
			continue
		}
		dst = append(append(append(dst, `,"`...), t.name...), `":`...)
		if dst, err = appendTime(dst, *t.at); err != nil {
			return nil, fmt.Errorf("%s: %w", t.name, err)
		}
	}
	if st.LastError != "" {
		dst = append(dst, `,"last_error":`...)
		dst = jsonlite.AppendString(dst, st.LastError)
	}
	if len(st.Output) > 0 {
		dst = append(dst, `,"output":`...)
		// As encoding/json does with a json.RawMessage: validated and
		// compacted.
		if dst, err = appendCompact(dst, st.Output); err != nil {
			return nil, fmt.Errorf("output: %w", err)
		}
	}
	if st.CompensationNote != "" {
		dst = append(dst, `,"compensation_note":`...)
		dst = jsonlite.AppendString(dst, st.CompensationNote)
	}
	if st.Seq != 0 {
		dst = append(dst, `,"done_seq":`...)
		dst = strconv.AppendInt(dst, int64(st.Seq), 10)
	}
	if len(st.Events) > 0 {
		// Events are rare (wait steps only) and small: encoding/json.
		b, err := json.Marshal(st.Events)
		if err != nil {
			return nil, fmt.Errorf("events: %w", err)
		}
		dst = append(append(dst, `,"events":`...), b...)
	}
	return append(dst, '}'), nil
}

// appendTime writes t as time.Time.MarshalJSON does (RFC 3339 with
// nanoseconds), with its range check.
func appendTime(dst []byte, t time.Time) ([]byte, error) {
	if y := t.Year(); y < 0 || y > 9999 {
		return nil, fmt.Errorf("time %v: year outside of range [0,9999]", t)
	}
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"'), nil
}

func appendCompact(dst, raw []byte) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	if err := json.Compact(buf, raw); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decodeSteps parses a JSON array of steps (null: nil).
func decodeSteps(b []byte) ([]saga.StepState, error) {
	r := jsonlite.NewReader(b)
	if r.Null() {
		return nil, r.End()
	}
	if err := r.Expect('['); err != nil {
		return nil, err
	}
	steps := []saga.StepState{}
	for first := true; ; first = false {
		more, err := r.More(first, ']')
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
		var st saga.StepState
		if err := decodeStep(r, &st); err != nil {
			return nil, fmt.Errorf("step %d: %w", len(steps), err)
		}
		steps = append(steps, st)
	}
	return steps, r.End()
}

func decodeStep(r *jsonlite.Reader, st *saga.StepState) error {
	if r.Null() {
		return nil
	}
	return r.Object(func(key []byte) error {
		if err := decodeStepField(r, st, key); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		return nil
	})
}

// decodeStepField reads the value of member key into st. A null leaves the
// field as it is (nil for the times), as with encoding/json.
func decodeStepField(r *jsonlite.Reader, st *saga.StepState, key []byte) error {
	switch string(key) {
	case "name":
		return stringField(r, &st.Name)
	case "kind":
		return stringField(r, (*string)(&st.Kind))
	case "state":
		return stringField(r, (*string)(&st.State))
	case "last_error":
		return stringField(r, &st.LastError)
	case "compensation_note":
		return stringField(r, &st.CompensationNote)
	case "attempts":
		return intField(r, &st.Attempts)
	case "compensation_attempts":
		return intField(r, &st.CompAttempts)
	case "retry_answers":
		return intField(r, &st.RetryAnswers)
	case "query_attempts":
		return intField(r, &st.QueryAttempts)
	case "query_until":
		return intField(r, &st.QueryUntil)
	case "accepted_at":
		return timeField(r, &st.AcceptedAt)
	case "cancellable":
		return boolField(r, &st.Cancellable)
	case "due_at":
		return timeField(r, &st.DueAt)
	case "started_at":
		return timeField(r, &st.StartedAt)
	case "finished_at":
		return timeField(r, &st.FinishedAt)
	case "compensation_started_at":
		return timeField(r, &st.CompStartedAt)
	case "compensation_finished_at":
		return timeField(r, &st.CompFinishedAt)
	case "await_id":
		if r.Null() {
			return nil
		}
		v, err := r.String()
		if err != nil {
			return err
		}
		st.AwaitID, err = uuid.Parse(v)
		return err
	case "done_seq":
		return intField(r, &st.Seq)
	case "events":
		raw, err := r.Raw()
		if err != nil {
			return err
		}
		st.Events = nil
		return json.Unmarshal(raw, &st.Events)
	case "output":
		raw, err := r.Raw()
		if err != nil {
			return err
		}
		st.Output = append(json.RawMessage(nil), raw...)
		return nil
	default:
		return r.Skip()
	}
}

func intField(r *jsonlite.Reader, n *int) error {
	if r.Null() {
		return nil
	}
	v, err := r.Int()
	if err != nil {
		return err
	}
	*n = v
	return nil
}

func timeField(r *jsonlite.Reader, t **time.Time) error {
	if r.Null() {
		*t = nil
		return nil
	}
	v, err := r.String()
	if err != nil {
		return err
	}
	at, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return err
	}
	*t = &at
	return nil
}

func boolField(r *jsonlite.Reader, b *bool) error {
	if r.Null() {
		return nil
	}
	raw, err := r.Raw()
	if err != nil {
		return err
	}
	switch string(raw) {
	case "true":
		*b = true
	case "false":
		*b = false
	default:
		return fmt.Errorf("%.20s is not a boolean", raw)
	}
	return nil
}

func stringField(r *jsonlite.Reader, s *string) error {
	if r.Null() {
		return nil
	}
	v, err := r.String()
	if err != nil {
		return err
	}
	*s = v
	return nil
}
