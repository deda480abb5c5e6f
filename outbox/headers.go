package outbox

import (
	"encoding/json"
	"unicode/utf8"
)

// decodeHeaders decodes a row's headers column, a flat JSON object of
// strings as jsonb prints it ({"k": "v", ...}). The relay decodes one per
// row it claims, and encoding/json took 4% of the bench process's CPU
// there; an object whose keys and values hold no escapes (message ids,
// saga ids, content types) is read directly, anything else by
// encoding/json.
func decodeHeaders(b []byte) (map[string]string, error) {
	if m, ok := decodeFlatStrings(b); ok {
		return m, nil
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// decodeFlatStrings reads a JSON object whose members are all strings
// without backslashes and valid UTF-8; ok is false for anything else.
func decodeFlatStrings(b []byte) (map[string]string, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	m := make(map[string]string, 4)
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return m, skipSpace(b, i+1) == len(b)
	}
	for {
		k, j, ok := plainString(b, i)
		if !ok {
			return nil, false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		v, j, ok := plainString(b, skipSpace(b, i+1))
		if !ok {
			return nil, false
		}
		m[k] = v
		i = skipSpace(b, j)
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return m, skipSpace(b, i+1) == len(b)
		default:
			return nil, false
		}
	}
}

// plainString reads the string starting at b[i] (a '"'); it returns the
// index after its closing quote. ok is false if there is no string there,
// or it holds a backslash, a control character or invalid UTF-8.
func plainString(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			s := b[i+1 : j]
			if !utf8.Valid(s) {
				return "", 0, false
			}
			return string(s), j + 1, true
		case c == '\\' || c < 0x20:
			return "", 0, false
		}
	}
	return "", 0, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
