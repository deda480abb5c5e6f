package migrations

import (
	"fmt"
	"io/fs"
)

// FromEmbedded builds the migration set name for schema from the files in
// directory dir of fsys (typically a package's //go:embed sql/*.up.sql
// filesystem with dir "sql"), as FromFS does, and returns it as a
// one-element slice ready for Apply.
func FromEmbedded(name, schema string, fsys fs.FS, dir string) ([]Set, error) {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("migration set %q: directory %q: %w", name, dir, err)
	}
	s, err := FromFS(name, schema, sub)
	if err != nil {
		return nil, err
	}
	return []Set{s}, nil
}
