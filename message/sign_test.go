package message_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/message"
)

type vector struct {
	KeyID        string            `json:"key_id"`
	SecretBase64 string            `json:"secret_base64"`
	Topic        string            `json:"topic"`
	Key          string            `json:"key"`
	Headers      map[string]string `json:"headers"`
	Value        string            `json:"value"`
	Signature    string            `json:"signature"`
}

func loadVector(t *testing.T) (vector, message.Key) {
	t.Helper()
	b, err := os.ReadFile("testdata/signature-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vector
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	secret, err := base64.StdEncoding.DecodeString(v.SecretBase64)
	if err != nil {
		t.Fatal(err)
	}
	return v, message.Key{ID: v.KeyID, Secret: secret}
}

func recordHeaders(m map[string]string) []message.Header {
	var hs []message.Header
	for k, v := range m {
		hs = append(hs, message.Header{Key: k, Value: []byte(v)})
	}
	return hs
}

// The signature of the worked example (computed outside Go, by the
// canonical form's definition) is what Sign gives and what Verify takes.
func TestSignMatchesTheWorkedExample(t *testing.T) {
	v, k := loadVector(t)
	s, err := message.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]string{}
	for n, x := range v.Headers {
		h[n] = x
	}
	s.Sign(v.Topic, []byte(v.Key), []byte(v.Value), h)
	if h[message.HeaderSignature] != v.Signature || h[message.HeaderKeyID] != v.KeyID {
		t.Fatalf("signed %s %s, want %s %s", h[message.HeaderKeyID], h[message.HeaderSignature], v.KeyID, v.Signature)
	}
	var ring message.Keyring
	if err := ring.Add("orchestrator", k); err != nil {
		t.Fatal(err)
	}
	owner, err := message.Verify(&ring, v.Topic, []byte(v.Key), []byte(v.Value), recordHeaders(h))
	if err != nil || owner != "orchestrator" {
		t.Fatalf("verify: %q, %v", owner, err)
	}
}

// Changing any part the signature covers (topic, key, value, each signed
// header, the key id) makes it fail; an unsigned record is ErrUnsigned,
// a signature by an unknown key ErrBadSignature; headers outside the
// signed set may be added.
func TestVerifyRefusesEveryTamperedPart(t *testing.T) {
	v, k := loadVector(t)
	s, _ := message.NewSigner(k)
	signed := map[string]string{}
	for n, x := range v.Headers {
		signed[n] = x
	}
	s.Sign(v.Topic, []byte(v.Key), []byte(v.Value), signed)
	other := message.Key{ID: "orch-2025-12", Secret: []byte(strings.Repeat("k", 32))}
	var ring message.Keyring
	for _, kk := range []message.Key{k, other} {
		if err := ring.Add("orchestrator", kk); err != nil {
			t.Fatal(err)
		}
	}
	with := func(edit func(map[string]string)) []message.Header {
		h := map[string]string{}
		for n, x := range signed {
			h[n] = x
		}
		edit(h)
		return recordHeaders(h)
	}
	verify := func(topic, key, value string, hs []message.Header) error {
		_, err := message.Verify(&ring, topic, []byte(key), []byte(value), hs)
		return err
	}
	same := func(map[string]string) {}
	if err := verify(v.Topic, v.Key, v.Value, with(func(h map[string]string) { h["x-extra"] = "1"; h[message.HeaderDLQReason] = "r" })); err != nil {
		t.Fatalf("an unsigned extra header: %v", err)
	}
	bad := map[string]error{
		"topic":           verify("payment.commands", v.Key, v.Value, with(same)),
		"key":             verify(v.Topic, "order-43", v.Value, with(same)),
		"value":           verify(v.Topic, v.Key, strings.Replace(v.Value, "5d2f", "5d2e", 1), with(same)),
		"key id":          verify(v.Topic, v.Key, v.Value, with(func(h map[string]string) { h[message.HeaderKeyID] = other.ID })),
		"unknown key id":  verify(v.Topic, v.Key, v.Value, with(func(h map[string]string) { h[message.HeaderKeyID] = "nobody" })),
		"short signature": verify(v.Topic, v.Key, v.Value, with(func(h map[string]string) { h[message.HeaderSignature] = "abcd" })),
		"signature only":  verify(v.Topic, v.Key, v.Value, with(func(h map[string]string) { delete(h, message.HeaderKeyID) })),
	}
	for _, n := range message.SignedHeaders {
		bad["header "+n] = verify(v.Topic, v.Key, v.Value, with(func(h map[string]string) { h[n] += "0" }))
	}
	for what, err := range bad {
		if !errors.Is(err, message.ErrBadSignature) || !errors.Is(err, message.ErrInvalid) {
			t.Errorf("%s changed: %v, want ErrBadSignature", what, err)
		}
		if err != nil && strings.Contains(err.Error(), v.Signature) {
			t.Errorf("%s: the error quotes the signature: %v", what, err)
		}
	}
	err := verify(v.Topic, v.Key, v.Value, recordHeaders(v.Headers))
	if !errors.Is(err, message.ErrUnsigned) || errors.Is(err, message.ErrBadSignature) {
		t.Fatalf("unsigned: %v, want ErrUnsigned", err)
	}
	dup := append(with(same), message.Header{Key: message.HeaderSignature, Value: []byte(signed[message.HeaderSignature])})
	if err := verify(v.Topic, v.Key, v.Value, dup); !errors.Is(err, message.ErrBadSignature) {
		t.Fatalf("a repeated signature header: %v", err)
	}
}

// Key rotation: a receiver holding the old and the new key takes records
// signed by either; the signer signs with the new one only.
func TestKeyRotationOldKeyStillVerifiesNewSigns(t *testing.T) {
	old := message.Key{ID: "orch-1", Secret: []byte(strings.Repeat("o", 32))}
	cur := message.Key{ID: "orch-2", Secret: []byte(strings.Repeat("n", 32))}
	var ring message.Keyring
	for _, k := range []message.Key{old, cur} {
		if err := ring.Add("orchestrator", k); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []message.Key{old, cur} {
		s, _ := message.NewSigner(k)
		h := message.Headers([16]byte{1}, [16]byte{2})
		s.Sign("t", []byte("k"), []byte("{}"), h)
		if h[message.HeaderKeyID] != k.ID {
			t.Fatalf("signed with %s, want %s", h[message.HeaderKeyID], k.ID)
		}
		if owner, err := message.Verify(&ring, "t", []byte("k"), []byte("{}"), recordHeaders(h)); err != nil || owner != "orchestrator" {
			t.Fatalf("key %s: %q %v", k.ID, owner, err)
		}
	}
	var dupRing message.Keyring
	_ = dupRing.Add("inventory", old)
	if err := dupRing.Add("payment", old); err == nil || !strings.Contains(err.Error(), "unique") {
		t.Fatalf("a key id of two owners: %v", err)
	}
}

func TestKeysAreCheckedAndParsed(t *testing.T) {
	if _, err := message.NewSigner(message.Key{ID: "a", Secret: []byte("short")}); err == nil {
		t.Fatal("a 5-byte secret was taken")
	}
	if _, err := message.NewSigner(message.Key{ID: "a b", Secret: make([]byte, 32)}); err == nil {
		t.Fatal("a key id with a space was taken")
	}
	ks, err := message.ParseKeys("k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=, k2:hex:" + strings.Repeat("ab", 32))
	if err != nil || len(ks) != 2 || ks[0].ID != "k1" || ks[0].Secret[31] != 31 || ks[1].Secret[0] != 0xab {
		t.Fatalf("parse: %v %v", ks, err)
	}
	for _, s := range []string{"k1", "k1:!!!", "k1:c2hvcnQ="} {
		if _, err := message.ParseKeys(s); err == nil {
			t.Errorf("%q parsed", s)
		} else if strings.Contains(err.Error(), "c2hvcnQ") {
			t.Errorf("%q: the error quotes the secret: %v", s, err)
		}
	}
}

func BenchmarkSign(b *testing.B) {
	s, _ := message.NewSigner(message.Key{ID: "orch-1", Secret: make([]byte, 32)})
	value := []byte(strings.Repeat("x", 400))
	h := message.Headers([16]byte{1}, [16]byte{2})
	b.ReportAllocs()
	for b.Loop() {
		s.SignString("inventory.commands", "order-1", value, h)
	}
}

func BenchmarkVerify(b *testing.B) {
	k := message.Key{ID: "orch-1", Secret: make([]byte, 32)}
	s, _ := message.NewSigner(k)
	var ring message.Keyring
	_ = ring.Add("orchestrator", k)
	value := []byte(strings.Repeat("x", 400))
	h := message.Headers([16]byte{1}, [16]byte{2})
	s.SignString("inventory.commands", "order-1", value, h)
	hs := recordHeaders(h)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := message.Verify(&ring, "inventory.commands", []byte("order-1"), value, hs); err != nil {
			b.Fatal(err)
		}
	}
}
