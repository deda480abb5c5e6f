// Package api is the orchestrator's HTTP interface: start sagas, read their
// status and history (JSON, and the server-rendered status page under
// /ui/), act on them as an operator, pipeline stats, and the health and
// metrics endpoints. Every JSON error answer is {"error": "...", "field":
// "..."} with a 4xx or 5xx status.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sagaflow/sagaflow/saga"
)

// MaxBodyBytes bounds a request body.
const MaxBodyBytes = 1 << 20

// Engine is what the API needs from the saga engine.
type Engine interface {
	Start(ctx context.Context, req saga.StartRequest) (saga.Instance, bool, error)
	Get(ctx context.Context, id uuid.UUID) (saga.Instance, []saga.JournalEntry, error)
	List(ctx context.Context, f saga.Filter) (saga.Page, error)
	Operate(ctx context.Context, id uuid.UUID, op saga.Operator) (saga.Instance, error)
	Registry() *saga.Registry
}

// StatsReader is what GET /stats needs; the engine implements it. When the
// Engine given to New does not, /stats answers 501.
type StatsReader interface {
	Stats(ctx context.Context, window time.Duration) (saga.Stats, error)
}

// Config configures the HTTP API.
type Config struct {
	// AdminToken protects operator actions (Authorization: Bearer <token>).
	// Empty: operator actions are disabled (403).
	AdminToken string
	// ProtectReads also requires the token for read-only endpoints.
	ProtectReads bool
	// Gatherer serves /metrics; nil: no metrics endpoint.
	Gatherer prometheus.Gatherer
	// Ready reports readiness for /readyz; nil: always ready.
	Ready  func(ctx context.Context) error
	Logger *slog.Logger
}

// Server serves the API.
type Server struct {
	eng Engine
	cfg Config
	mux *http.ServeMux
}

// New returns the API over eng.
func New(eng Engine, cfg *Config) *Server {
	s := &Server{eng: eng, mux: http.NewServeMux()}
	if cfg != nil {
		s.cfg = *cfg
	}
	if s.cfg.Logger == nil {
		s.cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s.mux.HandleFunc("POST /sagas", s.read(s.start))
	s.mux.HandleFunc("GET /sagas", s.read(s.list))
	s.mux.HandleFunc("GET /sagas/{id}", s.read(s.get))
	s.mux.HandleFunc("POST /sagas/{id}/actions/{action}", s.admin(s.operate))
	s.mux.HandleFunc("GET /stats", s.read(s.stats))
	s.routePages()
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "alive"})
	})
	s.mux.HandleFunc("GET /readyz", s.ready)
	if s.cfg.Gatherer != nil {
		s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	return s
}

// Mux exposes the router so other packages can add pages.
func (s *Server) Mux() *http.ServeMux { return s.mux }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Error is the JSON error body.
type Error struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func fail(w http.ResponseWriter, status int, field, format string, args ...any) {
	writeJSON(w, status, Error{Error: fmt.Sprintf(format, args...), Field: field})
}

func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.AdminToken == "" {
		return false
	}
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	return ok && subtleEqual(tok, s.cfg.AdminToken)
}

func subtleEqual(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	var v byte
	for i := range len(a) {
		v |= a[i] ^ b[i]
	}
	return v == 0
}

func (s *Server) read(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.ProtectReads && !s.authorized(r) {
			fail(w, http.StatusUnauthorized, "", "a bearer token is required")
			return
		}
		h(w, r)
	}
}

func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.AdminToken == "" {
			fail(w, http.StatusForbidden, "", "operator actions are disabled: set http.admin_token")
			return
		}
		if !s.authorized(r) {
			fail(w, http.StatusUnauthorized, "", "a valid bearer token is required for operator actions")
			return
		}
		h(w, r)
	}
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

func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		fail(w, http.StatusRequestEntityTooLarge, "", "body larger than %d bytes", MaxBodyBytes)
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
			fail(w, http.StatusBadRequest, te.Field, "field %q must be a JSON %s", te.Field, te.Type)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			fail(w, http.StatusBadRequest, f, "unknown field %q", f)
		default:
			fail(w, http.StatusBadRequest, "", "body is not valid JSON: %v", err)
		}
		return false
	}
	return true
}

func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	var b StartBody
	if !decodeBody(w, r, &b) {
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
	}
	if _, ok := s.eng.Registry().Latest(b.Type); !ok {
		fail(w, http.StatusBadRequest, "type", "unknown saga type %q (known: %s)", b.Type, strings.Join(s.eng.Registry().Types(), ", "))
		return
	}
	in, created, err := s.eng.Start(r.Context(), saga.StartRequest{Type: b.Type, IdempotencyKey: b.IdempotencyKey, AggregateID: b.AggregateID, Data: b.Data})
	switch {
	case errors.Is(err, saga.ErrInvalidInput):
		field := "data"
		var ie *saga.InputError
		if errors.As(err, &ie) {
			field = ie.Field
		}
		fail(w, http.StatusBadRequest, field, "%v", err)
		return
	case err != nil:
		s.cfg.Logger.ErrorContext(r.Context(), "start saga", slog.String("error", err.Error()))
		fail(w, http.StatusInternalServerError, "", "could not start the saga: %v", err)
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
	Participant string `json:"participant"`
	// Pivot marks the point of no return.
	Pivot bool `json:"pivot,omitempty"`
}

// SagaView answers GET /sagas/{id}.
type SagaView struct {
	saga.Instance
	CurrentStep string              `json:"current_step,omitempty"`
	Steps       []StepView          `json:"steps"`
	Journal     []saga.JournalEntry `json:"journal,omitempty"`
	NextWakeup  *time.Time          `json:"next_wakeup_at,omitempty"`
}

func (s *Server) view(in saga.Instance, journal []saga.JournalEntry) SagaView {
	v := SagaView{Instance: in, CurrentStep: activeStep(in), Journal: journal, NextWakeup: in.NextWakeup()}
	def, _ := s.eng.Registry().Lookup(in.Type, in.DefVersion)
	for i, st := range in.Steps {
		sv := StepView{StepState: st, Pivot: st.Kind == saga.Pivot}
		if def != nil && i < len(def.Steps) {
			sv.Participant = def.Steps[i].Participant
		}
		v.Steps = append(v.Steps, sv)
	}
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
		fail(w, http.StatusBadRequest, "id", "saga id %q is not a UUID", r.PathValue("id"))
		return
	}
	in, journal, err := s.eng.Get(r.Context(), id)
	switch {
	case errors.Is(err, saga.ErrNotFound):
		fail(w, http.StatusNotFound, "id", "no saga %s", id)
		return
	case err != nil:
		fail(w, http.StatusInternalServerError, "", "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, s.view(in, journal))
}

// ParseFilter reads a saga.Filter from query parameters.
func ParseFilter(q map[string][]string) (saga.Filter, string, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	f := saga.Filter{State: saga.State(get("state")), Type: get("type"), Step: get("step"), Cursor: get("cursor")}
	if f.State != "" && !f.State.Valid() {
		return f, "state", fmt.Errorf("state %q must be one of running, compensating, completed, compensated, failed", f.State)
	}
	if v := get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > saga.ListLimitMax {
			return f, "limit", fmt.Errorf("limit %q must be an integer from 1 to %d", v, saga.ListLimitMax)
		}
		f.Limit = n
	}
	if v := get("older_than"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return f, "older_than", fmt.Errorf("older_than %q must be a duration like 30s or 5m", v)
		}
		f.OlderThan = d
	}
	if v := get("stuck"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return f, "stuck", fmt.Errorf("stuck %q must be true or false", v)
		}
		f.Stuck = b
	}
	if v := get("stuck_after"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return f, "stuck_after", fmt.Errorf("stuck_after %q must be a positive duration", v)
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
	case errors.Is(err, saga.ErrInvalidInput):
		fail(w, http.StatusBadRequest, "cursor", "%v", err)
		return
	case err != nil:
		fail(w, http.StatusInternalServerError, "", "%v", err)
		return
	}
	out := struct {
		Sagas []SagaView `json:"sagas"`
		Next  string     `json:"next,omitempty"`
	}{Sagas: []SagaView{}, Next: p.Next}
	for _, in := range p.Sagas {
		out.Sagas = append(out.Sagas, s.view(in, nil))
	}
	writeJSON(w, http.StatusOK, out)
}

// ActionBody is the body of POST /sagas/{id}/actions/{action}.
type ActionBody struct {
	Actor   string     `json:"actor"`
	Reason  string     `json:"reason"`
	Outcome saga.State `json:"outcome,omitempty"`
}

// actionError is a refused or failed operator action: the HTTP status, the
// field at fault and a message for a person.
type actionError struct {
	status int
	field  string
	msg    string
}

// act validates and applies an operator action through the engine's one
// door. A refused action writes nothing.
// plainText reports whether v is storable text of at most max bytes.
func plainText(v string, max int) bool {
	return len(v) <= max && utf8.ValidString(v) && !strings.ContainsRune(v, 0)
}

func (s *Server) act(ctx context.Context, id uuid.UUID, action saga.OperatorAction, b ActionBody) (saga.Instance, *actionError) {
	switch action {
	case saga.ActionRetry, saga.ActionCompensate, saga.ActionResolve:
	default:
		return saga.Instance{}, &actionError{http.StatusNotFound, "action", fmt.Sprintf("unknown action %q; want retry, compensate or resolve", action)}
	}
	switch {
	case strings.TrimSpace(b.Actor) == "":
		return saga.Instance{}, &actionError{http.StatusBadRequest, "actor", "actor is required (who acts)"}
	case strings.TrimSpace(b.Reason) == "":
		return saga.Instance{}, &actionError{http.StatusBadRequest, "reason", "reason is required (why)"}
	case !plainText(b.Actor, 200):
		return saga.Instance{}, &actionError{http.StatusBadRequest, "actor", "actor must be UTF-8 text without NUL characters, at most 200 bytes"}
	case !plainText(b.Reason, 2000):
		return saga.Instance{}, &actionError{http.StatusBadRequest, "reason", "reason must be UTF-8 text without NUL characters, at most 2000 bytes"}
	case action == saga.ActionResolve && b.Outcome != saga.Completed && b.Outcome != saga.Compensated:
		return saga.Instance{}, &actionError{http.StatusBadRequest, "outcome", "outcome must be completed or compensated"}
	}
	in, err := s.eng.Operate(ctx, id, saga.Operator{Action: action, Actor: b.Actor, Reason: b.Reason, Outcome: b.Outcome})
	var refused *saga.RefusedError
	switch {
	case errors.Is(err, saga.ErrNotFound):
		return in, &actionError{http.StatusNotFound, "id", fmt.Sprintf("no saga %s", id)}
	case errors.As(err, &refused):
		return in, &actionError{http.StatusConflict, "action", fmt.Sprintf("%s refused: %s", action, refused.Why)}
	case err != nil:
		s.cfg.Logger.ErrorContext(ctx, "operator action", slog.String("saga_id", id.String()), slog.String("action", string(action)), slog.String("error", err.Error()))
		return in, &actionError{http.StatusInternalServerError, "", fmt.Sprintf("%s on saga %s failed: %v", action, id, err)}
	}
	return in, nil
}

func (s *Server) operate(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		fail(w, http.StatusBadRequest, "id", "saga id %q is not a UUID", r.PathValue("id"))
		return
	}
	action := saga.OperatorAction(r.PathValue("action"))
	switch action {
	case saga.ActionRetry, saga.ActionCompensate, saga.ActionResolve:
	default:
		fail(w, http.StatusNotFound, "action", "unknown action %q; want retry, compensate or resolve", action)
		return
	}
	var b ActionBody
	if !decodeBody(w, r, &b) {
		return
	}
	in, aerr := s.act(r.Context(), id, action, b)
	if aerr != nil {
		fail(w, aerr.status, aerr.field, "%s", aerr.msg)
		return
	}
	_, journal, err := s.eng.Get(r.Context(), id)
	if err != nil {
		fail(w, http.StatusInternalServerError, "", "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, s.view(in, journal))
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if err := s.cfg.Ready(ctx); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "error": err.Error()})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
