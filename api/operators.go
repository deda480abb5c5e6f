package api

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"sort"
)

// Named operator tokens (Config.Operators): each person who acts on sagas
// has a token of their own. A request with one has the admin role and an
// identity: the actor of its operator actions and of its four-eyes
// decisions is the token's name, not a name typed in the body, so "a
// different person approves" is a fact the server checked. Once any is
// configured, operator actions and proposal decisions need a named token
// (the shared admin token keeps the other admin routes).

// operatorNamePattern is what an operator's name may be: it is journaled
// as the actor and travels in the page's session cookie.
var operatorNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// operatorSecret is a named operator token.
type operatorSecret struct {
	name string
	sec  secret
}

// validateOperators checks Config.Operators: names of the pattern, tokens
// strong, distinct from each other and from the admin and client tokens.
func (c Config) validateOperators() error {
	seen := map[string]string{}
	names := make([]string, 0, len(c.Operators))
	for name := range c.Operators {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		tok := c.Operators[name]
		switch {
		case !operatorNamePattern.MatchString(name):
			return fmt.Errorf("api: Config.Operators: name %q: want lower-case letters, digits, '-' or '_' (at most 63)", name)
		case WeakToken(tok) != "":
			return fmt.Errorf("api: Config.Operators[%q]: the token is refused: %s", name, WeakToken(tok))
		case tok == c.AdminToken || tok == c.ClientToken:
			return fmt.Errorf("api: Config.Operators[%q]: the token equals the admin or the client token", name)
		case seen[tok] != "":
			return fmt.Errorf("api: Config.Operators[%q] and [%q] have the same token: one could act as the other", seen[tok], name)
		}
		seen[tok] = name
	}
	return nil
}

func newOperators(ops map[string]string) []operatorSecret {
	out := make([]operatorSecret, 0, len(ops))
	for name, tok := range ops {
		out = append(out, operatorSecret{name: name, sec: newSecret(tok)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// operatorOf is the name of the operator whose token tok is ("" if none).
// Every operator's secret is compared.
func (s *Server) operatorOf(tok string) string {
	name := ""
	for _, o := range s.operators {
		if o.sec.matches(tok) {
			name = o.name
		}
	}
	return name
}

// operatorByName is the named operator's secret.
func (s *Server) operatorByName(name string) (secret, bool) {
	for _, o := range s.operators {
		if o.name == name {
			return o.sec, true
		}
	}
	return secret{}, false
}

// operatorKey carries the caller's operator name in a request's context.
type operatorKey struct{}

func withOperator(ctx context.Context, name string) context.Context {
	if name == "" {
		return ctx
	}
	return context.WithValue(ctx, operatorKey{}, name)
}

// callerOperator is the name of the operator token the request came with
// ("" for the shared admin token or none).
func callerOperator(r *http.Request) string {
	name, _ := r.Context().Value(operatorKey{}).(string)
	return name
}

// actor is who an operator action or decision of r is by: with named
// operator tokens configured, the caller's token's name (a typed actor
// must be that name, or empty), and a request with the shared admin token
// is refused; without them, the typed actor as before.
func (s *Server) actor(r *http.Request, typed string) (string, *actionError) {
	if len(s.operators) == 0 {
		return typed, nil
	}
	name := callerOperator(r)
	switch {
	case name == "":
		return "", &actionError{status: http.StatusForbidden, field: "token",
			msg: "operator actions need a named operator token (http.operator_tokens): the shared admin token cannot tell who acts"}
	case typed != "" && typed != name:
		return "", &actionError{status: http.StatusForbidden, field: "actor",
			msg: fmt.Sprintf("actor %s is not the operator of this token (%s): leave actor empty or give your own name", echo(typed), name)}
	}
	return name, nil
}
