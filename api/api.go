package api

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
)

// Request bounds.
const (
	// DefaultMaxDataBytes bounds a saga's data in POST /sagas
	// (Config.MaxDataBytes, http.max_data_bytes).
	DefaultMaxDataBytes = 64 << 10
	// startBodySlack is what a start body may hold besides its data: the
	// type, the keys (200 bytes each at most) and the JSON around them.
	startBodySlack = 16 << 10
	// MaxActionBodyBytes bounds an operator action's body and the page's
	// forms.
	MaxActionBodyBytes = 64 << 10
	// HandlerTimeoutDefault bounds one request's handling
	// (Config.HandlerTimeout, http.handler_timeout).
	HandlerTimeoutDefault = 20 * time.Second
	// JournalLimitDefault and JournalLimitMax bound the journal page of
	// GET /sagas/{id} (journal_limit).
	JournalLimitDefault = 100
	JournalLimitMax     = 1000
	// echoMax bounds a value of the request quoted back in an error.
	echoMax = 100
)

// Engine is what the API needs from the saga engine.
type Engine interface {
	Start(ctx context.Context, req orchestrator.StartRequest) (saga.Instance, bool, error)
	GetPage(ctx context.Context, id uuid.UUID, before int64, limit int) (saga.Instance, orchestrator.JournalSlice, error)
	List(ctx context.Context, f orchestrator.Filter) (orchestrator.Page, error)
	Operate(ctx context.Context, id uuid.UUID, op saga.Operator) (saga.Instance, error)
	Registry() *saga.Registry
}

// EventSender is what POST /sagas/{id}/events and /sagas/{id}/cancel
// need; the engine (*orchestrator.Engine) implements it. When the Engine
// given to New does not, they answer 501.
type EventSender interface {
	SendEvent(ctx context.Context, sagaID uuid.UUID, name, eventID string, data json.RawMessage) (orchestrator.EventResult, error)
	Cancel(ctx context.Context, id uuid.UUID, actor, reason string) (saga.Instance, error)
}

// StatsReader is what GET /stats needs; the engine implements it. When the
// Engine given to New does not, /stats answers 501.
type StatsReader interface {
	Stats(ctx context.Context, window time.Duration) (orchestrator.Stats, error)
}

// Server serves the API.
type Server struct {
	eng                 Engine
	cfg                 Config
	mux                 *http.ServeMux
	routes              []Route
	adminTok, clientTok secret
	operators           []operatorSecret
	failures            *failureLimiter
	reads               chan struct{} // a slot per read in progress
}

// New returns the API over eng.
func New(eng Engine, cfg *Config) (*Server, error) {
	if eng == nil {
		return nil, errors.New("api: New: engine is nil")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{eng: eng, cfg: cfg.WithDefaults(), mux: http.NewServeMux()}
	s.adminTok, s.clientTok = newSecret(s.cfg.AdminToken), newSecret(s.cfg.ClientToken)
	s.operators = newOperators(s.cfg.Operators)
	s.reads = make(chan struct{}, cmp.Or(s.cfg.MaxConcurrentReads, MaxConcurrentReadsDefault))
	s.failures = newFailureLimiter(AuthFailureBurst, AuthFailureRefill, AuthFailureClients)
	s.routeAll()
	return s, nil
}

// ServeHTTP sets the headers every answer carries and bounds the
// request's handling by Config.HandlerTimeout. (No endpoint streams.)
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.HandlerTimeout)
	defer cancel()
	s.boundReads(w, r.WithContext(ctx))
}

// Error is the JSON error body.
type Error struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
	// Limit is the bound a 413 answer exceeded, in bytes.
	Limit int `json:"limit,omitempty"`
	// RequestID names a 5xx answer in the server's log.
	RequestID string `json:"request_id,omitempty"`
	// SagaID is the live saga that refused a start (409, saga types of
	// orchestrator.single_live_types).
	SagaID string `json:"saga_id,omitempty"`
	// Done lists the rows a bulk repair (POST /dlq/redrive,
	// /outbox/dead/requeue) had repaired, committed, before it failed.
	Done []int64 `json:"done,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// errorMax bounds an error message.
const errorMax = 1000

func fail(w http.ResponseWriter, status int, field, format string, args ...any) {
	writeJSON(w, status, Error{Error: cut(fmt.Sprintf(format, args...), errorMax), Field: cut(field, echoMax)})
}

// cut shortens s to at most max bytes on a rune boundary, marking the cut.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + fmt.Sprintf("...(%d bytes)", len(s))
}

// echo quotes a value of the request for an error message, cut to
// echoMax bytes.
func echo(v string) string { return strconv.Quote(cut(v, echoMax)) }

// newRequestID returns a random id naming one request in the log.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// internal logs err under a new request id and returns the status and body
// of the answer: 503 when the request ran out of time, else 500; neither
// carries err's text.
func (s *Server) internal(r *http.Request, what string, err error) (int, Error) {
	id := newRequestID()
	status, msg := http.StatusInternalServerError, "internal error"
	if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() != nil {
		status, msg = http.StatusServiceUnavailable, fmt.Sprintf("the request did not finish within %s (http.handler_timeout)", s.cfg.HandlerTimeout)
	}
	s.cfg.Logger.ErrorContext(r.Context(), what, slog.String("request_id", id), slog.String("method", r.Method),
		slog.String("path", cut(r.URL.Path, 200)), slog.String("error", err.Error()))
	return status, Error{Error: msg, RequestID: id}
}

// failInternal answers err as internal does.
func (s *Server) failInternal(w http.ResponseWriter, r *http.Request, what string, err error) {
	status, body := s.internal(r, what, err)
	w.Header().Set("X-Request-Id", body.RequestID)
	writeJSON(w, status, body)
}

// jsonBody reports whether r says its body is JSON: application/json, with
// parameters, a charset only utf-8. Otherwise it answers 415.
func jsonBody(w http.ResponseWriter, r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		if cs, ok := params["charset"]; !ok || strings.EqualFold(cs, "utf-8") {
			return true
		}
	}
	w.Header().Set("Accept-Post", "application/json")
	fail(w, http.StatusUnsupportedMediaType, "", "Content-Type must be application/json, not %s", echo(ct))
	return false
}

// StartBody is the body of POST /sagas.
type StartBody struct {
	Type           string          `json:"type"`
	IdempotencyKey string          `json:"idempotency_key"`
	AggregateID    string          `json:"aggregate_id"`
	Data           json.RawMessage `json:"data"`
}

// StartAnswer answers POST /sagas.
type StartAnswer struct {
	ID      uuid.UUID  `json:"id"`
	Type    string     `json:"type"`
	State   saga.State `json:"state"`
	Created bool       `json:"created"`
}

// decodeBody reads r's JSON body, at most limit bytes, into v; limitMsg
// says what the limit is when it is exceeded (413).
func decodeBody(w http.ResponseWriter, r *http.Request, v any, limit int, limitMsg string) bool {
	if !jsonBody(w, r) {
		return false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(limit)))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeJSON(w, http.StatusRequestEntityTooLarge, Error{Error: limitMsg, Limit: limit})
		} else {
			fail(w, http.StatusBadRequest, "", "the body could not be read (sent too slowly, or cut off)")
		}
		return false
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	err = dec.Decode(v)
	if err == nil && dec.More() {
		fail(w, http.StatusBadRequest, "", "body has text after its JSON object")
		return false
	}
	if err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te):
			fail(w, http.StatusBadRequest, te.Field, "field %s must be a JSON %s", echo(te.Field), te.Type)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			fail(w, http.StatusBadRequest, f, "unknown field %s", echo(f))
		default:
			fail(w, http.StatusBadRequest, "", "body is not valid JSON: %s", cut(err.Error(), 200))
		}
		return false
	}
	return true
}

func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	var b StartBody
	max := s.cfg.MaxDataBytes
	if !decodeBody(w, r, &b, max+startBodySlack, fmt.Sprintf("the body is larger than %d bytes: saga data may be at most %d bytes (http.max_data_bytes)", max+startBodySlack, max)) {
		return
	}
	switch {
	case b.Type == "":
		fail(w, http.StatusBadRequest, "type", "type is required")
		return
	case b.IdempotencyKey == "":
		fail(w, http.StatusBadRequest, "idempotency_key", "idempotency_key is required")
		return
	case b.AggregateID == "":
		fail(w, http.StatusBadRequest, "aggregate_id", "aggregate_id is required")
		return
	case len(b.Data) == 0 || b.Data[0] != '{':
		fail(w, http.StatusBadRequest, "data", "data must be a JSON object")
		return
	case len(b.Data) > max:
		writeJSON(w, http.StatusRequestEntityTooLarge, Error{Field: "data", Limit: max,
			Error: fmt.Sprintf("data is %d bytes; at most %d bytes are accepted (http.max_data_bytes)", len(b.Data), max)})
		return
	}
	if _, ok := s.eng.Registry().Latest(b.Type); !ok {
		fail(w, http.StatusBadRequest, "type", "unknown saga type %s (known: %s)", echo(b.Type), strings.Join(s.eng.Registry().Types(), ", "))
		return
	}
	// Trace context: repeated header fields combine with "," (RFC 9110), so
	// two traceparents make one the engine's door refuses; whatever it
	// refuses is dropped (logged, counted) and the start goes on.
	in, created, err := s.eng.Start(r.Context(), orchestrator.StartRequest{Type: b.Type, IdempotencyKey: b.IdempotencyKey, AggregateID: b.AggregateID, Data: b.Data,
		TraceParent: strings.Join(r.Header.Values("traceparent"), ","), TraceState: strings.Join(r.Header.Values("tracestate"), ",")})
	var live *orchestrator.LiveSagaError
	switch {
	case errors.Is(err, orchestrator.ErrInvalidInput):
		field := "data"
		var ie *orchestrator.InputError
		if errors.As(err, &ie) {
			field = ie.Field
		}
		fail(w, http.StatusBadRequest, field, "%v", err)
		return
	case errors.As(err, &live):
		writeJSON(w, http.StatusConflict, Error{Error: cut(err.Error(), errorMax), Field: "aggregate_id", SagaID: live.ID.String()})
		return
	case err != nil:
		s.failInternal(w, r, "start saga", err)
		return
	}
	status := http.StatusCreated
	if !created {
		status = http.StatusOK
	}
	writeJSON(w, status, StartAnswer{ID: in.ID, Type: in.Type, State: in.State, Created: created})
}

// StepView is one step in GET /sagas/{id}.
type StepView struct {
	saga.StepState
	// AwaitID shadows the step's awaited command id, which is never shown:
	// command ids are keyed by the saga's secret so that only a party that
	// saw the command can answer it.
	AwaitID     *struct{} `json:"await_id,omitempty"`
	Participant string    `json:"participant"`
	// Pivot marks the point of no return.
	Pivot bool `json:"pivot,omitempty"`
	// Group is the parallel group the step is a member of: members run
	// side by side.
	Group string `json:"group,omitempty"`
	// Event is what a wait step waits for.
	Event string `json:"event,omitempty"`
	// Events shadows the events a wait step received: their ids, times
	// and whether taken, not their data.
	Events []EventView `json:"events,omitempty"`
}

// EventView is an event a wait step received (its data is not shown).
type EventView struct {
	ID    string    `json:"id"`
	At    time.Time `json:"at"`
	Taken bool      `json:"taken"`
}

// WaitView is what a saga waits for: a wait step waiting for its event.
type WaitView struct {
	Step       string     `json:"step"`
	Event      string     `json:"event"`
	DeadlineAt *time.Time `json:"deadline_at,omitempty"`
}

// SagaView answers GET /sagas/{id} and the operator actions. Journal is
// one page, oldest first, of the newest entries (those before
// journal_before when given); JournalNext, when set, is the
// journal_before of the page of older entries.
type SagaView struct {
	saga.Instance
	CurrentStep  string              `json:"current_step,omitempty"`
	Steps        []StepView          `json:"steps"`
	Journal      []saga.JournalEntry `json:"journal,omitempty"`
	JournalNext  string              `json:"journal_next,omitempty"`
	JournalTotal int                 `json:"journal_total,omitempty"`
	NextWakeup   *time.Time          `json:"next_wakeup_at,omitempty"`
	// ActiveSteps are the steps awaiting an answer or an event now: the
	// members of a parallel group side by side.
	ActiveSteps []string `json:"active_steps,omitempty"`
	// WaitingFor lists the events the saga waits for now.
	WaitingFor []WaitView `json:"waiting_for,omitempty"`
}

// activeSteps are the steps of in awaiting an answer or an event.
func activeSteps(in saga.Instance) []string {
	if in.State.Terminal() {
		return nil
	}
	var out []string
	for _, st := range in.Steps {
		switch st.State {
		case saga.StepRunning, saga.StepRetrying, saga.StepQuerying, saga.StepAccepted, saga.StepCompensating, saga.StepCompRetrying, saga.StepWaiting:
			out = append(out, st.Name)
		}
	}
	return out
}

func (s *Server) view(in saga.Instance, journal []saga.JournalEntry) SagaView {
	v := SagaView{Instance: in, CurrentStep: activeStep(in), Journal: journal, NextWakeup: in.NextWakeup()}
	def, _ := s.eng.Registry().Lookup(in.Type, in.DefVersion)
	v.ActiveSteps = activeSteps(in)
	for i, st := range in.Steps {
		sv := StepView{StepState: st, Pivot: st.Kind == saga.Pivot}
		for _, ev := range st.Events {
			sv.Events = append(sv.Events, EventView{ID: ev.ID, At: ev.At, Taken: ev.Taken})
		}
		if def != nil && i < len(def.Steps) {
			sv.Participant, sv.Group, sv.Event = def.Steps[i].Participant, def.Steps[i].Group, def.Steps[i].Event
		}
		if st.State == saga.StepWaiting && !in.State.Terminal() {
			v.WaitingFor = append(v.WaitingFor, WaitView{Step: st.Name, Event: sv.Event, DeadlineAt: st.DueAt})
		}
		v.Steps = append(v.Steps, sv)
	}
	return v
}

// SagaSummary is one saga in GET /sagas: its facts without data, steps or
// journal (GET /sagas/{id} has those).
type SagaSummary struct {
	ID             uuid.UUID  `json:"id"`
	Type           string     `json:"type"`
	DefVersion     int        `json:"definition_version"`
	AggregateID    string     `json:"aggregate_id"`
	IdempotencyKey string     `json:"idempotency_key"`
	State          saga.State `json:"state"`
	CurrentStep    string     `json:"current_step,omitempty"`
	Version        int64      `json:"version"`
	Flag           string     `json:"flag,omitempty"`
	DeadlineAt     *time.Time `json:"deadline_at,omitempty"`
	NextWakeup     *time.Time `json:"next_wakeup_at,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	FinishedAt     *time.Time `json:"finished_at,omitempty"`
}

func summary(in saga.Instance) SagaSummary {
	return SagaSummary{ID: in.ID, Type: in.Type, DefVersion: in.DefVersion, AggregateID: in.AggregateID, IdempotencyKey: in.IdempotencyKey,
		State: in.State, CurrentStep: activeStep(in), Version: in.Version, Flag: in.Flag, DeadlineAt: in.DeadlineAt, NextWakeup: in.NextWakeup(),
		CreatedAt: in.CreatedAt, UpdatedAt: in.UpdatedAt, FinishedAt: in.FinishedAt}
}

// JournalPage selects a page of a saga's journal: the Limit newest
// entries with an id below Before (0: the newest).
type JournalPage struct {
	Limit  int
	Before int64
}

// ParseJournalPage reads journal_limit and journal_before.
func ParseJournalPage(q map[string][]string) (JournalPage, string, error) {
	p := JournalPage{Limit: JournalLimitDefault}
	if v := q["journal_limit"]; len(v) > 0 && v[0] != "" {
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 1 || n > JournalLimitMax {
			return p, "journal_limit", fmt.Errorf("journal_limit %s must be an integer from 1 to %d", echo(v[0]), JournalLimitMax)
		}
		p.Limit = n
	}
	if v := q["journal_before"]; len(v) > 0 && v[0] != "" {
		n, err := strconv.ParseInt(v[0], 10, 64)
		if err != nil || n < 1 {
			return p, "journal_before", fmt.Errorf("journal_before %s must be a journal id (a previous answer's journal_next)", echo(v[0]))
		}
		p.Before = n
	}
	return p, "", nil
}

// detail is the view of a saga with one page of its journal.
func (s *Server) detail(in saga.Instance, js orchestrator.JournalSlice) SagaView {
	v := s.view(in, js.Entries)
	if js.Next > 0 {
		v.JournalNext = strconv.FormatInt(js.Next, 10)
	}
	v.JournalTotal = js.Total
	return v
}

// activeStep is the step a saga is at: the active one while it runs or
// compensates, the one it stopped at when failed; "" once settled.
func activeStep(in saga.Instance) string {
	if in.State == saga.Failed && in.Cursor >= 0 && in.Cursor < len(in.Steps) {
		return in.Steps[in.Cursor].Name
	}
	return in.CurrentStep()
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		fail(w, http.StatusBadRequest, "id", "saga id %s is not a UUID", echo(r.PathValue("id")))
		return
	}
	jp, field, err := ParseJournalPage(r.URL.Query())
	if err != nil {
		fail(w, http.StatusBadRequest, field, "%v", err)
		return
	}
	in, js, err := s.eng.GetPage(r.Context(), id, jp.Before, jp.Limit)
	switch {
	case errors.Is(err, saga.ErrNotFound):
		fail(w, http.StatusNotFound, "id", "no saga %s", id)
		return
	case err != nil:
		s.failInternal(w, r, "read saga", err)
		return
	}
	writeJSON(w, http.StatusOK, s.detail(in, js))
}

// ParseFilter reads a orchestrator.Filter from query parameters.
func ParseFilter(q map[string][]string) (orchestrator.Filter, string, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	f := orchestrator.Filter{State: saga.State(get("state")), Type: get("type"), Step: get("step"), Cursor: get("cursor"),
		AggregateID: get("aggregate_id"), IdempotencyKey: get("idempotency_key")}
	if f.State != "" && !f.State.Valid() {
		return f, "state", fmt.Errorf("state %s must be one of running, compensating, completed, compensated, failed", echo(string(f.State)))
	}
	if v := get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > orchestrator.ListLimitMax {
			return f, "limit", fmt.Errorf("limit %s must be an integer from 1 to %d", echo(v), orchestrator.ListLimitMax)
		}
		f.Limit = n
	}
	if v := get("older_than"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > DurationParamMax {
			return f, "older_than", fmt.Errorf("older_than %s must be a duration like 30s or 5m, at most %s", echo(v), DurationParamMax)
		}
		f.OlderThan = d
	}
	if v := get("stuck"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return f, "stuck", fmt.Errorf("stuck %s must be true or false", echo(v))
		}
		f.Stuck = b
	}
	if v := get("stuck_after"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > DurationParamMax {
			return f, "stuck_after", fmt.Errorf("stuck_after %s must be a positive duration, at most %s", echo(v), DurationParamMax)
		}
		f.StuckAfter = d
	}
	return f, "", nil
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	f, field, err := ParseFilter(r.URL.Query())
	if err != nil {
		fail(w, http.StatusBadRequest, field, "%v", err)
		return
	}
	p, err := s.eng.List(r.Context(), f)
	switch {
	case errors.Is(err, orchestrator.ErrInvalidInput):
		fail(w, http.StatusBadRequest, "cursor", "%v", err)
		return
	case err != nil:
		s.failInternal(w, r, "list sagas", err)
		return
	}
	out := struct {
		Sagas []SagaSummary `json:"sagas"`
		Next  string        `json:"next,omitempty"`
	}{Sagas: []SagaSummary{}, Next: p.Next}
	for _, in := range p.Sagas {
		out.Sagas = append(out.Sagas, summary(in))
	}
	writeJSON(w, http.StatusOK, out)
}

// ready answers /readyz. Not ready, the answer says only a generic reason
// (ReadyReason of Config.Ready's error) and a request id; the error itself,
// which may name hosts, users and databases, goes to the log under that id.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if err := s.cfg.Ready(ctx); err != nil {
			id := newRequestID()
			reason := readyReason(err)
			s.cfg.Logger.WarnContext(r.Context(), "not ready", slog.String("request_id", id), slog.String("reason", reason), slog.String("error", err.Error()))
			w.Header().Set("X-Request-Id", id)
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "error": reason, "request_id": id})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// readyReason is the reason of the first error in err's chain with a
// ReadyReason method (orchestrator.NotReadyError), cut and without control
// characters, else "not ready".
func readyReason(err error) string {
	var rr interface{ ReadyReason() string }
	if !errors.As(err, &rr) {
		return "not ready"
	}
	reason := strings.Map(func(c rune) rune {
		if unicode.IsControl(c) {
			return -1
		}
		return c
	}, rr.ReadyReason())
	return cut(reason, echoMax)
}
