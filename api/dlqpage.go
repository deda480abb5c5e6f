package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sagaflow/sagaflow/inbox/dlq"
)

// The dead-letter page:
//
//	GET  /ui/dlq                       open dead letters, dead outbox rows, the latest repairs
//	POST /ui/dlq/{redrive|requeue}/{id} a repair (form with the admin token, actor and reason)

type dlqData struct {
	Filter  dlq.Filter
	Letters []dlq.DeadLetter
	Next    string
	Outbox  []dlq.DeadRow
	Audit   []dlq.AuditEntry
	Counts  dlq.Counts
	Done    string
	Error   string
	Now     string
}

func (s *Server) dlqPage(w http.ResponseWriter, r *http.Request) {
	var done string
	switch r.URL.Query().Get("done") {
	case "redrive":
		done = "Dead letter redriven: it is in the outbox and goes back to its topic. The audit below has the entry."
	case "requeue":
		done = "Outbox row requeued: the relay publishes it again. The audit below has the entry."
	}
	s.renderDLQ(w, r, http.StatusOK, dlqData{Done: done})
}

func (s *Server) renderDLQ(w http.ResponseWriter, r *http.Request, status int, d dlqData) {
	st := s.cfg.DeadLetters
	if st == nil {
		s.render(w, http.StatusNotImplemented, "error", "This server has no dead-letter store.")
		return
	}
	d.Now = time.Now().UTC().Format("2006-01-02 15:04:05 UTC")
	f, _, err := ParseDeadLetterFilter(r.URL.Query())
	if err != nil && d.Error == "" {
		// A bad filter is a 400, as on /ui/sagas and GET /dlq.
		d.Error, status = err.Error(), http.StatusBadRequest
	}
	d.Filter = f
	ctx := r.Context()
	var next int64
	if d.Letters, next, err = st.List(ctx, f); err != nil {
		s.internalPage(w, r, "list dead letters", err)
		return
	}
	if next > 0 {
		q := url.Values{"before": {fmt.Sprint(next)}, "topic": {f.Topic}, "match": {f.Match}}
		d.Next = "/ui/dlq?" + q.Encode()
	}
	if d.Outbox, err = st.DeadOutbox(ctx, 0, dlq.ListLimitDefault); err != nil {
		s.internalPage(w, r, "list dead outbox rows", err)
		return
	}
	if d.Audit, err = st.AuditLog(ctx, 20); err != nil {
		s.internalPage(w, r, "read the ops audit", err)
		return
	}
	if d.Counts, err = st.Count(ctx); err != nil {
		s.internalPage(w, r, "count dead letters", err)
		return
	}
	if !s.seesCommandIDs(r) {
		d.Letters, d.Outbox, d.Audit = redactDeadLetters(d.Letters), redactDeadRows(d.Outbox), redactAudit(d.Audit)
	}
	s.render(w, status, "dlq", d)
}

// dlqActionPage redrives a dead letter or requeues a dead outbox row
// posted by the page's forms (the gate checked the admin token); success
// redirects to the page.
func (s *Server) dlqActionPage(w http.ResponseWriter, r *http.Request) {
	kind := r.PathValue("kind")
	d := dlqData{}
	fail := func(status int, msg string) {
		d.Error = msg + " Nothing was changed."
		s.renderDLQ(w, r, status, d)
	}
	switch {
	case s.cfg.DeadLetters == nil:
		s.render(w, http.StatusNotImplemented, "error", "This server has no dead-letter store.")
		return
	case kind != "redrive" && kind != "requeue":
		s.render(w, http.StatusNotFound, "error", fmt.Sprintf("Unknown action %s; want redrive or requeue.", echo(kind)))
		return
	}
	// strconv, as the JSON API: fmt.Sscan took "12abc" or "0x1f" for an id.
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		s.render(w, http.StatusBadRequest, "error", fmt.Sprintf("Id %s is not a positive integer.", echo(r.PathValue("id"))))
		return
	}
	a := dlq.Audit{Actor: r.PostFormValue("actor"), Reason: r.PostFormValue("reason")}
	var ids []int64
	if kind == "redrive" {
		ids, err = s.cfg.DeadLetters.Redrive(r.Context(), []int64{id}, a)
	} else {
		ids, err = s.cfg.DeadLetters.Requeue(r.Context(), []int64{id}, a)
	}
	switch {
	case errors.Is(err, dlq.ErrTopicNotConsumed):
		fail(http.StatusConflict, err.Error()+".")
	case errors.Is(err, dlq.ErrInvalidInput):
		fail(http.StatusBadRequest, err.Error()+".")
	case err != nil:
		status, body := s.internal(r, kind, err)
		d.Error = internalText(body) + " The action may or may not have been applied: reload the page."
		s.renderDLQ(w, r, status, d)
	case len(ids) == 0:
		fail(http.StatusConflict, fmt.Sprintf("%d is not open any more (redriven, requeued, sent or gone).", id))
	default:
		http.Redirect(w, r, "/ui/dlq?done="+url.QueryEscape(kind), http.StatusSeeOther)
	}
}
