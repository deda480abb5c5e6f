package api

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
)

// The status page: server-rendered HTML under /ui/, no JavaScript.
//
//	GET  /ui/sagas                      list with filters and keyset paging
//	GET  /ui/sagas/{id}                 detail: step timeline, journal, actions
//	POST /ui/sagas/{id}/actions/{name}  operator action (form with the admin token)
//	POST /ui/sagas/actions              an action on every saga of a filter, dry run first
//	POST /ui/login                      token for read pages when reads are protected
//
// (Registered in routeAll; the gate checks the token of a read page, a
// form or the login before the handler runs.)

//go:embed templates/*.html
var templateFS embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"short": func(id uuid.UUID) string { return id.String()[:8] },
}).ParseFS(templateFS, "templates/*.html"))

type loginData struct {
	Back  string
	Error string
}

// login sets the session cookie of the role the form's token has (the
// gate checked it): HttpOnly, SameSite=Strict, for SessionTTL, and Secure
// over TLS, with Config.SecureCookie, or with Config.TrustProxy when
// X-Forwarded-Proto is https. It redirects to back, a path under /ui/
// only.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	back := safeBack(r.PostFormValue("back"))
	secure := r.TLS != nil || s.cfg.SecureCookie || s.forwardedHTTPS(r)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.newSession(callerRole(r), callerOperator(r), time.Now()), Path: "/ui/", MaxAge: int(SessionTTL / time.Second),
		HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// pageCSP is the status page's Content-Security-Policy: no script, inline
// styles, forms to this server only, never in a frame.
const pageCSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// internalPage renders the error page of an internal error, without its
// text (the log has it under the request id).
func (s *Server) internalPage(w http.ResponseWriter, r *http.Request, what string, err error) {
	status, body := s.internal(r, what, err)
	w.Header().Set("X-Request-Id", body.RequestID)
	s.render(w, status, "error", internalText(body))
}

func internalText(body Error) string {
	return fmt.Sprintf("The server could not answer: %s (request id %s; the server's log has the details).", body.Error, body.RequestID)
}

func (s *Server) render(w http.ResponseWriter, status int, name string, data any) {
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, data); err != nil {
		id := newRequestID()
		s.cfg.Logger.Error("render page", slog.String("page", name), slog.String("request_id", id), slog.String("error", err.Error()))
		http.Error(w, "internal error (request id "+id+")", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", pageCSP)
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// ---- list ----

type listData struct {
	Filter orchestrator.Filter
	States []saga.State
	Types  []string
	Steps  []string
	Rows   []listRow
	Next   string
	First  string
	Stats  *StatsView
	StRows []statsRow
	Window string
	// OpenCounted: how long ago the running and compensating counts were
	// taken, when they are an estimate.
	OpenCounted string
	Error       string
	Now         string
}

type listRow struct {
	ID      uuid.UUID
	Type    string
	State   saga.State
	Step    string
	Flag    string
	Created string
	Age     string
	Moved   string
}

var allStates = []saga.State{saga.Running, saga.Compensating, saga.Completed, saga.Compensated, saga.Failed}

func (s *Server) listPage(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	d := listData{States: allStates, Types: s.eng.Registry().Types(), Now: now.UTC().Format(time.RFC3339)}
	steps := map[string]bool{}
	for _, t := range d.Types {
		if def, ok := s.eng.Registry().Latest(t); ok {
			for _, st := range def.Steps {
				if !steps[st.Name] {
					steps[st.Name] = true
					d.Steps = append(d.Steps, st.Name)
				}
			}
		}
	}
	q := r.URL.Query()
	if q.Get("stuck") == "on" {
		q.Set("stuck", "true")
	}
	f, _, err := ParseFilter(q)
	d.Filter = f
	status := http.StatusOK
	if err != nil {
		d.Error, status = err.Error(), http.StatusBadRequest
		s.render(w, status, "list", d)
		return
	}
	// The overview's stats are read beside the list, on another
	// connection: the page waits for the slower of the two, not their sum.
	type statsRead struct {
		v   StatsView
		err error
	}
	stats := make(chan statsRead, 1)
	go func() {
		v, _, _, err := s.readStats(r)
		stats <- statsRead{v, err}
	}()
	p, err := s.eng.List(r.Context(), f)
	if err != nil {
		<-stats
		d.Error, status = cut(err.Error(), errorMax), http.StatusBadRequest
		if !errors.Is(err, orchestrator.ErrInvalidInput) {
			var body Error
			status, body = s.internal(r, "list sagas (page)", err)
			w.Header().Set("X-Request-Id", body.RequestID)
			d.Error = internalText(body)
		}
		s.render(w, status, "list", d)
		return
	}
	for _, in := range p.Sagas {
		d.Rows = append(d.Rows, listRow{ID: in.ID, Type: in.Type, State: in.State, Step: activeStep(in), Flag: in.Flag,
			Created: in.CreatedAt.UTC().Format("2006-01-02 15:04:05"), Age: fmtDur(now.Sub(in.CreatedAt)), Moved: fmtDur(now.Sub(in.UpdatedAt)) + " ago"})
	}
	keep := url.Values{}
	for _, k := range []string{"state", "type", "step", "stuck", "older_than", "stuck_after", "limit", "aggregate_id", "idempotency_key"} {
		if v := q.Get(k); v != "" {
			keep.Set(k, v)
		}
	}
	if p.Next != "" {
		n := url.Values{}
		for k, v := range keep {
			n[k] = v
		}
		n.Set("cursor", p.Next)
		d.Next = "/ui/sagas?" + n.Encode()
	}
	if f.Cursor != "" {
		d.First = "/ui/sagas?" + keep.Encode()
	}
	if st := <-stats; st.err == nil {
		v := st.v
		d.Stats = &v
		d.StRows = statsRows(v)
		d.Window = fmtDur(time.Duration(v.WindowSeconds * float64(time.Second)))
		if v.OpenEstimated {
			d.OpenCounted = fmtDur(max(v.At.Sub(v.OpenCountedAt), 0))
		}
	}
	s.render(w, status, "list", d)
}

// ---- detail ----

type detailData struct {
	Saga SagaView
	// Older links the page of older journal entries, Newest the first page.
	Older, Newest string
	Def           int
	Span          string
	Steps         []stepRow
	Journal       []journalRow
	Notice        string
	Error         string
	Form          ActionBody
	Action        string
	Now           string
	// Proposals and Audit: the saga's four-eyes proposals and operator
	// audit (who proposed, who approved).
	Proposals []orchestrator.Proposal
	Audit     []orchestrator.AuditEntry
}

type stepRow struct {
	N           int
	Name        string
	Participant string
	Kind        saga.Kind
	Pivot       bool
	Active      bool
	// Group and Event: a parallel group's member (side by side with the
	// others), a wait step's event.
	Group, Event string
	State        saga.StepStatus
	Attempts     int
	CompAttempts int
	Fwd, Comp    *bar
	LastError    string
	Note         string
	Output       string
}

type bar struct {
	Style      template.CSS
	LabelStyle template.CSS
	Class      string
	Label      string
}

type journalRow struct {
	At, Event, Step, Action, From, To, Actor, Reason, Message string
	Ignored, Operator                                         bool
}

func (s *Server) detailPage(w http.ResponseWriter, r *http.Request) {
	d := detailData{Notice: notice(r.URL.Query().Get("done"))}
	if p := r.URL.Query().Get("proposed"); p != "" {
		if n, err := strconv.ParseInt(p, 10, 64); err == nil && n > 0 {
			d.Notice = fmt.Sprintf("Four eyes: proposal %d recorded and nothing changed; a second person approves it (Proposals below, or the proposals page).", n)
		}
	}
	s.renderDetail(w, r, http.StatusOK, d)
}

func notice(done string) string {
	switch saga.OperatorAction(done) {
	case saga.ActionRetry, saga.ActionCompensate, saga.ActionResolve:
		return fmt.Sprintf("Operator action %q applied. It is the last operator row of the journal below.", done)
	}
	return ""
}

func (s *Server) renderDetail(w http.ResponseWriter, r *http.Request, status int, d detailData) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		s.render(w, http.StatusBadRequest, "error", fmt.Sprintf("Saga id %s is not a UUID.", echo(r.PathValue("id"))))
		return
	}
	jp, _, err := ParseJournalPage(r.URL.Query())
	if err != nil {
		s.render(w, http.StatusBadRequest, "error", err.Error()+".")
		return
	}
	in, js, err := s.eng.GetPage(r.Context(), id, jp.Before, jp.Limit)
	switch {
	case errors.Is(err, saga.ErrNotFound):
		s.render(w, http.StatusNotFound, "error", fmt.Sprintf("There is no saga %s.", id))
		return
	case err != nil:
		s.internalPage(w, r, "read saga (page)", err)
		return
	}
	if d.Proposals, d.Audit, err = s.sagaGovernance(r.Context(), id); err != nil {
		s.internalPage(w, r, "read the saga's proposals and audit (page)", err)
		return
	}
	now := time.Now()
	d.Saga = s.detail(in, js)
	d.Now = now.UTC().Format(time.RFC3339)
	d.Steps, d.Span = timeline(d.Saga, now)
	if d.Saga.JournalNext != "" {
		d.Older = "/ui/sagas/" + id.String() + "?journal_before=" + d.Saga.JournalNext
	}
	if jp.Before > 0 {
		d.Newest = "/ui/sagas/" + id.String()
	}
	for i := len(d.Saga.Journal) - 1; i >= 0; i-- {
		j := d.Saga.Journal[i]
		row := journalRow{At: j.At.UTC().Format("2006-01-02 15:04:05.000"), Event: j.Event, Step: j.Step, Action: j.Action,
			From: string(j.From), To: string(j.To), Actor: j.Actor, Reason: j.Reason, Ignored: j.Ignored,
			Operator: strings.HasPrefix(j.Event, saga.JournalOperator)}
		if j.MessageID != nil {
			row.Message = j.MessageID.String()[:8]
		}
		d.Journal = append(d.Journal, row)
	}
	s.render(w, status, "detail", d)
}

// timeline lays every step's forward and compensation out on the saga's
// time span [created, finished or now].
func timeline(v SagaView, now time.Time) ([]stepRow, string) {
	start := v.CreatedAt
	end := now
	if v.FinishedAt != nil {
		end = *v.FinishedAt
	}
	for _, st := range v.Steps {
		for _, t := range []*time.Time{st.FinishedAt, st.CompFinishedAt} {
			if t != nil && t.After(end) {
				end = *t
			}
		}
	}
	span := end.Sub(start)
	if span <= 0 {
		span = time.Millisecond
	}
	mk := func(from, to *time.Time, class string) *bar {
		if from == nil {
			return nil
		}
		t := now
		if to != nil {
			t = *to
		} else if v.FinishedAt != nil {
			t = *v.FinishedAt
		}
		left := float64(from.Sub(start)) / float64(span) * 100
		width := float64(t.Sub(*from)) / float64(span) * 100
		left = min(max(left, 0), 99.5)
		width = min(max(width, 0.5), 100-left)
		label := fmtDur(t.Sub(*from))
		if to == nil {
			label += " so far"
		}
		b := &bar{Style: template.CSS(fmt.Sprintf("left:%.2f%%;width:%.2f%%", left, width)), Class: class, Label: label}
		switch {
		case width >= 12:
			b.LabelStyle = template.CSS(fmt.Sprintf("left:%.2f%%;color:#fff", left))
		case left+width > 70:
			b.LabelStyle = template.CSS(fmt.Sprintf("right:%.2f%%", 100-left))
		default:
			b.LabelStyle = template.CSS(fmt.Sprintf("left:%.2f%%", left+width))
		}
		return b
	}
	var rows []stepRow
	for i, st := range v.Steps {
		row := stepRow{N: i + 1, Name: st.Name, Participant: st.Participant, Kind: st.Kind, Pivot: st.Pivot,
			Active: st.Name == v.CurrentStep && !v.State.Terminal() || (v.State == saga.Failed && st.Name == v.CurrentStep) || slices.Contains(v.ActiveSteps, st.Name),
			Group:  st.Group, Event: st.Event,
			State: st.State, Attempts: st.Attempts, CompAttempts: st.CompAttempts, LastError: st.LastError, Note: st.CompensationNote}
		if len(st.Output) > 0 && string(st.Output) != "null" {
			row.Output = string(st.Output)
		}
		fclass := "run"
		switch st.State {
		case saga.StepSucceeded, saga.StepCompensating, saga.StepCompRetrying, saga.StepCompensated:
			fclass = "ok"
		case saga.StepFailed:
			fclass = "fail"
		case saga.StepUnknown, saga.StepQuerying:
			fclass = "unknown"
		case saga.StepRetrying:
			fclass = "retry"
		}
		if st.State == saga.StepCompensated || st.State == saga.StepCompensating || st.State == saga.StepCompRetrying {
			// the forward's own outcome is not kept apart once compensated
			if st.FinishedAt == nil {
				fclass = "unknown"
			}
		}
		row.Fwd = mk(st.StartedAt, st.FinishedAt, fclass)
		if row.Fwd != nil && st.FinishedAt == nil && st.State != saga.StepRunning && st.State != saga.StepRetrying {
			// an abandoned forward ends where its compensation starts
			row.Fwd = mk(st.StartedAt, firstNonNil(st.CompStartedAt, v.FinishedAt), fclass)
		}
		row.Comp = mk(st.CompStartedAt, st.CompFinishedAt, "comp")
		rows = append(rows, row)
	}
	return rows, fmtDur(end.Sub(start))
}

func firstNonNil(ts ...*time.Time) *time.Time {
	for _, t := range ts {
		if t != nil {
			return t
		}
	}
	return nil
}

func fmtDur(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	case d < 24*time.Hour:
		out := d.Round(time.Second).String()
		if strings.HasSuffix(out, "m0s") {
			out = strings.TrimSuffix(out, "0s")
		}
		if strings.HasSuffix(out, "h0m") {
			out = strings.TrimSuffix(out, "0m")
		}
		return out
	}
	days := int(d / (24 * time.Hour))
	return strconv.Itoa(days) + "d" + (d % (24 * time.Hour)).Round(time.Minute).String()
}

// ---- actions ----

// actionPage applies an operator action posted by the detail page's forms
// (the gate checked the admin token of the form's token field). Success
// redirects to the detail page; a refused action renders it with the
// reason and the 4xx status.
func (s *Server) actionPage(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	form := ActionBody{Actor: r.PostFormValue("actor"), Reason: r.PostFormValue("reason"), Outcome: saga.State(r.PostFormValue("outcome")),
		Ticket: r.PostFormValue("ticket"), Step: r.PostFormValue("step"), Note: r.PostFormValue("note")}
	if o := strings.TrimSpace(r.PostFormValue("output")); o != "" {
		form.Output = json.RawMessage(o)
	}
	d := detailData{Form: form, Action: action}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		s.render(w, http.StatusBadRequest, "error", fmt.Sprintf("Saga id %s is not a UUID.", echo(r.PathValue("id"))))
		return
	}
	// A repair changes the saga by hand: the page asks first (a box to
	// tick), and one posted without it is refused.
	if saga.OperatorAction(action).Repair() && r.PostFormValue("confirm") != "yes" {
		d.Error = "A repair changes the saga by hand: tick the confirmation box. Nothing was changed."
		s.renderDetail(w, r, http.StatusBadRequest, d)
		return
	}
	_, p, aerr := s.act(r, id, saga.OperatorAction(action), form)
	if aerr != nil {
		d.Error = aerr.msg + ". Nothing was changed."
		if aerr.requestID != "" {
			d.Error = internalText(Error{Error: aerr.msg, RequestID: aerr.requestID}) + " The action may or may not have been applied: reload the page."
		}
		s.renderDetail(w, r, aerr.status, d)
		return
	}
	if p != nil {
		http.Redirect(w, r, "/ui/sagas/"+id.String()+"?proposed="+strconv.FormatInt(p.ID, 10), http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/ui/sagas/"+id.String()+"?done="+url.QueryEscape(action), http.StatusSeeOther)
}

// statsRow is one saga type's counts in the page's state order: running,
// compensating and failed are all open sagas; completed and compensated
// those finished within the stats window.
type statsRow struct {
	Type string
	// Counts are formatted: an estimate starts with "≈".
	Counts []string
}

func statsRows(v StatsView) []statsRow {
	var out []statsRow
	for _, t := range statsTypes(v) {
		row := statsRow{Type: t}
		for _, st := range allStates {
			src, est := v.Open, v.OpenEstimated && (st == saga.Running || st == saga.Compensating)
			if st == saga.Completed || st == saga.Compensated {
				src, est = v.Finished, v.FinishedEstimated
			}
			n := strconv.FormatInt(src[t][st], 10)
			if est {
				n = "≈" + n
			}
			row.Counts = append(row.Counts, n)
		}
		out = append(out, row)
	}
	return out
}
