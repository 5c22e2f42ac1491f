// Package secretbox owns the encryption at rest of hookd's endpoint signing
// secrets: a Keyring of AES-256-GCM keys, the first of which seals new
// values, and the sealed format "v1:<key id>:<base64 nonce+ciphertext>".
// Every key of the ring opens, so a new key can be made current while
// values sealed under an older one still read.
//
// It never logs, and its errors never contain a key, a plaintext or a
// ciphertext: only key ids, which are not secret.
//
// Internal: only hookd's own packages can import it.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Prefix starts every sealed value. A Standard Webhooks secret starts with
// "whsec_", so a stored value is sealed exactly when it starts with Prefix.
const Prefix = "v1:"

// KeySize is the length of a key: AES-256.
const KeySize = 32

// Sentinel errors of Open; callers branch on them with errors.Is.
var (
	// ErrUnknownKey: the value was sealed under a key id the ring lacks.
	ErrUnknownKey = errors.New("sealed with a key that is not given")
	// ErrDecrypt: the key id is known but authentication failed: the
	// value was altered, bound to another context, or the key given under
	// that id is not the one that sealed it.
	ErrDecrypt = errors.New("cannot be decrypted (altered, or the key under that id is not the one that sealed it)")
	// ErrMalformed: the value starts with Prefix but is not a sealed value.
	ErrMalformed = errors.New("malformed sealed value")
)

// keyIDPattern bounds explicit key ids: short, and free of the ':' that
// separates the parts of a sealed value.
var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,32}$`)

type key struct {
	id   string
	aead cipher.AEAD
}

// Keyring holds the keys that open sealed values; the first one also seals.
// It is safe for concurrent use.
type Keyring struct {
	keys []key
}

// NewKeyring returns a ring of raw 32-byte keys, current first, each under
// the id derived from it (KeyID).
func NewKeyring(raw ...[]byte) (*Keyring, error) {
	entries := make([]string, len(raw))
	for i, k := range raw {
		entries[i] = base64.StdEncoding.EncodeToString(k)
	}
	return ParseKeys(strings.Join(entries, ","))
}

// ParseKeys reads a key list: entries separated by commas or newlines,
// current first. An entry is a base64-encoded 32-byte key (standard or URL
// alphabet, padded or not), optionally preceded by an explicit id and a
// colon ("2026-12:<base64>"); without one the id is KeyID of the key. Blank
// lines and lines starting with '#' are skipped (the format of a key
// file). Errors name the entry by position, never its content.
func ParseKeys(spec string) (*Keyring, error) {
	var r Keyring
	n := 0
	for _, line := range strings.Split(spec, "\n") {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "#") {
			continue
		}
		for _, entry := range strings.Split(line, ",") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			n++
			k, err := parseEntry(entry)
			if err != nil {
				return nil, fmt.Errorf("secrets key %d: %w", n, err)
			}
			if slices.ContainsFunc(r.keys, func(o key) bool { return o.id == k.id }) {
				return nil, fmt.Errorf("secrets key %d: key id %q given twice", n, k.id)
			}
			r.keys = append(r.keys, k)
		}
	}
	if len(r.keys) == 0 {
		return nil, errors.New("secrets key: none given")
	}
	return &r, nil
}

func parseEntry(entry string) (key, error) {
	id, b64, explicit := strings.Cut(entry, ":")
	if !explicit {
		b64 = entry
	} else if !keyIDPattern.MatchString(id) {
		return key{}, errors.New("key id must be 1..32 of A-Z a-z 0-9 _ . -")
	}
	raw, err := decodeKey(b64)
	if err != nil {
		return key{}, err
	}
	if !explicit {
		id = KeyID(raw)
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return key{}, fmt.Errorf("aes: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return key{}, fmt.Errorf("gcm: %w", err)
	}
	return key{id: id, aead: aead}, nil
}

func decodeKey(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if raw, err := enc.DecodeString(s); err == nil {
			if len(raw) != KeySize {
				return nil, fmt.Errorf("must decode to %d bytes, got %d (make one with: head -c32 /dev/urandom | base64)", KeySize, len(raw))
			}
			return raw, nil
		}
	}
	return nil, errors.New("not base64 (make one with: head -c32 /dev/urandom | base64)")
}

// KeyID is the id of a key given without one: the first 8 hex digits of a
// SHA-256 of the key, so every process given the same key agrees on its
// id without configuring one. 32 bits of a hash of a 256-bit random key
// tell nothing about it.
func KeyID(raw []byte) string {
	h := sha256.New()
	h.Write([]byte("hookd secretbox key id\x00"))
	h.Write(raw)
	return hex.EncodeToString(h.Sum(nil)[:4])
}

// CurrentID is the id of the key that seals.
func (r *Keyring) CurrentID() string { return r.keys[0].id }

// IDs lists the ids of the ring, current first.
func (r *Keyring) IDs() []string {
	ids := make([]string, len(r.keys))
	for i, k := range r.keys {
		ids[i] = k.id
	}
	return ids
}

// Has reports whether the ring holds a key with id.
func (r *Keyring) Has(id string) bool {
	_, ok := r.find(id)
	return ok
}

func (r *Keyring) find(id string) (key, bool) {
	for _, k := range r.keys {
		if k.id == id {
			return k, true
		}
	}
	return key{}, false
}

// Seal encrypts plaintext under the current key with a fresh random nonce.
// aad binds the value to its context (the row it belongs to): Open must be
// given the same aad, so a sealed value copied elsewhere does not open.
func (r *Keyring) Seal(plaintext string, aad []byte) string {
	k := r.keys[0]
	buf := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(plaintext)+k.aead.Overhead())
	// crypto/rand.Read never fails (Go 1.24+); it panics rather than return short.
	_, _ = rand.Read(buf)
	buf = k.aead.Seal(buf, buf, []byte(plaintext), aad)
	return Prefix + k.id + ":" + base64.StdEncoding.EncodeToString(buf)
}

// Open decrypts a value made by Seal with the same aad, under whichever key
// of the ring its id names.
func (r *Keyring) Open(sealed string, aad []byte) (string, error) {
	id, body, err := split(sealed)
	if err != nil {
		return "", err
	}
	k, ok := r.find(id)
	if !ok {
		return "", fmt.Errorf("key id %s: %w", id, ErrUnknownKey)
	}
	if len(body) < k.aead.NonceSize()+k.aead.Overhead() {
		return "", fmt.Errorf("key id %s: %w: too short", id, ErrMalformed)
	}
	ns := k.aead.NonceSize()
	plain, err := k.aead.Open(nil, body[:ns], body[ns:], aad)
	if err != nil {
		return "", fmt.Errorf("key id %s: %w", id, ErrDecrypt)
	}
	return string(plain), nil
}

// IsSealed reports whether a stored value is sealed (else it is plain text).
func IsSealed(s string) bool { return strings.HasPrefix(s, Prefix) }

// SealedKeyID returns the key id of a sealed value; ok is false for plain
// text and malformed values.
func SealedKeyID(s string) (id string, ok bool) {
	id, _, err := split(s)
	return id, err == nil
}

func split(sealed string) (id string, body []byte, err error) {
	rest, ok := strings.CutPrefix(sealed, Prefix)
	if !ok {
		return "", nil, fmt.Errorf("%w: no %q prefix", ErrMalformed, Prefix)
	}
	id, b64, ok := strings.Cut(rest, ":")
	if !ok || !keyIDPattern.MatchString(id) {
		return "", nil, fmt.Errorf("%w: no key id", ErrMalformed)
	}
	body, err = base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", nil, fmt.Errorf("key id %s: %w: invalid base64", id, ErrMalformed)
	}
	return id, body, nil
}
