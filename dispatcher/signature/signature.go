// Package signature owns Standard Webhooks signing: parsing whsec_ secrets
// and computing the webhook-signature header over the exact bytes sent
// (msg id, unix timestamp and body joined by dots, HMAC-SHA256, base64).
// Every active secret signs, so receivers verify with either key during a
// rotation. It never sees a request, never re-serialises a body and never
// logs a secret.
//
// Applications may import this package: it is part of hookd's supported Go API.
package signature

import (
	"crypto/hmac"
	"crypto/sha256"
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

// Signer signs messages with a fixed set of secrets. It keeps each key's
// HMAC state after the key is absorbed, so a signature costs the hashing
// of the message only. Safe for concurrent use.
type Signer struct {
	keys []Secret
	pool sync.Pool // *signState
}

// signState is one goroutine's HMACs (one per key) and scratch buffers.
type signState struct {
	macs []hash.Hash
	buf  []byte // msgID.ts.
	sum  []byte
}

// NewSigner returns a Signer for secrets, current first.
func NewSigner(secrets []Secret) *Signer {
	s := &Signer{keys: append([]Secret(nil), secrets...)}
	s.pool.New = func() any {
		st := &signState{macs: make([]hash.Hash, len(s.keys)), sum: make([]byte, 0, sha256.Size)}
		for i, k := range s.keys {
			st.macs[i] = hmac.New(sha256.New, k)
		}
		return st
	}
	return s
}

// sigLen is the length of one "v1,<base64 of a SHA-256>" signature.
var sigLen = len("v1,") + base64.StdEncoding.EncodedLen(sha256.Size)

// Sign returns the webhook-signature header value of the message msgID
// sent at ts (the webhook-timestamp header value, see Timestamp) with
// body: one "v1,<base64>" signature per secret, space-separated, in the
// order given. body must be the exact bytes that will be sent.
func (s *Signer) Sign(msgID, ts string, body []byte) string {
	st := s.pool.Get().(*signState)
	defer s.pool.Put(st)
	st.buf = append(append(append(append(st.buf[:0], msgID...), '.'), ts...), '.')
	var b strings.Builder
	b.Grow(len(s.keys) * (sigLen + 1))
	var enc [64]byte
	for i, m := range st.macs {
		if i > 0 {
			b.WriteByte(' ')
		}
		m.Reset() // back to the state after the key
		m.Write(st.buf)
		m.Write(body)
		st.sum = m.Sum(st.sum[:0])
		b.WriteString("v1,")
		b.Write(base64.StdEncoding.AppendEncode(enc[:0], st.sum))
	}
	return b.String()
}
