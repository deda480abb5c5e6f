package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// access says who may call a route. The gate decides it for every route,
// once, before the route's handler reads anything: a refused request never
// reaches the handler, so a refusal carries no data.
type access int

const (
	// accessOpen: anyone (/healthz, /openapi.yaml, the /ui/ redirect).
	accessOpen access = iota
	// accessStart: POST /sagas, and the client's POST /sagas/{id}/events
	// and /sagas/{id}/cancel. The client or admin bearer token when
	// http.client_token or http.protect_reads is set.
	accessStart
	// accessRead: the JSON reads. The client or admin bearer token when
	// http.protect_reads is set.
	accessRead
	// accessPage: the status pages. As accessRead, or the session cookie
	// of POST /ui/login; a refusal is the login page.
	accessPage
	// accessOps: /readyz and /metrics. The client or admin bearer token
	// when http.protect_metrics is set.
	accessOps
	// accessAdmin: the JSON operator actions. The admin bearer token; 403
	// when none is configured.
	accessAdmin
	// accessAdminForm: the pages' operator forms. The admin token in the
	// form's token field; 403 when none is configured. A refusal is an
	// error page.
	accessAdminForm
	// accessLogin: POST /ui/login. The client or admin token in the form's
	// token field; a refusal is the login page again.
	accessLogin
)

var accessNames = [...]string{
	accessOpen: "open", accessStart: "start", accessRead: "read", accessPage: "page",
	accessOps: "ops", accessAdmin: "admin", accessAdminForm: "admin-form", accessLogin: "login",
}

func (a access) String() string { return accessNames[a] }

// Route is a registered route: its pattern ("METHOD /path") and who may
// call it (open, start, read, page, ops, admin, admin-form or login; see
// docs/operations.md).
type Route struct {
	Pattern string
	Access  string
}

// Routes lists the server's routes in the order they were registered.
func (s *Server) Routes() []Route { return append([]Route(nil), s.routes...) }

// routeAll registers every route of the server. A route is registered
// only through route, with its access: there is no other way onto the mux.
func (s *Server) routeAll() {
	s.route("POST /sagas", accessStart, s.start)
	s.route("GET /sagas", accessRead, s.list)
	s.route("GET /sagas/{id}", accessRead, s.get)
	// One mux pattern for both: "POST /sagas/{id}/events" alone would
	// conflict with "POST /sagas/actions/{action}" (neither is more
	// specific); "/sagas/{id}/{verb}" is less specific than it.
	s.route("POST /sagas/{id}/{verb}", accessStart, s.sagaVerb, "POST /sagas/{id}/cancel", "POST /sagas/{id}/events")
	s.route("POST /sagas/{id}/actions/{action}", accessAdmin, s.operate)
	s.route("GET /sagas/{id}/audit", accessAdmin, s.sagaAudit)
	s.route("POST /sagas/actions/{action}", accessAdmin, s.operateMatching)
	s.route("GET /proposals", accessAdmin, s.listProposals)
	s.route("POST /proposals/{id}/approve", accessAdmin, s.approveProposal)
	s.route("POST /proposals/{id}/reject", accessAdmin, s.rejectProposal)
	s.route("GET /openapi.yaml", accessOpen, s.openAPI)
	s.route("GET /stats", accessRead, s.stats)

	s.route("GET /reconcile", accessRead, s.reconcileView)
	s.route("POST /reconcile/run", accessAdmin, s.reconcileRun)
	s.route("POST /reconcile/discrepancies/{id}/resolve", accessAdmin, s.resolveDiscrepancy)

	s.route("GET /dlq", accessRead, s.dlqList)
	s.route("GET /dlq/audit", accessRead, s.dlqAudit)
	s.route("GET /dlq/{id}", accessRead, s.dlqGet)
	s.route("POST /dlq/{id}/redrive", accessAdmin, s.dlqRedriveOne)
	s.route("POST /dlq/redrive", accessAdmin, s.dlqRedriveMany)
	s.route("GET /outbox/dead", accessRead, s.deadOutbox)
	s.route("POST /outbox/dead/{id}/requeue", accessAdmin, s.requeueOne)
	s.route("POST /outbox/dead/requeue", accessAdmin, s.requeueMany)

	s.route("GET /ui/{$}", accessOpen, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/sagas", http.StatusFound)
	})
	s.route("GET /ui/sagas", accessPage, s.listPage)
	s.route("GET /ui/sagas/{id}", accessPage, s.detailPage)
	s.route("POST /ui/sagas/{id}/actions/{action}", accessAdminForm, s.actionPage)
	s.route("POST /ui/sagas/actions", accessAdminForm, s.bulkPage)
	s.route("POST /ui/login", accessLogin, s.login)
	s.route("GET /ui/dlq", accessPage, s.dlqPage)
	s.route("POST /ui/dlq/{kind}/{id}", accessAdminForm, s.dlqActionPage)
	s.route("GET /ui/reconcile", accessPage, s.reconcilePage)
	s.route("GET /ui/proposals", accessPage, s.proposalsPage)
	s.route("POST /ui/proposals/{id}/{decision}", accessAdminForm, s.proposalDecisionPage)
	s.route("POST /ui/reconcile/run", accessAdminForm, s.reconcileRunPage)
	s.route("POST /ui/reconcile/{id}/resolve", accessAdminForm, s.reconcileResolvePage)

	s.route("GET /healthz", accessOpen, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "alive"})
	})
	s.route("GET /readyz", accessOps, s.ready)
	if s.cfg.Gatherer != nil {
		s.route("GET /metrics", accessOps, promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}).ServeHTTP)
	}
}

// sagaVerb serves POST /sagas/{id}/events and /sagas/{id}/cancel; another
// verb answers 404 (after the gate).
func (s *Server) sagaVerb(w http.ResponseWriter, r *http.Request) {
	switch r.PathValue("verb") {
	case "events":
		s.sendEvent(w, r)
	case "cancel":
		s.cancel(w, r)
	default:
		fail(w, http.StatusNotFound, "", "no route %s %s", r.Method, echo(r.URL.Path))
	}
}

// route registers h for pattern behind the gate of a. Routes lists it
// as pattern, or as the listed patterns it serves (routeVerbs).
func (s *Server) route(pattern string, a access, h http.HandlerFunc, listed ...string) {
	if len(listed) == 0 {
		listed = []string{pattern}
	}
	for _, p := range listed {
		s.routes = append(s.routes, Route{Pattern: p, Access: a.String()})
	}
	s.mux.Handle(pattern, s.gate(a, h))
}

type roleKey struct{}

// callerRole is the role the gate found for r: what its credentials
// grant (roleNone on an open route, or without credentials).
func callerRole(r *http.Request) role {
	rl, _ := r.Context().Value(roleKey{}).(role)
	return rl
}

// needs is the least role a route of access a wants under the server's
// configuration; roleNone: anyone.
func (s *Server) needs(a access) role {
	switch a {
	case accessStart:
		if s.clientTok.set || s.cfg.ProtectReads {
			return roleClient
		}
	case accessRead, accessPage:
		if s.cfg.ProtectReads {
			return roleClient
		}
	case accessOps:
		if s.cfg.ProtectMetrics {
			return roleClient
		}
	case accessLogin:
		return roleClient
	case accessAdmin, accessAdminForm:
		return roleAdmin
	}
	return roleNone
}

// gate wraps h with the check of access a. It reads the request's
// credentials (the bearer token; on a page also the session cookie; on a
// form the token field), refuses a request whose credentials do not reach
// what a needs, and refuses any request that offers a token that is wrong
// (even where none is needed: a route must not tell a right token from a
// wrong one without counting the guess). A client whose wrong tokens
// exceeded the failure budget is answered 429 without its token being
// checked. h runs only after the checks passed, with the caller's role in
// its context (callerRole).
func (s *Server) gate(a access, h http.HandlerFunc) http.HandlerFunc {
	if a == accessOpen {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		form := a == accessAdminForm || a == accessLogin
		if form {
			r.Body = http.MaxBytesReader(w, r.Body, MaxActionBodyBytes)
			if err := r.ParseForm(); err != nil {
				s.render(w, http.StatusBadRequest, "error", fmt.Sprintf("The form could not be read (at most %d bytes of form fields).", MaxActionBodyBytes))
				return
			}
		}
		tok, offered := bearer(r)
		if form {
			tok = r.PostFormValue("token")
			offered = tok != ""
		}
		need := s.needs(a)
		if need == roleAdmin && !s.adminTok.set && len(s.operators) == 0 {
			s.refuse(w, r, a, http.StatusForbidden, 0)
			return
		}
		client := s.clientKey(r)
		if offered {
			if wait := s.failures.wait(client, time.Now()); wait > 0 {
				s.refuse(w, r, a, http.StatusTooManyRequests, wait)
				return
			}
		}
		rl, operator := roleNone, ""
		if offered {
			rl, operator = s.credentials(tok)
			if rl == roleNone {
				s.failures.fail(client, time.Now())
				s.cfg.Logger.WarnContext(r.Context(), "wrong token", slog.String("client", client), slog.String("method", r.Method),
					slog.String("path", cut(r.URL.Path, 200)), slog.String("access", a.String()))
				s.refuse(w, r, a, http.StatusUnauthorized, 0)
				return
			}
		} else if a == accessPage {
			rl = s.sessionRole(r, time.Now())
		}
		if rl < need {
			s.refuse(w, r, a, http.StatusUnauthorized, 0)
			return
		}
		if a != accessOps && a != accessLogin && s.cfg.Prepared != nil && !s.cfg.Prepared() {
			s.refuse(w, r, a, http.StatusServiceUnavailable, StartingRetryAfter)
			return
		}
		h(w, r.WithContext(withOperator(context.WithValue(r.Context(), roleKey{}, rl), operator)))
	}
}

// StartingRetryAfter is the Retry-After of the 503 a route answers while
// the process is still preparing (Config.Prepared).
const StartingRetryAfter = 2 * time.Second

// refuse answers a request the gate refused, in the form of its route
// (JSON, the login page or an error page), without any data: status 401
// (no or a wrong credential), 403 (operator actions disabled), 429
// (too many wrong tokens; retry after wait) or 503 (still preparing:
// Config.Prepared; retry after wait).
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, a access, status int, wait time.Duration) {
	var msg string
	switch status {
	case http.StatusTooManyRequests:
		secs := int((wait + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		msg = fmt.Sprintf("too many wrong tokens from this client; try again in %d s", secs)
	case http.StatusForbidden:
		msg = "operator actions are disabled: set http.admin_token"
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)))
		msg = fmt.Sprintf("starting: the orchestrator is preparing its schema and topics; retry in %d s (nothing was done)", int(wait/time.Second))
	}
	if status == http.StatusServiceUnavailable && a != accessStart && a != accessRead && a != accessAdmin {
		s.render(w, status, "error", sentence(msg))
		return
	}
	switch a {
	case accessPage, accessLogin:
		d := loginData{Back: safeBack(r.URL.RequestURI())}
		if a == accessLogin {
			d.Back = safeBack(r.PostFormValue("back"))
			if status == http.StatusUnauthorized {
				d.Error = "That token is neither the admin nor the client token."
			}
		}
		if msg != "" {
			d.Error = sentence(msg)
		}
		s.render(w, status, "login", d)
	case accessAdminForm:
		if msg == "" {
			msg = "the admin token is missing or wrong"
		}
		s.render(w, status, "error", sentence(msg)+" Nothing was changed.")
	default:
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sagaflow"`)
			msg = "a valid bearer token is required (Authorization: Bearer <token>)"
			if a == accessAdmin {
				msg = "a valid bearer token is required for operator actions: the admin token"
			}
		}
		fail(w, status, "", "%s", msg)
	}
}

// sentence capitalises msg and ends it with a full stop.
func sentence(msg string) string {
	if msg == "" {
		return msg
	}
	return strings.ToUpper(msg[:1]) + msg[1:] + "."
}
