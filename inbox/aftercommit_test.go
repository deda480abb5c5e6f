package inbox

import (
	"context"
	"testing"
)

// The hooks of a handler call are kept when it succeeds and dropped with
// its writes when it fails or undoes them; outside a handler AfterCommit
// declines.
func TestAfterCommitHooksFollowTheWrites(t *testing.T) {
	if AfterCommit(nil, func() {}) {
		t.Fatal("AfterCommit outside a handler accepted a hook")
	}
	_, h := withHooks(context.Background())
	tx := &batchTx{hooks: h}
	tx.root = tx
	var ran []string
	reg := func(name string) {
		if !AfterCommit(tx, func() { ran = append(ran, name) }) {
			t.Fatal("AfterCommit in a handler declined")
		}
	}
	h.begin()
	reg("first call")
	h.begin() // a second call (a split's other half)
	reg("failed call")
	h.drop()
	h.begin()
	reg("undone")
	h.drop() // Undo
	reg("after undo")
	h.run()
	if got := len(ran); got != 2 || ran[0] != "first call" || ran[1] != "after undo" {
		t.Fatalf("ran %v, want the first call's and the one after the undo", ran)
	}
}
