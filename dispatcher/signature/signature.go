// Package signature owns Standard Webhooks signing: parsing whsec_ secrets
// and whsk_ ed25519 private keys, and computing the webhook-signature
// header over the exact bytes sent (msg id, unix timestamp and body joined
// by dots; HMAC-SHA256 for v1, ed25519 for v1a; base64). Every active key
// signs, so receivers verify with either key during a rotation. It never sees a request, never re-serialises a body and never
// logs a secret.
//
// Applications may import this package: it is part of hookd's supported Go API.
package signature

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SecretPrefix starts every Standard Webhooks secret.
const SecretPrefix = "whsec_"

// ErrBadSecret is wrapped by ParseSecret for a secret that is not
// whsec_<base64>.
var ErrBadSecret = errors.New("signing secret is not whsec_<base64>")

// Secret is a decoded signing key.
type Secret []byte

// ParseSecret decodes "whsec_<base64>". The prefix is optional, as the
// official libraries accept it either way. The error never contains the secret.
func ParseSecret(s string) (Secret, error) {
	raw := strings.TrimPrefix(s, SecretPrefix)
	if raw == "" {
		return nil, fmt.Errorf("%w: empty", ErrBadSecret)
	}
	key, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: invalid base64", ErrBadSecret)
	}
	if len(key) < 8 {
		return nil, fmt.Errorf("%w: key shorter than 8 bytes", ErrBadSecret)
	}
	return Secret(key), nil
}

// ParseSecrets decodes every secret, current first.
func ParseSecrets(ss []string) ([]Secret, error) {
	out := make([]Secret, 0, len(ss))
	for i, s := range ss {
		k, err := ParseSecret(s)
		if err != nil {
			return nil, fmt.Errorf("secret %d: %w", i+1, err)
		}
		out = append(out, k)
	}
	return out, nil
}

// Timestamp renders t as the webhook-timestamp header value (unix seconds).
func Timestamp(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

// Sign returns the webhook-signature header value: one "v1,<base64>"
// signature per secret, space-separated, in the order given. body must be
// the exact bytes that will be sent. A sender signing many messages with
// the same secrets should keep a Signer instead.
func Sign(msgID string, ts time.Time, body []byte, secrets []Secret) string {
	tsStr := Timestamp(ts)
	var b strings.Builder
	for i, key := range secrets {
		if i > 0 {
			b.WriteByte(' ')
		}
		m := hmac.New(sha256.New, key)
		m.Write([]byte(msgID))
		m.Write([]byte{'.'})
		m.Write([]byte(tsStr))
		m.Write([]byte{'.'})
		m.Write(body)
		b.WriteString("v1,")
		b.WriteString(base64.StdEncoding.EncodeToString(m.Sum(nil)))
	}
	return b.String()
}

// Signer signs messages with a fixed set of secrets. It keeps, per key,
// the SHA-256 states after HMAC's inner and outer key blocks (RFC 2104;
// FIPS 198-1 allows these precomputed values), so a signature hashes the
// message alone; the digests come from a pool shared by every Signer.
// Safe for concurrent use.
type Signer struct {
	keys []keyState
}

// keyState is one HMAC key's marshaled SHA-256 states after hashing
// key^ipad (inner) and key^opad (outer), or an ed25519 private key.
type keyState struct {
	inner, outer []byte
	private      ed25519.PrivateKey
}

// scratch is one signature's digest and buffers, pooled for every Signer.
type scratch struct {
	h      binaryHash
	prefix []byte
	inner  [sha256.Size]byte
	outer  [sha256.Size]byte
	// msg is prefix and body in one slice, for ed25519.Sign.
	msg []byte
}

var scratches = sync.Pool{New: func() any { return &scratch{h: sha256.New().(binaryHash)} }}

type binaryHash interface {
	hash.Hash
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
}

// NewSigner returns a Signer for secrets, current first.
func NewSigner(secrets []Secret) *Signer {
	s := &Signer{keys: make([]keyState, len(secrets))}
	for i, key := range secrets {
		s.keys[i] = hmacState(key)
	}
	return s
}

// hmacState precomputes key's HMAC-SHA256 states.
func hmacState(key Secret) keyState {
	if len(key) > sha256.BlockSize {
		sum := sha256.Sum256(key)
		key = sum[:]
	}
	ipad, opad := make([]byte, sha256.BlockSize), make([]byte, sha256.BlockSize)
	copy(ipad, key)
	copy(opad, key)
	for j := range ipad {
		ipad[j] ^= 0x36
		opad[j] ^= 0x5c
	}
	return keyState{inner: stateAfter(ipad), outer: stateAfter(opad)}
}

// stateAfter returns the marshaled SHA-256 state after hashing block.
func stateAfter(block []byte) []byte {
	h := sha256.New().(binaryHash)
	h.Write(block)
	st, err := h.MarshalBinary()
	if err != nil {
		panic(fmt.Sprintf("signature: sha256 state: %v", err)) // never: sha256 marshals
	}
	return st
}

// mac returns HMAC-SHA256(key, sc.prefix || body), in sc.outer.
func (k keyState) mac(sc *scratch, body []byte) []byte {
	h := sc.h
	if err := h.UnmarshalBinary(k.inner); err != nil {
		panic(fmt.Sprintf("signature: sha256 state: %v", err)) // never: the state is sha256's own
	}
	h.Write(sc.prefix)
	h.Write(body)
	inner := h.Sum(sc.inner[:0])
	if err := h.UnmarshalBinary(k.outer); err != nil {
		panic(fmt.Sprintf("signature: sha256 state: %v", err))
	}
	h.Write(inner)
	return h.Sum(sc.outer[:0])
}

// sigLen is the length of one "v1,<base64 of a SHA-256>" signature.
var sigLen = len("v1,") + base64.StdEncoding.EncodedLen(sha256.Size)

// Sign returns the webhook-signature header value of the message msgID
// sent at ts (the webhook-timestamp header value, see Timestamp) with
// body: one "v1,<base64>" signature per secret (or "v1a,<base64>" per
// ed25519 key, see NewKeySigner), space-separated, in the order given.
// body must be the exact bytes that will be sent.
func (s *Signer) Sign(msgID, ts string, body []byte) string {
	sc := scratches.Get().(*scratch)
	defer scratches.Put(sc)
	sc.prefix = append(append(append(append(sc.prefix[:0], msgID...), '.'), ts...), '.')
	var b strings.Builder
	b.Grow(len(s.keys) * (sigLen + 1))
	var enc [64]byte
	for i, k := range s.keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		if k.private != nil {
			k.signEd25519(&b, sc, body)
			continue
		}
		b.WriteString("v1,")
		b.Write(base64.StdEncoding.AppendEncode(enc[:0], k.mac(sc, body)))
	}
	return b.String()
}
