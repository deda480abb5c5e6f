package cli

import (
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/message"
)

const (
	secretA = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	secretB = "hex:0101010101010101010101010101010101010101010101010101010101010101"
)

// security.* gives the engine its signer (the active key) and the
// participants' keyring, the reference participants their keys; a bad
// value names its key and never quotes a secret.
func TestLoadSecurityKeys(t *testing.T) {
	clearEnv(t)
	v := newViper()
	v.Set("security.orchestrator_keys", "old:"+secretB+",new:"+secretA)
	v.Set("security.orchestrator_key_id", "new")
	v.Set("security.participant_keys", "inventory:inv-1:"+secretA+",inventory:inv-0:"+secretB+",payment:pay-1:"+strings.Repeat("A", 44))
	v.Set("security.allow_unsigned_replies_from", "coupon")
	c, err := Load(v)
	if err != nil {
		t.Fatal(err)
	}
	g := c.engine().Signing
	if g.Commands == nil || g.Commands.KeyID() != "new" {
		t.Fatalf("commands signed by %v, want key new", g.Commands)
	}
	if g.Replies == nil || strings.Join(g.Replies.Owners(), ",") != "inventory,payment" || g.Replies.Len() != 3 || g.AllowUnsigned || g.AllowUnsignedFrom[0] != "coupon" {
		t.Fatalf("replies: %v %d %v %v", g.Replies.Owners(), g.Replies.Len(), g.AllowUnsigned, g.AllowUnsignedFrom)
	}
	if rk := c.Security.replyKeys(); rk["inventory"].ID != "inv-1" || len(c.Security.orch) != 2 {
		t.Fatalf("reply keys %v, orchestrator keys %v", rk, c.Security.orch)
	}
	for _, key := range []string{"security.orchestrator_keys", "security.participant_keys"} {
		if got := c.effective(key); got != "<redacted>" {
			t.Errorf("config --effective %s: %q", key, got)
		}
	}
	// Nothing set: signing off, as before keys were configured.
	clearEnv(t)
	c, err = Load(newViper())
	if err != nil {
		t.Fatal(err)
	}
	if g := c.engine().Signing; g.Commands != nil || g.Replies != nil {
		t.Fatalf("no keys configured, signing %+v", g)
	}

	for _, bad := range []struct {
		set  map[string]string
		says string
	}{
		{map[string]string{"security.orchestrator_keys": "k1:c2hvcnQ="}, "config: security.orchestrator_keys: key \"k1\": secret is 5 bytes, want at least 32"},
		{map[string]string{"security.orchestrator_keys": "k1:" + secretA, "security.orchestrator_key_id": "k2"}, "config: security.orchestrator_key_id: \"k2\" is not the id"},
		{map[string]string{"security.participant_keys": "inventory:" + secretA}, "config: security.participant_keys: item 1: want owner:id:secret"},
		{map[string]string{"security.participant_keys": "inventory:k:" + secretA, "security.orchestrator_keys": "k:" + secretB}, "must be unique"},
	} {
		clearEnv(t)
		v := newViper()
		for k, x := range bad.set {
			v.Set(k, x)
		}
		_, err := Load(v)
		if err == nil || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("Load %v: %v, want %q", bad.set, err, bad.says)
		}
		if err != nil && (strings.Contains(err.Error(), "c2hvcnQ") || strings.Contains(err.Error(), secretA)) {
			t.Errorf("the error quotes a secret: %v", err)
		}
	}
	if k, _ := message.ParseKey("x", secretA); k.String() != "key x" {
		t.Fatalf("a key prints as %q", k.String())
	}
}
