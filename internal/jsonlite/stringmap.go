package jsonlite

import (
	"slices"
)

// AppendStringMap appends m as encoding/json marshals a map[string]string:
// null for a nil map, else an object with its names in sorted order, names
// and values escaped as AppendString escapes them. It is the one encoder of
// the headers columns (outbox rows, dead letters).
func AppendStringMap(dst []byte, m map[string]string) []byte {
	if m == nil {
		return append(dst, "null"...)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(AppendString(dst, k), ':')
		dst = AppendString(dst, m[k])
	}
	return append(dst, '}')
}

// ReadStringMap reads b, a JSON object of strings (as jsonb prints one,
// {"k": "v", ...}) or null, to the map encoding/json would give (nil for a
// null; the last of repeated names wins), and refuses what encoding/json
// refuses. It is the one decoder of the headers columns: the relay reads
// one per row it claims, without reflection
// (docs/perf/figures.md#outbox-headers-json).
func ReadStringMap(b []byte) (map[string]string, error) {
	r := NewReader(b)
	if r.Null() {
		return nil, r.End()
	}
	m := make(map[string]string, 4)
	err := r.Object(func(name []byte) error {
		v, err := r.String()
		m[string(name)] = v
		return err
	})
	if err == nil {
		err = r.End()
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}
