package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Who may do what (each route's access is declared where it is
// registered, routeAll, and decided by the gate before its handler runs):
//
//	starts (POST /sagas)     client or admin token, when http.client_token or
//	                         http.protect_reads is set; open otherwise
//	reads (GET /sagas...,    client or admin token (or the page's session
//	/stats, /ui/ pages)      cookie) when http.protect_reads is set
//	operator actions         admin token (bearer; on the pages' forms the
//	                         token field); 403 when none is configured
//	/metrics, /readyz        client or admin token when http.protect_metrics
//	/healthz, /openapi.yaml  always open
//
// A token that is offered must be right, wherever it is offered; wrong
// ones are counted per client (failureLimiter).

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

// credentials is the role tok grants and, for a named operator token
// (Config.Operators), the operator's name. Every secret is compared.
func (s *Server) credentials(tok string) (role, string) {
	admin := s.adminTok.matches(tok)
	client := s.clientTok.matches(tok)
	name := s.operatorOf(tok)
	switch {
	case admin:
		return roleAdmin, ""
	case name != "":
		return roleAdmin, name
	case client:
		return roleClient, ""
	}
	return roleNone, ""
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

// newSession returns the cookie value of a session of role; a named
// operator's session (operator set) is keyed by that operator's token.
func (s *Server) newSession(rl role, operator string, now time.Time) string {
	key, tag := s.clientTok.session, "c"
	if rl == roleAdmin {
		key, tag = s.adminTok.session, "a"
	}
	if sec, ok := s.operatorByName(operator); ok {
		key, tag = sec.session, "o-"+operator
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
		name, ok := strings.CutPrefix(parts[0], "o-")
		if !ok {
			return roleNone
		}
		if sec, ok = s.operatorByName(name); !ok {
			return roleNone
		}
		rl = roleAdmin
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

// TokenMinLength is the length a token must have at least.
const TokenMinLength = 24

// weakWords are values the documentation, examples and habit put in
// token settings; a token made of them (and digits) only, or holding a
// placeholder, is refused whatever its length.
var (
	weakWords    = []string{"changeme", "replaceme", "chooseone", "placeholder", "example", "yourtoken", "yoursecret", "insecure", "notsecret"}
	commonWords  = []string{"password", "passwd", "secret", "sagaflow", "operator", "default", "letmein", "qwerty", "client", "bearer", "admin", "token", "test", "shop", "prod", "change", "me", "the", "of", "my", "api", "key", "s3cret", "passw0rd"}
	digitsOrDash = strings.NewReplacer("0", "", "1", "", "2", "", "3", "", "4", "", "5", "", "6", "", "7", "", "8", "", "9", "")
)

// WeakToken says why tok is not fit to be a bearer token, "" when it is:
// shorter than TokenMinLength, not printable ASCII without spaces, one
// character repeated, a short pattern repeated, a run such as "abcdef…",
// few different characters, a placeholder ("change-me", "example") or
// well-known words and digits only ("admin-token-2024…").
func WeakToken(tok string) string {
	if len(tok) < TokenMinLength {
		return fmt.Sprintf("it is %d characters long; at least %d are required (make one with `openssl rand -hex 32`)", len(tok), TokenMinLength)
	}
	for _, c := range []byte(tok) {
		if c <= ' ' || c > '~' {
			return "it has a character other than printable ASCII without spaces (it travels in an HTTP header)"
		}
	}
	var norm []byte
	for _, c := range []byte(strings.ToLower(tok)) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			norm = append(norm, c)
		}
	}
	n := string(norm)
	distinct := map[byte]bool{}
	for _, c := range []byte(tok) {
		distinct[c] = true
	}
	switch {
	case len(distinct) == 1:
		return "it is one character repeated"
	case len(distinct) < 6:
		return fmt.Sprintf("it uses only %d different characters", len(distinct))
	}
	for _, w := range weakWords {
		if strings.Contains(n, w) {
			return fmt.Sprintf("it holds the placeholder %q", w)
		}
	}
	for p := 1; p <= len(n)/2; p++ {
		if strings.Repeat(n[:p], len(n)/p+1)[:len(n)] == n {
			return "it is a short pattern repeated"
		}
	}
	steps := 0
	for i := 1; i < len(n); i++ {
		if d := int(n[i]) - int(n[i-1]); d == 1 || d == -1 {
			steps++
		}
	}
	if len(n) > 1 && steps*5 >= (len(n)-1)*4 {
		return "it is a run of consecutive characters"
	}
	rest := n
	for _, w := range commonWords {
		rest = strings.ReplaceAll(rest, w, "")
	}
	if len(digitsOrDash.Replace(rest)) < 4 {
		return "it is made of well-known words and digits"
	}
	return ""
}
