package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
)

// Reconciler is what the reconciliation endpoints need; the engine
// implements it. When the Engine given to New does not, they answer 501.
type Reconciler interface {
	Reconcile(ctx context.Context, o orchestrator.ReconcileOptions, m *orchestrator.ReconcileMetrics) (orchestrator.ReconcileReport, error)
	OpenDiscrepancies(ctx context.Context, limit int) ([]orchestrator.Discrepancy, error)
	ResolveDiscrepancy(ctx context.Context, id int64, actor, reason string) error
	LastReconcile(ctx context.Context) (time.Time, error)
}

// ReconcileView is GET /reconcile: the open discrepancies and when the last
// run finished.
type ReconcileView struct {
	LastRunAt *time.Time                 `json:"last_run_at"`
	Open      []orchestrator.Discrepancy `json:"open"`
}

// ReconcileRunBody is the body of POST /reconcile/run.
type ReconcileRunBody struct {
	DryRun bool `json:"dry_run"`
	// Since is a Go duration ("24h"); empty: the default window.
	Since string `json:"since,omitempty"`
}

func (s *Server) reconciler(w http.ResponseWriter) (Reconciler, bool) {
	rc, ok := s.eng.(Reconciler)
	if !ok {
		fail(w, http.StatusNotImplemented, "", "reconciliation is not available on this server")
	}
	return rc, ok
}

func (s *Server) reconcileView(w http.ResponseWriter, r *http.Request) {
	rc, ok := s.reconciler(w)
	if !ok {
		return
	}
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			fail(w, http.StatusBadRequest, "limit", "limit %s must be a whole number from 1 to 1000", echo(v))
			return
		}
		limit = n
	}
	open, err := rc.OpenDiscrepancies(r.Context(), limit)
	if err != nil {
		s.failInternal(w, r, "list open discrepancies", err)
		return
	}
	last, err := rc.LastReconcile(r.Context())
	if err != nil {
		s.failInternal(w, r, "read the last reconcile run", err)
		return
	}
	v := ReconcileView{Open: open}
	if !last.IsZero() {
		v.LastRunAt = &last
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) reconcileRun(w http.ResponseWriter, r *http.Request) {
	rc, ok := s.reconciler(w)
	if !ok {
		return
	}
	var b ReconcileRunBody
	if !decodeBody(w, r, &b, MaxActionBodyBytes, fmt.Sprintf("the body is larger than %d bytes", MaxActionBodyBytes)) {
		return
	}
	o := orchestrator.ReconcileOptions{DryRun: b.DryRun}
	if b.Since != "" {
		d, err := time.ParseDuration(b.Since)
		if err != nil || d <= 0 || d > ReconcileSinceMax {
			fail(w, http.StatusBadRequest, "since", "since %s must be a positive Go duration such as 24h, at most %s", echo(b.Since), ReconcileSinceMax)
			return
		}
		o.Since = d
	}
	rep, err := rc.Reconcile(r.Context(), o, s.cfg.ReconcileMetrics)
	if errors.Is(err, orchestrator.ErrReconcileBusy) {
		fail(w, http.StatusConflict, "", "%v; try again in a moment", err)
		return
	}
	if err != nil {
		s.failInternal(w, r, "reconcile", err)
		return
	}
	if rep.List == nil {
		// The engine leaves List nil when it finds nothing at all; the
		// answer's list is an array, empty then.
		rep.List = []orchestrator.Discrepancy{}
	}
	writeJSON(w, http.StatusOK, rep)
}

func (s *Server) resolveDiscrepancy(w http.ResponseWriter, r *http.Request) {
	rc, ok := s.reconciler(w)
	if !ok {
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		fail(w, http.StatusBadRequest, "id", "discrepancy id %s is not a positive number", echo(r.PathValue("id")))
		return
	}
	var b ActionBody
	if !decodeBody(w, r, &b, MaxActionBodyBytes, fmt.Sprintf("the body is larger than %d bytes", MaxActionBodyBytes)) {
		return
	}
	switch {
	case strings.TrimSpace(b.Actor) == "" || !plainText(b.Actor, 200):
		fail(w, http.StatusBadRequest, "actor", "actor is required: UTF-8 text without NUL characters, at most 200 bytes")
		return
	case strings.TrimSpace(b.Reason) == "" || !plainText(b.Reason, 2000):
		fail(w, http.StatusBadRequest, "reason", "reason is required: UTF-8 text without NUL characters, at most 2000 bytes")
		return
	}
	err = rc.ResolveDiscrepancy(r.Context(), id, b.Actor, b.Reason)
	switch {
	case errors.Is(err, saga.ErrNotFound):
		fail(w, http.StatusNotFound, "id", "no open discrepancy %d", id)
	case err != nil:
		s.failInternal(w, r, "resolve discrepancy", err)
	default:
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "resolved_by": b.Actor})
	}
}
