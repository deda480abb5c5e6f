package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sagaflow/sagaflow/inbox/dlq"
)

// DeadLetters is what the dead-letter endpoints need: a *dlq.Store of the
// orchestrator's schema. Config.DeadLetters nil: they answer 501.
type DeadLetters interface {
	List(ctx context.Context, f dlq.Filter) ([]dlq.DeadLetter, int64, error)
	Get(ctx context.Context, id int64) (dlq.DeadLetter, error)
	Redrive(ctx context.Context, ids []int64, a dlq.Audit) ([]int64, error)
	RedriveMatching(ctx context.Context, f dlq.Filter, a dlq.Audit) ([]int64, error)
	DeadOutbox(ctx context.Context, after int64, limit int) ([]dlq.DeadRow, error)
	Requeue(ctx context.Context, ids []int64, a dlq.Audit) ([]int64, error)
	RequeueAll(ctx context.Context, a dlq.Audit) ([]int64, error)
	OutboxStatus(ctx context.Context, id int64) (dlq.RowStatus, time.Time, error)
	AuditLog(ctx context.Context, limit int) ([]dlq.AuditEntry, error)
	Count(ctx context.Context) (dlq.Counts, error)
}

// The dead-letter endpoints (reads like the saga reads, actions with the
// admin token; command ids in the reads only for the admin role, redacted
// for everyone else: see redact.go):
//
//	GET  /dlq                            open dead letters, newest first (topic, match, redriven, before, limit)
//	GET  /dlq/audit                      the newest redrives and requeues
//	GET  /dlq/{id}                       one dead letter with its value
//	POST /dlq/{id}/redrive               {"actor","reason"}
//	POST /dlq/redrive                    {"actor","reason","all":true} or with "topic"/"match"
//	GET  /outbox/dead                    dead outbox rows (after, limit)
//	POST /outbox/dead/{id}/requeue       {"actor","reason"}
//	POST /outbox/dead/requeue            {"actor","reason","all":true}
//
// (Registered in routeAll.)

// RepairBody is the body of the redrive and requeue actions. All, Topic
// and Match apply to the bulk forms only; a bulk redrive needs All or a
// filter, a bulk requeue All.
type RepairBody struct {
	Actor  string `json:"actor"`
	Reason string `json:"reason"`
	All    bool   `json:"all,omitempty"`
	Topic  string `json:"topic,omitempty"`
	Match  string `json:"match,omitempty"`
}

// RepairAnswer answers a redrive or a requeue: the ids acted on.
type RepairAnswer struct {
	IDs []int64 `json:"ids"`
}

// DeadLetterPage answers GET /dlq.
type DeadLetterPage struct {
	DeadLetters []dlq.DeadLetter `json:"dead_letters"`
	Next        int64            `json:"next,omitempty"`
	Counts      dlq.Counts       `json:"counts"`
}

func (s *Server) deadLetters(w http.ResponseWriter) bool {
	if s.cfg.DeadLetters == nil {
		fail(w, http.StatusNotImplemented, "", "this server has no dead-letter store")
		return false
	}
	return true
}

func parseID(w http.ResponseWriter, v, what string) (int64, bool) {
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id < 1 {
		fail(w, http.StatusBadRequest, "id", "%s id %s must be a positive integer", what, echo(v))
		return 0, false
	}
	return id, true
}

// ParseDeadLetterFilter reads a dlq.Filter from query parameters.
func ParseDeadLetterFilter(q map[string][]string) (dlq.Filter, string, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	f := dlq.Filter{Topic: get("topic"), Match: get("match")}
	if len(f.Match) > MatchMaxBytes {
		return f, "match", fmt.Errorf("match is %d bytes, at most %d are accepted", len(f.Match), MatchMaxBytes)
	}
	if v := get("redriven"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return f, "redriven", fmt.Errorf("redriven %s must be true or false", echo(v))
		}
		f.Redriven = b
	}
	for _, p := range []struct {
		name string
		dst  *int64
		max  int64
	}{{"before", &f.Before, 1<<63 - 1}, {"limit", nil, dlq.ListLimitMax}} {
		v := get(p.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 || n > p.max {
			return f, p.name, fmt.Errorf("%s %s must be an integer from 1 to %d", p.name, echo(v), p.max)
		}
		if p.dst != nil {
			*p.dst = n
		} else {
			f.Limit = int(n)
		}
	}
	return f, "", nil
}

func (s *Server) dlqList(w http.ResponseWriter, r *http.Request) {
	if !s.deadLetters(w) {
		return
	}
	f, field, err := ParseDeadLetterFilter(r.URL.Query())
	if err != nil {
		fail(w, http.StatusBadRequest, field, "%v", err)
		return
	}
	ls, next, err := s.cfg.DeadLetters.List(r.Context(), f)
	if err != nil {
		s.failInternal(w, r, "list dead letters", err)
		return
	}
	c, err := s.cfg.DeadLetters.Count(r.Context())
	if err != nil {
		s.failInternal(w, r, "count dead letters", err)
		return
	}
	if !s.seesCommandIDs(r) {
		ls = redactDeadLetters(ls)
	}
	writeJSON(w, http.StatusOK, DeadLetterPage{DeadLetters: ls, Next: next, Counts: c})
}

func (s *Server) dlqGet(w http.ResponseWriter, r *http.Request) {
	if !s.deadLetters(w) {
		return
	}
	id, ok := parseID(w, r.PathValue("id"), "dead letter")
	if !ok {
		return
	}
	d, err := s.cfg.DeadLetters.Get(r.Context(), id)
	switch {
	case errors.Is(err, dlq.ErrNotFound):
		fail(w, http.StatusNotFound, "id", "no dead letter %d", id)
	case err != nil:
		s.failInternal(w, r, "read dead letter", err)
	default:
		if !s.seesCommandIDs(r) {
			d = redactDeadLetter(d)
		}
		writeJSON(w, http.StatusOK, d)
	}
}

func (s *Server) dlqAudit(w http.ResponseWriter, r *http.Request) {
	if !s.deadLetters(w) {
		return
	}
	log, err := s.cfg.DeadLetters.AuditLog(r.Context(), dlq.ListLimitMax)
	if err != nil {
		s.failInternal(w, r, "read the ops audit", err)
		return
	}
	if log == nil {
		log = []dlq.AuditEntry{}
	}
	if !s.seesCommandIDs(r) {
		log = redactAudit(log)
	}
	writeJSON(w, http.StatusOK, map[string]any{"audit": log})
}

func (s *Server) repairBody(w http.ResponseWriter, r *http.Request) (RepairBody, bool) {
	var b RepairBody
	if !s.deadLetters(w) || !decodeBody(w, r, &b, MaxActionBodyBytes, fmt.Sprintf("the body is larger than %d bytes", MaxActionBodyBytes)) {
		return b, false
	}
	return b, true
}

// repaired answers a repair's outcome; err from the store.
func (s *Server) repaired(w http.ResponseWriter, r *http.Request, what string, ids []int64, err error) {
	switch {
	case errors.Is(err, dlq.ErrTopicNotConsumed) && errors.Is(err, dlq.ErrInvalidInput):
		fail(w, http.StatusBadRequest, "topic", "%v", err)
	case errors.Is(err, dlq.ErrTopicNotConsumed):
		fail(w, http.StatusConflict, "topic", "%v", err)
	case errors.Is(err, dlq.ErrInvalidInput):
		field := "reason"
		if strings.Contains(err.Error(), "actor is required") {
			field = "actor"
		}
		fail(w, http.StatusBadRequest, field, "%v", err)
	case err != nil && len(ids) > 0:
		// A bulk repair commits a batch at a time: the batches before the
		// failure stay repaired, and the answer names them.
		status, body := s.internal(r, what, err)
		body.Error += fmt.Sprintf(" after %d rows were repaired (listed in done; the rest were not)", len(ids))
		body.Done = ids
		w.Header().Set("X-Request-Id", body.RequestID)
		writeJSON(w, status, body)
	case err != nil:
		s.failInternal(w, r, what, err)
	default:
		if ids == nil {
			ids = []int64{}
		}
		writeJSON(w, http.StatusOK, RepairAnswer{IDs: ids})
	}
}

func (s *Server) dlqRedriveOne(w http.ResponseWriter, r *http.Request) {
	id, ok := parseID(w, r.PathValue("id"), "dead letter")
	if !ok {
		return
	}
	b, ok := s.repairBody(w, r)
	if !ok {
		return
	}
	st := s.cfg.DeadLetters
	d, err := st.Get(r.Context(), id)
	switch {
	case errors.Is(err, dlq.ErrNotFound):
		fail(w, http.StatusNotFound, "id", "no dead letter %d", id)
		return
	case err != nil:
		s.failInternal(w, r, "read dead letter", err)
		return
	case d.RedrivenAt != nil:
		fail(w, http.StatusConflict, "id", "dead letter %d was redriven at %s by %s", id, d.RedrivenAt.UTC().Format("2006-01-02T15:04:05Z"), echo(d.RedrivenBy))
		return
	}
	ids, err := st.Redrive(r.Context(), []int64{id}, dlq.Audit{Actor: b.Actor, Reason: b.Reason})
	if err == nil && len(ids) == 0 {
		fail(w, http.StatusConflict, "id", "dead letter %d was redriven meanwhile", id)
		return
	}
	s.repaired(w, r, "redrive dead letter", ids, err)
}

func (s *Server) dlqRedriveMany(w http.ResponseWriter, r *http.Request) {
	b, ok := s.repairBody(w, r)
	if !ok {
		return
	}
	if !b.All && b.Topic == "" && b.Match == "" {
		fail(w, http.StatusBadRequest, "all", `a bulk redrive needs "all": true or a "topic" or "match" filter`)
		return
	}
	ids, err := s.cfg.DeadLetters.RedriveMatching(r.Context(), dlq.Filter{Topic: b.Topic, Match: b.Match}, dlq.Audit{Actor: b.Actor, Reason: b.Reason})
	s.repaired(w, r, "redrive dead letters", ids, err)
}

func (s *Server) deadOutbox(w http.ResponseWriter, r *http.Request) {
	if !s.deadLetters(w) {
		return
	}
	q := r.URL.Query()
	var after int64
	limit := dlq.ListLimitDefault
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			fail(w, http.StatusBadRequest, "after", "after %s must be a row id", echo(v))
			return
		}
		after = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > dlq.ListLimitMax {
			fail(w, http.StatusBadRequest, "limit", "limit %s must be an integer from 1 to %d", echo(v), dlq.ListLimitMax)
			return
		}
		limit = n
	}
	rows, err := s.cfg.DeadLetters.DeadOutbox(r.Context(), after, limit)
	if err != nil {
		s.failInternal(w, r, "list dead outbox rows", err)
		return
	}
	if !s.seesCommandIDs(r) {
		rows = redactDeadRows(rows)
	}
	writeJSON(w, http.StatusOK, map[string]any{"rows": rows})
}

func (s *Server) requeueOne(w http.ResponseWriter, r *http.Request) {
	id, ok := parseID(w, r.PathValue("id"), "outbox row")
	if !ok {
		return
	}
	b, ok := s.repairBody(w, r)
	if !ok {
		return
	}
	st := s.cfg.DeadLetters
	ids, err := st.Requeue(r.Context(), []int64{id}, dlq.Audit{Actor: b.Actor, Reason: b.Reason})
	if err == nil && len(ids) == 0 {
		// Nothing requeued: say why, as a redrive does (404 for no such
		// row, 409 for a row that is not dead).
		status, at, err := st.OutboxStatus(r.Context(), id)
		switch {
		case err != nil:
			s.failInternal(w, r, "read outbox row", err)
		case status == dlq.RowGone:
			fail(w, http.StatusNotFound, "id", "no outbox row %d (never written, or published and deleted, or purged)", id)
		case status == dlq.RowSent:
			fail(w, http.StatusConflict, "id", "outbox row %d is not dead: it was sent at %s", id, at.UTC().Format("2006-01-02T15:04:05Z"))
		case status == dlq.RowLive:
			fail(w, http.StatusConflict, "id", "outbox row %d is not dead: it is live, waiting for the relay (requeued before, or never parked)", id)
		default:
			fail(w, http.StatusConflict, "id", "outbox row %d changed meanwhile; read it again", id)
		}
		return
	}
	s.repaired(w, r, "requeue outbox row", ids, err)
}

func (s *Server) requeueMany(w http.ResponseWriter, r *http.Request) {
	b, ok := s.repairBody(w, r)
	if !ok {
		return
	}
	if !b.All {
		fail(w, http.StatusBadRequest, "all", `a bulk requeue needs "all": true`)
		return
	}
	ids, err := s.cfg.DeadLetters.RequeueAll(r.Context(), dlq.Audit{Actor: b.Actor, Reason: b.Reason})
	s.repaired(w, r, "requeue dead outbox rows", ids, err)
}
