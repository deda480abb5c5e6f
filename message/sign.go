package message

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"sort"
	"strings"
	"sync"
	"unsafe"
)

// Record signatures (the wire contract: docs/DESIGN.md, "Signed
// records"). The orchestrator signs every command with a key of its own;
// each participant signs its replies with a key of its own. The signature
// is HMAC-SHA256, with the key named by the sagaflow-key-id header, over
// the canonical bytes of the record (see Canonical); it travels, as 64
// lower-case hex digits, in the sagaflow-signature header.
const (
	// HeaderKeyID names the key that signed the record.
	HeaderKeyID = "sagaflow-key-id"
	// HeaderSignature is the record's signature: hex(HMAC-SHA256(key,
	// Canonical(...))), lower case.
	HeaderSignature = "sagaflow-signature"
	// SignatureVersion opens the canonical bytes; a later form would
	// change it (and its header names).
	SignatureVersion = "sagaflow-sig-v1"
	// MaxKeyIDBytes bounds a key id; key ids are printable ASCII without
	// spaces (see CheckKeyID).
	MaxKeyIDBytes = 64
	// MinKeyBytes is the shortest secret accepted: 32 bytes, the size of
	// the HMAC-SHA256 output.
	MinKeyBytes = 32
)

// SignedHeaders are the headers the canonical bytes cover, in order after
// the key id, the topic and the record key, and before the value. An
// absent header counts as empty.
var SignedHeaders = []string{HeaderMessageID, HeaderSagaID, HeaderContentType, HeaderTraceParent, HeaderTraceState}

// Errors of Verify. Both wrap ErrInvalid: a record that fails its check
// belongs on a dead-letter topic, with the error as its reason.
var (
	// ErrUnsigned: the record has neither signature header.
	ErrUnsigned = fmt.Errorf("%w: the record is not signed (no %s and %s headers)", ErrInvalid, HeaderKeyID, HeaderSignature)
	// ErrBadSignature: a signature that does not verify (unknown key id,
	// malformed or wrong signature, one of the two headers missing or
	// repeated).
	ErrBadSignature = fmt.Errorf("%w: bad signature", ErrInvalid)
)

// Key is one signing key: its id (travels in HeaderKeyID) and its secret.
type Key struct {
	ID     string
	Secret []byte
}

// CheckKeyID reports what is wrong with a key id ("" when nothing): 1 to
// MaxKeyIDBytes bytes of printable ASCII, no space.
func CheckKeyID(id string) error {
	if id == "" {
		return errors.New("key id is empty")
	}
	if len(id) > MaxKeyIDBytes {
		return fmt.Errorf("key id is %d bytes, more than the %d allowed", len(id), MaxKeyIDBytes)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("key id %q has byte 0x%02x at %d; want printable ASCII without spaces", id, c, i)
		}
	}
	return nil
}

func (k Key) check() error {
	if err := CheckKeyID(k.ID); err != nil {
		return err
	}
	if len(k.Secret) < MinKeyBytes {
		return fmt.Errorf("key %q: secret is %d bytes, want at least %d", k.ID, len(k.Secret), MinKeyBytes)
	}
	return nil
}

// macPool keeps a key's HMAC states and scratch buffers for reuse, so a
// signature costs no allocation but its hex text.
type macPool struct {
	id   string
	pool sync.Pool
}

type macState struct {
	h   hash.Hash
	buf []byte
	sum [sha256.Size]byte
	hex [2 * sha256.Size]byte
}

func newMacPool(k Key) *macPool {
	secret := append([]byte(nil), k.Secret...)
	p := &macPool{id: k.ID}
	p.pool.New = func() any { return &macState{h: hmac.New(sha256.New, secret), buf: make([]byte, 0, 1024)} }
	return p
}

// mac computes the record's MAC into st.sum.
func (p *macPool) mac(st *macState, topic string, key, value []byte, header func(string) []byte) {
	st.buf = appendCanonicalHead(st.buf[:0], p.id, topic, key, header)
	st.h.Reset()
	st.h.Write(st.buf)
	st.buf = binary.BigEndian.AppendUint32(st.buf[:0], uint32(len(value)))
	st.h.Write(st.buf)
	st.h.Write(value)
	st.h.Sum(st.sum[:0])
	if cap(st.buf) > 64<<10 {
		st.buf = make([]byte, 0, 1024) // do not keep a huge header set's buffer
	}
}

// Canonical returns the bytes a signature covers (SignatureVersion, then
// each field as its length in 4 bytes big-endian and its bytes): the key
// id, the topic the record is written to, the record's key, the headers
// of SignedHeaders in that order (their first occurrence; absent: empty),
// and the record's value.
func Canonical(keyID, topic string, key, value []byte, header func(name string) string) []byte {
	b := appendCanonicalHead(nil, keyID, topic, key, func(n string) []byte { return []byte(header(n)) })
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	return append(b, value...)
}

func appendCanonicalHead(b []byte, keyID, topic string, key []byte, header func(string) []byte) []byte {
	b = append(b, SignatureVersion...)
	b = appendField(b, keyID)
	b = appendField(b, topic)
	b = binary.BigEndian.AppendUint32(b, uint32(len(key)))
	b = append(b, key...)
	for _, name := range SignedHeaders {
		h := header(name)
		b = binary.BigEndian.AppendUint32(b, uint32(len(h)))
		b = append(b, h...)
	}
	return b
}

func appendField(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// Signer signs records with one key. It is safe for concurrent use.
type Signer struct{ p *macPool }

// NewSigner returns a signer with k; the secret is copied.
func NewSigner(k Key) (*Signer, error) {
	if err := k.check(); err != nil {
		return nil, fmt.Errorf("signer: %w", err)
	}
	return &Signer{p: newMacPool(k)}, nil
}

// KeyID is the id of the signer's key.
func (s *Signer) KeyID() string { return s.p.id }

// Sign adds HeaderKeyID and HeaderSignature to headers, the signature of
// a record of key, value and headers written to topic. Any other header
// may be added afterwards; one of SignedHeaders changed after Sign
// invalidates the signature.
func (s *Signer) Sign(topic string, key, value []byte, headers map[string]string) {
	st := s.p.pool.Get().(*macState)
	s.p.mac(st, topic, key, value, func(n string) []byte { return unsafeBytes(headers[n]) })
	headers[HeaderKeyID] = s.p.id
	hex.Encode(st.hex[:], st.sum[:])
	headers[HeaderSignature] = string(st.hex[:])
	s.p.pool.Put(st)
}

// SignString is Sign for a record key given as a string (the outbox's),
// without copying it.
func (s *Signer) SignString(topic, key string, value []byte, headers map[string]string) {
	s.Sign(topic, unsafeBytes(key), value, headers)
}

// Keyring holds the keys a receiver verifies with, each owned by a
// principal (the orchestrator, or a participant by name). Build it before
// use; it is then safe for concurrent Verify calls.
type Keyring struct {
	keys map[string]ringKey
}

type ringKey struct {
	owner string
	mac   *macPool
}

// Add adds k, owned by owner. A key id may appear once in a keyring
// (whoever owns it), and the secret must be at least MinKeyBytes long.
func (r *Keyring) Add(owner string, k Key) error {
	if err := k.check(); err != nil {
		return fmt.Errorf("keyring: %s: %w", owner, err)
	}
	if owner == "" {
		return fmt.Errorf("keyring: key %q has no owner", k.ID)
	}
	if r.keys == nil {
		r.keys = map[string]ringKey{}
	}
	if prev, dup := r.keys[k.ID]; dup {
		return fmt.Errorf("keyring: key id %q of %s is already the id of a key of %s; key ids must be unique", k.ID, owner, prev.owner)
	}
	r.keys[k.ID] = ringKey{owner: owner, mac: newMacPool(k)}
	return nil
}

// Len is the number of keys.
func (r *Keyring) Len() int {
	if r == nil {
		return 0
	}
	return len(r.keys)
}

// Owners lists the owners of the keys, sorted, each once.
func (r *Keyring) Owners() []string {
	if r == nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, k := range r.keys {
		if !seen[k.owner] {
			seen[k.owner] = true
			out = append(out, k.owner)
		}
	}
	sort.Strings(out)
	return out
}

// Verify checks the signature of a record of key, value and headers read
// from topic, and returns the owner of the key that signed it. A record
// with neither signature header returns ErrUnsigned; any other failure an
// error wrapping ErrBadSignature that says what was wrong (never the
// secret, nor the expected signature). Check the headers with
// CheckRecordHeaders first.
func Verify[H RecordHeader](r *Keyring, topic string, key, value []byte, hs []H) (string, error) {
	var keyID, sig []byte
	var nKey, nSig int
	for _, hh := range hs {
		h := Header(hh)
		switch h.Key {
		case HeaderKeyID:
			keyID = h.Value
			nKey++
		case HeaderSignature:
			sig = h.Value
			nSig++
		}
	}
	switch {
	case nKey == 0 && nSig == 0:
		return "", ErrUnsigned
	case nKey != 1 || nSig != 1:
		return "", fmt.Errorf("%w: want one %s and one %s header, have %d and %d", ErrBadSignature, HeaderKeyID, HeaderSignature, nKey, nSig)
	}
	var k ringKey
	var ok bool
	if r != nil {
		k, ok = r.keys[string(keyID)]
	}
	if !ok {
		return "", fmt.Errorf("%w: key id %s is not one this receiver knows", ErrBadSignature, quote(string(keyID), MaxKeyIDBytes))
	}
	var want [sha256.Size]byte
	if len(sig) != 2*sha256.Size {
		return "", fmt.Errorf("%w: %s is %d bytes, want %d hex digits (key %s)", ErrBadSignature, HeaderSignature, len(sig), 2*sha256.Size, k.ownedKey(keyID))
	}
	if _, err := hex.Decode(want[:], sig); err != nil {
		return "", fmt.Errorf("%w: %s is not hex (key %s)", ErrBadSignature, HeaderSignature, k.ownedKey(keyID))
	}
	st := k.mac.pool.Get().(*macState)
	k.mac.mac(st, topic, key, value, func(n string) []byte { return firstHeader(hs, n) })
	good := hmac.Equal(st.sum[:], want[:])
	k.mac.pool.Put(st)
	if !good {
		return "", fmt.Errorf("%w: the signature does not match the record (key %s, topic %s)", ErrBadSignature, k.ownedKey(keyID), quote(topic, 120))
	}
	return k.owner, nil
}

func (k ringKey) ownedKey(id []byte) string {
	return fmt.Sprintf("%s of %s", quote(string(id), MaxKeyIDBytes), quote(k.owner, 64))
}

func firstHeader[H RecordHeader](hs []H, name string) []byte {
	for _, hh := range hs {
		if h := Header(hh); h.Key == name {
			return h.Value
		}
	}
	return nil
}

// ParseKeys parses keys written "id:secret,id:secret": the secret is
// base64 (standard or URL alphabet, padded or not) or, prefixed "hex:",
// hex. Spaces around items are ignored.
func ParseKeys(s string) ([]Key, error) {
	var out []Key
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		id, secret, ok := strings.Cut(item, ":")
		if !ok {
			return nil, fmt.Errorf("key %d: want id:secret", len(out)+1)
		}
		k, err := ParseKey(id, secret)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}

// ParseKey makes a key of id and its secret's text (base64, or "hex:"
// and hex digits); the error names the id, never the secret.
func ParseKey(id, secret string) (Key, error) {
	id = strings.TrimSpace(id)
	if err := CheckKeyID(id); err != nil {
		return Key{}, err
	}
	b, err := decodeSecret(strings.TrimSpace(secret))
	if err != nil {
		return Key{}, fmt.Errorf("key %q: secret: %w", id, err)
	}
	k := Key{ID: id, Secret: b}
	if err := k.check(); err != nil {
		return Key{}, err
	}
	return k, nil
}

func decodeSecret(s string) ([]byte, error) {
	if h, ok := strings.CutPrefix(s, "hex:"); ok {
		b, err := hex.DecodeString(h)
		if err != nil {
			return nil, errors.New("not hex after \"hex:\"")
		}
		return b, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64 (nor \"hex:\" and hex digits)")
}

// unsafeBytes views s as bytes, for reading only.
func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// GenerateKey returns a key of id with a fresh random secret of
// MinKeyBytes bytes.
func GenerateKey(id string) (Key, error) {
	if err := CheckKeyID(id); err != nil {
		return Key{}, err
	}
	b := make([]byte, MinKeyBytes)
	if _, err := rand.Read(b); err != nil {
		return Key{}, fmt.Errorf("generate key %q: %w", id, err)
	}
	return Key{ID: id, Secret: b}, nil
}

// String is the key's id; never its secret.
func (k Key) String() string { return "key " + k.ID }

// Format is the key as ParseKeys reads it: "id:" and the secret in base64.
func (k Key) Format() string { return k.ID + ":" + base64.StdEncoding.EncodeToString(k.Secret) }

// ParseOwnedKeys parses keys written "owner:id:secret,..." (an owner such
// as a participant's name may have several), the secret as ParseKey reads
// it. The error names the item and the owner, never the secret.
func ParseOwnedKeys(s string) (map[string][]Key, error) {
	out := map[string][]Key{}
	n := 0
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		n++
		owner, rest, ok := strings.Cut(item, ":")
		id, secret, ok2 := strings.Cut(rest, ":")
		if !ok || !ok2 || strings.TrimSpace(owner) == "" {
			return nil, fmt.Errorf("item %d: want owner:id:secret", n)
		}
		owner = strings.TrimSpace(owner)
		k, err := ParseKey(id, secret)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", owner, err)
		}
		out[owner] = append(out[owner], k)
	}
	return out, nil
}
