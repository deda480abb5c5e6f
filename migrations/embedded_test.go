package migrations_test

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/sagaflow/sagaflow/migrations"
)

func TestFromEmbedded(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"sql/002_more.up.sql":  {Data: []byte(`ALTER TABLE {{schema}}.t ADD COLUMN b int;`)},
		"sql/001_first.up.sql": {Data: []byte(`CREATE TABLE {{schema}}.t (a int);`)},
		"bad/x.sql":            {Data: []byte(`SELECT 1;`)},
	}
	sets, err := migrations.FromEmbedded("things", "shop", fsys, "sql")
	if err != nil {
		t.Fatalf("FromEmbedded: %v", err)
	}
	if len(sets) != 1 || sets[0].Name != "things" || sets[0].Schema != "shop" || len(sets[0].Migrations) != 2 {
		t.Fatalf("sets = %+v, want one set things/shop with two migrations", sets)
	}
	if m := sets[0].Migrations[0]; m.Version != 1 || m.SQL != `CREATE TABLE "shop".t (a int);` {
		t.Fatalf("first migration = %+v, want version 1 with the schema substituted", m)
	}

	for name, c := range map[string]struct {
		schema, dir, want string
	}{
		"bad dir":    {"shop", "../sql", `"things"`},
		"bad file":   {"shop", "bad", `"things"`},
		"bad schema": {"no-dash", "sql", `"things"`},
	} {
		_, err := migrations.FromEmbedded("things", c.schema, fsys, c.dir)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want an error naming the set %s", name, err, c.want)
		}
	}
}
