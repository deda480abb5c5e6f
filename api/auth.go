package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Who may do what:
//
//	starts (POST /sagas)     client or admin token, when http.client_token or
//	                         http.protect_reads is set; open otherwise
//	reads (GET /sagas...,    client or admin token (or the page's session
//	/stats, /ui/ pages)      cookie) when http.protect_reads is set
//	operator actions         admin token; 403 when none is configured
//	/metrics, /readyz        client or admin token when http.protect_metrics
//	/healthz                 always open

// secret is a configured bearer token, kept as its SHA-256 digest so that a
// comparison takes the same time whatever the length of the token offered.
type secret struct {
	set bool
	sum [sha256.Size]byte
	// session keys the page's session cookies minted for this token.
	session []byte
}

func newSecret(tok string) secret {
	if tok == "" {
		return secret{}
	}
	s := secret{set: true, sum: sha256.Sum256([]byte(tok))}
	mac := hmac.New(sha256.New, s.sum[:])
	mac.Write([]byte("sagaflow status page session v1"))
	s.session = mac.Sum(nil)
	return s
}

// matches reports in constant time whether tok is this secret.
func (s secret) matches(tok string) bool {
	got := sha256.Sum256([]byte(tok))
	eq := subtle.ConstantTimeCompare(got[:], s.sum[:]) == 1
	return eq && s.set
}

// role is what a request may do.
type role int

const (
	roleNone role = iota
	roleClient
	roleAdmin
)

// bearer returns the token of an "Authorization: Bearer <token>" header;
// the scheme is case-insensitive.
func bearer(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// roleOf is the role the token tok grants; both secrets are always
// compared, so the time taken does not tell which one matched.
func (s *Server) roleOf(tok string) role {
	admin := s.adminTok.matches(tok)
	client := s.clientTok.matches(tok)
	switch {
	case admin:
		return roleAdmin
	case client:
		return roleClient
	}
	return roleNone
}

// requestRole is the role of r's bearer token.
func (s *Server) requestRole(r *http.Request) role {
	tok, ok := bearer(r)
	if !ok {
		return roleNone
	}
	return s.roleOf(tok)
}

func unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="sagaflow"`)
	fail(w, http.StatusUnauthorized, "", "%s", msg)
}

// guard wraps h so that it runs only for requests of role min or more;
// when protect is false, h is open to everyone.
func (s *Server) guard(protect bool, min role, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if protect && s.requestRole(r) < min {
			unauthorized(w, "a valid bearer token is required (Authorization: Bearer <token>)")
			return
		}
		h(w, r)
	}
}

func (s *Server) read(h http.HandlerFunc) http.HandlerFunc {
	return s.guard(s.cfg.ProtectReads, roleClient, h)
}

func (s *Server) starts(h http.HandlerFunc) http.HandlerFunc {
	return s.guard(s.cfg.ClientToken != "" || s.cfg.ProtectReads, roleClient, h)
}

func (s *Server) ops(h http.HandlerFunc) http.HandlerFunc {
	return s.guard(s.cfg.ProtectMetrics, roleClient, h)
}

func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.adminTok.set {
			fail(w, http.StatusForbidden, "", "operator actions are disabled: set http.admin_token")
			return
		}
		if s.requestRole(r) != roleAdmin {
			unauthorized(w, "a valid bearer token is required for operator actions: the admin token")
			return
		}
		h(w, r)
	}
}

// The status page's session: after POST /ui/login with the admin or the
// client token, a cookie holds "<role>.<expiry>.<mac>", the mac an
// HMAC-SHA256 of "<role>.<expiry>" under a key derived from that token. The
// cookie never holds the token; it stops working when it expires or the
// token changes, and every replica configured with the same token accepts
// it.

// sessionCookie names the page's session cookie.
const sessionCookie = "sagaflow_session"

// SessionTTL is how long a status page login lasts.
const SessionTTL = 12 * time.Hour

func sessionMAC(key []byte, payload string) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// newSession returns the cookie value of a session of role.
func (s *Server) newSession(rl role, now time.Time) string {
	key, tag := s.clientTok.session, "c"
	if rl == roleAdmin {
		key, tag = s.adminTok.session, "a"
	}
	payload := tag + "." + strconv.FormatInt(now.Add(SessionTTL).Unix(), 10)
	return payload + "." + sessionMAC(key, payload)
}

// sessionRole checks the session cookie of r (constant time in its mac).
func (s *Server) sessionRole(r *http.Request, now time.Time) role {
	c, err := r.Cookie(sessionCookie)
	if err != nil || len(c.Value) > 200 {
		return roleNone
	}
	parts := strings.Split(c.Value, ".")
	if len(parts) != 3 {
		return roleNone
	}
	var sec secret
	var rl role
	switch parts[0] {
	case "a":
		sec, rl = s.adminTok, roleAdmin
	case "c":
		sec, rl = s.clientTok, roleClient
	default:
		return roleNone
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || !sec.set || now.Unix() >= exp || exp > now.Add(SessionTTL+time.Minute).Unix() {
		return roleNone
	}
	want := sessionMAC(sec.session, parts[0]+"."+parts[1])
	if !hmac.Equal([]byte(want), []byte(parts[2])) {
		return roleNone
	}
	return rl
}

// safeBack returns back when it is a path under /ui/ (cleaned, without
// scheme, host, backslashes, control characters or dot segments), else
// the list page.
func safeBack(back string) string {
	const home = "/ui/sagas"
	if back == "" || len(back) > 2000 || strings.ContainsAny(back, `\`) || strings.IndexFunc(back, unicode.IsControl) >= 0 ||
		!strings.HasPrefix(back, "/ui/") || strings.HasPrefix(back, "//") {
		return home
	}
	p, q, _ := strings.Cut(back, "?")
	if i := strings.IndexByte(q, '#'); i >= 0 {
		q = q[:i]
	}
	if i := strings.IndexByte(p, '#'); i >= 0 {
		p = p[:i]
	}
	dec, err := url.PathUnescape(p)
	if err != nil || strings.ContainsAny(dec, `\`) || strings.IndexFunc(dec, unicode.IsControl) >= 0 {
		return home
	}
	for _, seg := range strings.Split(dec, "/") {
		if seg == "." || seg == ".." {
			return home
		}
	}
	if clean := path.Clean(dec); clean != dec && clean+"/" != dec || !strings.HasPrefix(clean+"/", "/ui/") || strings.Contains(dec, "//") {
		return home
	}
	if strings.ContainsAny(q, `\`) {
		return home
	}
	out := p
	if q != "" {
		out += "?" + q
	}
	return out
}
