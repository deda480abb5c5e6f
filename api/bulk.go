package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
)

// BulkOperator applies an operator action to the sagas of a filter; the
// engine implements it. When the Engine given to New does not,
// POST /sagas/actions/{action} answers 501.
type BulkOperator interface {
	OperateMatching(ctx context.Context, req orchestrator.BulkRequest) (orchestrator.BulkResult, error)
}

// BulkBody is the body of POST /sagas/actions/{action}: the filter (the
// parameters of GET /sagas: state, type, step, older_than, stuck,
// stuck_after; at least one), the action's actor, reason and outcome, a
// dry run and the most sagas to touch.
type BulkBody struct {
	Filter map[string]string `json:"filter"`
	ActionBody
	DryRun bool `json:"dry_run"`
	Limit  int  `json:"limit,omitempty"`
}

// filterKeys are the GET /sagas parameters a bulk filter may use.
var filterKeys = []string{"state", "type", "step", "older_than", "stuck", "stuck_after"}

// BulkFilter reads a bulk action's filter (the parameters of GET /sagas,
// no cursor or limit). It returns the field at fault with the error.
func BulkFilter(m map[string]string) (orchestrator.Filter, string, error) {
	q := url.Values{}
	for k, v := range m {
		known := false
		for _, fk := range filterKeys {
			known = known || k == fk
		}
		if !known {
			return orchestrator.Filter{}, "filter." + cut(k, echoMax), fmt.Errorf("filter key %s is not one of %s", echo(k), strings.Join(filterKeys, ", "))
		}
		if v != "" {
			q.Set(k, v)
		}
	}
	f, field, err := ParseFilter(q)
	if err != nil {
		return f, "filter." + field, err
	}
	if f.Empty() {
		return f, "filter", errors.New("the filter needs at least one of state, type, step, older_than, stuck: an action on every saga is never what you meant")
	}
	return f, "", nil
}

// ParseFilterSpec reads a filter written as comma-separated key=value pairs,
// the keys of BulkFilter plus status (for state) and stuck_since=D (for
// stuck=true with stuck_after=D): "status=failed,type=place-order".
func ParseFilterSpec(spec string) (orchestrator.Filter, error) {
	m := map[string]string{}
	for _, kv := range strings.Split(spec, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return orchestrator.Filter{}, fmt.Errorf("filter %s: want key=value", echo(kv))
		}
		switch k {
		case "status":
			k = "state"
		case "stuck_since":
			m["stuck"], k = "true", "stuck_after"
		}
		m[k] = v
	}
	f, _, err := BulkFilter(m)
	return f, err
}

// bulkRequest validates an action on the sagas of a filter.
func bulkRequest(action saga.OperatorAction, b BulkBody) (orchestrator.BulkRequest, *actionError) {
	switch action {
	case saga.ActionRetry, saga.ActionCompensate, saga.ActionResolve, saga.ActionForceFail, saga.ActionMarkCompensated, saga.ActionResume:
	default:
		return orchestrator.BulkRequest{}, &actionError{status: http.StatusNotFound, field: "action", msg: fmt.Sprintf("unknown action %s; want retry, compensate, resolve, force-fail, mark-compensated or resume", echo(string(action)))}
	}
	if aerr := checkAction(action, b.ActionBody); aerr != nil {
		return orchestrator.BulkRequest{}, aerr
	}
	f, field, err := BulkFilter(b.Filter)
	if err != nil {
		return orchestrator.BulkRequest{}, &actionError{status: http.StatusBadRequest, field: field, msg: err.Error()}
	}
	if b.Limit < 0 || b.Limit > orchestrator.BulkLimitMax {
		return orchestrator.BulkRequest{}, &actionError{status: http.StatusBadRequest, field: "limit", msg: fmt.Sprintf("limit must be from 1 to %d (0: %d)", orchestrator.BulkLimitMax, orchestrator.BulkLimitDefault)}
	}
	return orchestrator.BulkRequest{Filter: f, DryRun: b.DryRun, Limit: b.Limit,
		Operator: b.operator(action)}, nil
}

// bulk runs req through the engine.
func (s *Server) bulk(r *http.Request, req orchestrator.BulkRequest) (orchestrator.BulkResult, *actionError) {
	bo, ok := s.eng.(BulkOperator)
	if !ok {
		return orchestrator.BulkResult{}, &actionError{status: http.StatusNotImplemented, msg: "this server's engine cannot apply actions to a filter"}
	}
	res, err := bo.OperateMatching(r.Context(), req)
	switch {
	case errors.Is(err, orchestrator.ErrInvalidInput):
		return res, &actionError{status: http.StatusBadRequest, field: "filter", msg: err.Error()}
	case err != nil:
		status, body := s.internal(r, fmt.Sprintf("operator action %s on a filter", req.Operator.Action), err)
		return res, &actionError{status: status, msg: body.Error, requestID: body.RequestID}
	}
	return res, nil
}

func (s *Server) operateMatching(w http.ResponseWriter, r *http.Request) {
	var b BulkBody
	if !decodeBody(w, r, &b, MaxActionBodyBytes, fmt.Sprintf("the body is larger than %d bytes", MaxActionBodyBytes)) {
		return
	}
	req, aerr := bulkRequest(saga.OperatorAction(r.PathValue("action")), b)
	var res orchestrator.BulkResult
	if aerr == nil {
		res, aerr = s.bulk(r, req)
	}
	if aerr != nil {
		if aerr.requestID != "" {
			w.Header().Set("X-Request-Id", aerr.requestID)
		}
		writeJSON(w, aerr.status, Error{Error: aerr.msg, Field: aerr.field, RequestID: aerr.requestID})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// bulkData is the page of a filter action: the form as posted, the result.
type bulkData struct {
	Action string
	Form   ActionBody
	Filter map[string]string
	// Query is the filter as GET /ui/sagas parameters (the link back).
	Query  string
	Result *orchestrator.BulkResult
	Error  string
}

// bulkPage applies (or dry-runs) an action on the sagas of a filter,
// posted by the list page's form with the admin token (the gate checked
// it), and renders what it touched or would touch; a dry run offers the
// form to apply it.
func (s *Server) bulkPage(w http.ResponseWriter, r *http.Request) {
	b := BulkBody{Filter: map[string]string{}, ActionBody: ActionBody{Actor: r.PostFormValue("actor"), Reason: r.PostFormValue("reason"), Outcome: saga.State(r.PostFormValue("outcome"))}}
	q := url.Values{}
	for _, k := range filterKeys {
		if v := r.PostFormValue(k); v != "" {
			b.Filter[k] = v
			q.Set(k, v)
		}
	}
	b.DryRun, _ = strconv.ParseBool(r.PostFormValue("dry_run"))
	d := bulkData{Action: r.PostFormValue("action"), Form: b.ActionBody, Filter: b.Filter, Query: q.Encode()}
	status := http.StatusOK
	req, aerr := bulkRequest(saga.OperatorAction(d.Action), b)
	var res orchestrator.BulkResult
	if aerr == nil {
		res, aerr = s.bulk(r, req)
	}
	if aerr != nil {
		d.Error, status = aerr.msg+". Nothing was changed.", aerr.status
		if aerr.requestID != "" {
			d.Error = internalText(Error{Error: aerr.msg, RequestID: aerr.requestID})
		}
	} else {
		d.Result = &res
	}
	s.render(w, status, "bulk", d)
}
