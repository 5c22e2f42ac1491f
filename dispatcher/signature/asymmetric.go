package signature

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Asymmetric signatures (Standard Webhooks "v1a"): an ed25519 private key
// "whsk_<base64 of the 32-byte seed>" signs the same content as v1
// (msg id, timestamp and body joined by dots); receivers verify with the
// public key "whpk_<base64 of the 32-byte public key>", which is not
// secret. A Signer mixes both kinds: during a rotation from one to the
// other, or between two key pairs, every key signs.

// Key prefixes of the Standard Webhooks asymmetric scheme.
const (
	PrivateKeyPrefix = "whsk_"
	PublicKeyPrefix  = "whpk_"
)

// ErrBadPrivateKey is wrapped by ParseKey for a "whsk_" key that is not
// the base64 of a 32-byte ed25519 seed.
var ErrBadPrivateKey = errors.New("signing key is not whsk_<base64 of a 32-byte ed25519 seed>")

// Key is one signing key: a symmetric secret (v1) or an ed25519 private
// key (v1a).
type Key struct {
	secret  Secret
	private ed25519.PrivateKey
}

// Asymmetric reports whether k is an ed25519 key (it signs v1a).
func (k Key) Asymmetric() bool { return k.private != nil }

// PublicKey returns the "whpk_" public key of an asymmetric key, "" for a
// symmetric one.
func (k Key) PublicKey() string {
	if k.private == nil {
		return ""
	}
	return PublicKeyPrefix + base64.StdEncoding.EncodeToString(k.private.Public().(ed25519.PublicKey))
}

// ParseKey decodes a signing key: "whsk_<base64>" is an ed25519 private
// key, anything else a symmetric secret (ParseSecret). The error never
// contains the key.
func ParseKey(s string) (Key, error) {
	raw, ok := strings.CutPrefix(s, PrivateKeyPrefix)
	if !ok {
		secret, err := ParseSecret(s)
		return Key{secret: secret}, err
	}
	seed, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return Key{}, fmt.Errorf("%w: invalid base64", ErrBadPrivateKey)
	}
	if len(seed) != ed25519.SeedSize {
		return Key{}, fmt.Errorf("%w: %d bytes", ErrBadPrivateKey, len(seed))
	}
	return Key{private: ed25519.NewKeyFromSeed(seed)}, nil
}

// ParseKeys decodes every key, current first.
func ParseKeys(ss []string) ([]Key, error) {
	out := make([]Key, 0, len(ss))
	for i, s := range ss {
		k, err := ParseKey(s)
		if err != nil {
			return nil, fmt.Errorf("secret %d: %w", i+1, err)
		}
		out = append(out, k)
	}
	return out, nil
}

// NewPrivateKey returns a fresh "whsk_" ed25519 private key.
func NewPrivateKey() string {
	seed := make([]byte, ed25519.SeedSize)
	_, _ = rand.Read(seed) // crypto/rand.Read never fails (Go 1.24+)
	return PrivateKeyPrefix + base64.StdEncoding.EncodeToString(seed)
}

// NewKeySigner returns a Signer for keys of either kind, current first:
// its Sign writes one "v1,<base64>" or "v1a,<base64>" signature per key,
// in that order.
func NewKeySigner(keys []Key) *Signer {
	s := &Signer{keys: make([]keyState, len(keys))}
	for i, k := range keys {
		if k.private != nil {
			s.keys[i] = keyState{private: k.private}
			continue
		}
		s.keys[i] = hmacState(k.secret)
	}
	return s
}

// sign writes k's ed25519 signature of sc.prefix || body, base64, to b.
func (k keyState) signEd25519(b *strings.Builder, sc *scratch, body []byte) {
	sc.msg = append(append(sc.msg[:0], sc.prefix...), body...)
	var enc [base64Ed25519Len]byte
	b.WriteString("v1a,")
	b.Write(base64.StdEncoding.AppendEncode(enc[:0], ed25519.Sign(k.private, sc.msg)))
	if cap(sc.msg) > 1<<20 {
		sc.msg = nil // keep no large body in the pool
	}
}

// base64Ed25519Len is the length of a base64 ed25519 signature.
const base64Ed25519Len = (ed25519.SignatureSize + 2) / 3 * 4
