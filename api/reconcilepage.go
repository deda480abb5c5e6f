package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
)

// The reconciliation page:
//
//	GET  /ui/reconcile                    open discrepancies, the last run
//	POST /ui/reconcile/run                 a run now (form with the admin token)
//	POST /ui/reconcile/{id}/resolve        close one (admin token, actor, reason)

type reconcileData struct {
	Open    []orchestrator.Discrepancy
	LastRun string
	Report  *orchestrator.ReconcileReport
	Done    string
	Error   string
	Now     string
}

func (s *Server) reconcilePage(w http.ResponseWriter, r *http.Request) {
	d := reconcileData{}
	if r.URL.Query().Get("done") == "resolve" {
		d.Done = "Discrepancy resolved (the actor and reason are kept with it)."
	}
	s.renderReconcile(w, r, http.StatusOK, d)
}

func (s *Server) renderReconcile(w http.ResponseWriter, r *http.Request, status int, d reconcileData) {
	rc, ok := s.eng.(Reconciler)
	if !ok {
		s.render(w, http.StatusNotImplemented, "error", "This server has no reconciler.")
		return
	}
	d.Now = time.Now().UTC().Format("2006-01-02 15:04:05 UTC")
	var err error
	if d.Open, err = rc.OpenDiscrepancies(r.Context(), 200); err != nil {
		s.internalPage(w, r, "list open discrepancies", err)
		return
	}
	last, err := rc.LastReconcile(r.Context())
	if err != nil {
		s.internalPage(w, r, "read the last reconcile run", err)
		return
	}
	d.LastRun = "never"
	if !last.IsZero() {
		d.LastRun = last.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	s.render(w, status, "reconcile", d)
}

func (s *Server) reconcileRunPage(w http.ResponseWriter, r *http.Request) {
	rc, ok := s.eng.(Reconciler)
	if !ok {
		s.render(w, http.StatusNotImplemented, "error", "This server has no reconciler.")
		return
	}
	rep, err := rc.Reconcile(r.Context(), orchestrator.ReconcileOptions{DryRun: r.PostFormValue("dry_run") != ""}, s.cfg.ReconcileMetrics)
	d := reconcileData{Report: &rep}
	switch {
	case errors.Is(err, orchestrator.ErrReconcileBusy):
		d.Report, d.Error = nil, "Another reconciliation run is in progress (a serving replica's); try again in a moment."
		s.renderReconcile(w, r, http.StatusConflict, d)
		return
	case err != nil:
		status, body := s.internal(r, "reconcile", err)
		d.Report, d.Error = nil, internalText(body)
		s.renderReconcile(w, r, status, d)
		return
	}
	d.Done = fmt.Sprintf("Reconciled: %d differences, %d repaired, %d finished sagas checked, %d open.", rep.Differences, rep.Repaired, rep.Checked, rep.Open)
	if rep.DryRun {
		d.Done = fmt.Sprintf("Dry run: %d differences found; nothing repaired or recorded.", rep.Differences)
	}
	s.renderReconcile(w, r, http.StatusOK, d)
}

func (s *Server) reconcileResolvePage(w http.ResponseWriter, r *http.Request) {
	rc, ok := s.eng.(Reconciler)
	if !ok {
		s.render(w, http.StatusNotImplemented, "error", "This server has no reconciler.")
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		s.render(w, http.StatusBadRequest, "error", fmt.Sprintf("Discrepancy id %s is not a positive number.", echo(r.PathValue("id"))))
		return
	}
	actor, reason := r.PostFormValue("actor"), r.PostFormValue("reason")
	if strings.TrimSpace(actor) == "" || strings.TrimSpace(reason) == "" || !plainText(actor, 200) || !plainText(reason, 2000) {
		s.renderReconcile(w, r, http.StatusBadRequest, reconcileData{Error: "An actor and a reason (plain text) are required. Nothing was changed."})
		return
	}
	switch err := rc.ResolveDiscrepancy(r.Context(), id, actor, reason); {
	case errors.Is(err, saga.ErrNotFound):
		s.renderReconcile(w, r, http.StatusConflict, reconcileData{Error: fmt.Sprintf("Discrepancy %d is not open any more. Nothing was changed.", id)})
	case err != nil:
		status, body := s.internal(r, "resolve discrepancy", err)
		s.renderReconcile(w, r, status, reconcileData{Error: internalText(body) + " The action may or may not have been applied: reload the page."})
	default:
		http.Redirect(w, r, "/ui/reconcile?done="+url.QueryEscape("resolve"), http.StatusSeeOther)
	}
}
