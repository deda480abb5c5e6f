package cli

import (
	"net/url"
	"strings"
)

// What `config --effective` prints fails closed on secrets: the value of
// any key that looks like a secret is hidden, and so is every credential of
// a URL or a Postgres connection string; a URL or connection string that
// does not parse is hidden whole rather than printed raw.

const (
	redacted     = "<redacted>"
	masked       = "xxxxx"
	unparsedNote = "<redacted: does not parse>"
)

// secretName reports whether a configuration key (its last dotted part) or
// a connection parameter looks like it holds a secret: password,
// sslpassword, passfile, passphrase, token, secret, sslkey, key_file, api
// keys, credentials, auth, cookies, private material.
func secretName(name string) bool {
	n := strings.ToLower(name)
	if i := strings.LastIndexByte(n, '.'); i >= 0 {
		n = n[i+1:]
	}
	for _, w := range []string{"pass", "secret", "token", "key", "credential", "auth", "cookie", "private", "signature"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// redactSetting is val of configuration key as `config --effective`
// prints it.
func redactSetting(key, val string) string {
	switch {
	case val == "":
		return ""
	case (val == "true" || val == "false") && !secretKeys[key]:
		// A switch such as http.secure_cookie holds no secret.
		return val
	case secretKeys[key] || secretName(key):
		return redacted
	case key == "database.url" && !strings.HasPrefix(val, "postgres://") && !strings.HasPrefix(val, "postgresql://"):
		return redactKeywords(val)
	case strings.Contains(val, "://") || key == "database.url":
		return redactURL(val)
	}
	return val
}

// redactURL hides the password of a URL's user info, the value of every
// query parameter that looks like a secret, and the fragment; a URL that
// does not parse (or whose query does not) is hidden whole.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Opaque != "" || u.Scheme == "" {
		return unparsedNote
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), masked)
		}
	}
	if u.RawQuery != "" {
		parts := strings.Split(u.RawQuery, "&")
		for i, p := range parts {
			name, _, hasValue := strings.Cut(p, "=")
			n, err := url.QueryUnescape(name)
			if err != nil || strings.Contains(p, ";") {
				return unparsedNote
			}
			if secretName(n) && hasValue {
				parts[i] = name + "=" + masked
			}
		}
		u.RawQuery = strings.Join(parts, "&")
	}
	if u.Fragment != "" || u.RawFragment != "" {
		u.Fragment, u.RawFragment = masked, ""
	}
	return u.String()
}

// redactKeywords hides the value of every parameter of a keyword/value
// connection string (libpq's syntax: key = value, a value bare up to white
// space or single-quoted with backslash escapes) whose name looks like a
// secret. A string that is not that syntax (a word without '=', an
// unterminated quote) is hidden whole: which part is a secret cannot be
// told.
func redactKeywords(s string) string {
	var b strings.Builder
	i := 0
	space := func() {
		for i < len(s) && isSpaceByte(s[i]) {
			i++
		}
	}
	for {
		start := i
		space()
		b.WriteString(s[start:i])
		if i >= len(s) {
			return b.String()
		}
		keyStart := i
		for i < len(s) && s[i] != '=' && !isSpaceByte(s[i]) {
			i++
		}
		key := s[keyStart:i]
		space()
		if key == "" || i >= len(s) || s[i] != '=' {
			return unparsedNote
		}
		i++
		space()
		b.WriteString(s[keyStart:i])
		valStart := i
		if i < len(s) && s[i] == '\'' {
			closed := false
			for i++; i < len(s); i++ {
				if s[i] == '\\' {
					i++
					continue
				}
				if s[i] == '\'' {
					closed = true
					i++
					break
				}
			}
			if !closed {
				return unparsedNote
			}
		} else {
			for i < len(s) && !isSpaceByte(s[i]) {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i = min(i, len(s))
		}
		if secretName(key) {
			b.WriteString(masked)
		} else {
			b.WriteString(s[valStart:i])
		}
	}
}

func isSpaceByte(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}
