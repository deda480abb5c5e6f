// Package dburl derives and prints Postgres connection strings: a fresh
// database on the server of a URL (Fresh, WithDatabase) and a string with
// its password hidden (Redact). The demo, the bench, the fault harness
// and the conformance kit share it.
package dburl

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Fresh drops and creates database name on the server of base
// and returns its URL.
func Fresh(ctx context.Context, base, name string) (string, error) {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", fmt.Errorf("connect to Postgres at %s: %w (is it running? pg_ctlcluster --skip-systemctl-redirect 15 main start; or run the demo on a throwaway server: demo --embedded-postgres)", Redact(base), err)
	}
	defer conn.Close(ctx)
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("drop database %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return WithDatabase(base, name)
}

// WithDatabase is the URL base with its database replaced by name.
func WithDatabase(base, name string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme == "" {
		return "", fmt.Errorf("database url %q must be a postgres:// URL to derive a database of its own", Redact(base))
	}
	u.Path = "/" + name
	return u.String(), nil
}

// Redact hides the password of a Postgres connection string for printing:
// the URL form's (postgres://user:secret@host/db, and a password query
// parameter) and the keyword form's (host=h password=secret, quoted or
// not) become xxxxx.
func Redact(dsn string) string {
	if p, err := url.Parse(dsn); err == nil && (p.Scheme == "postgres" || p.Scheme == "postgresql") {
		if p.User != nil {
			if _, has := p.User.Password(); has {
				p.User = url.UserPassword(p.User.Username(), "xxxxx")
			}
		}
		if q := p.Query(); q.Has("password") {
			q.Set("password", "xxxxx")
			p.RawQuery = q.Encode()
		}
		return p.String()
	}
	return redactKeywords(dsn)
}

// redactKeywords replaces the value of every password keyword of a
// keyword/value connection string (libpq's syntax: key = value, values
// single-quoted with backslash escapes or bare up to a space).
func redactKeywords(dsn string) string {
	var b strings.Builder
	i := 0
	for i < len(dsn) {
		// copy the spaces and the key, up to and with the '='
		start := i
		for i < len(dsn) && isSpace(dsn[i]) {
			i++
		}
		keyStart := i
		for i < len(dsn) && dsn[i] != '=' && !isSpace(dsn[i]) {
			i++
		}
		key := dsn[keyStart:i]
		for i < len(dsn) && isSpace(dsn[i]) {
			i++
		}
		if i >= len(dsn) || dsn[i] != '=' {
			b.WriteString(dsn[start:i])
			continue
		}
		i++
		for i < len(dsn) && isSpace(dsn[i]) {
			i++
		}
		b.WriteString(dsn[start:i])
		valStart := i
		if i < len(dsn) && dsn[i] == '\'' {
			for i++; i < len(dsn) && dsn[i] != '\''; i++ {
				if dsn[i] == '\\' {
					i++
				}
			}
			i = min(i+1, len(dsn))
		} else {
			for i < len(dsn) && !isSpace(dsn[i]) {
				if dsn[i] == '\\' {
					i++
				}
				i++
			}
			i = min(i, len(dsn))
		}
		if strings.EqualFold(key, "password") {
			b.WriteString("xxxxx")
		} else {
			b.WriteString(dsn[valStart:i])
		}
	}
	return b.String()
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}
