package endpoint

import (
	"strings"

	"github.com/hookd/hookd/dispatcher/signature"
)

// Signing schemes of an endpoint's keys, as the API and hookctl name them.
const (
	// SchemeHMAC is Standard Webhooks v1: a shared whsec_ secret.
	SchemeHMAC = "hmac-sha256"
	// SchemeEd25519 is Standard Webhooks v1a: hookd keeps the whsk_
	// private key, the receiver verifies with the whpk_ public key.
	SchemeEd25519 = "ed25519"
)

// NewSigningKey returns a fresh key of scheme: a whsec_ secret for
// SchemeHMAC (or ""), a whsk_ ed25519 private key for SchemeEd25519.
func NewSigningKey(scheme string) (string, error) {
	switch scheme {
	case "", SchemeHMAC:
		return NewSecret(), nil
	case SchemeEd25519:
		return signature.NewPrivateKey(), nil
	}
	return "", invalid("signature_scheme %q: must be %s or %s", clip(scheme), SchemeHMAC, SchemeEd25519)
}

// SchemeOf returns the scheme of a signing key (whsec_ or whsk_).
func SchemeOf(secret string) string {
	if IsPrivateKey(secret) {
		return SchemeEd25519
	}
	return SchemeHMAC
}

// IsPrivateKey reports whether secret is an ed25519 private key (whsk_).
func IsPrivateKey(secret string) bool { return strings.HasPrefix(secret, signature.PrivateKeyPrefix) }

// PublicKeys returns the whpk_ public key of each of the endpoint's
// ed25519 keys, in the order of Secrets (current first); nil when it signs
// with shared secrets only. Public keys are not secret: they are shown to
// the endpoint's owner to verify with.
func (e *Endpoint) PublicKeys() []string {
	var out []string
	for _, s := range e.Secrets {
		if !IsPrivateKey(s) {
			continue
		}
		if k, err := signature.ParseKey(s); err == nil {
			out = append(out, k.PublicKey())
		}
	}
	return out
}

// MaskSecret shows a signing key's prefix and first four characters
// ("whsec_AbCd****"), enough to tell keys apart, never enough to use.
func MaskSecret(s string) string {
	i := strings.IndexByte(s, '_') + 1
	if i == 0 || len(s) < i+4 {
		return "****"
	}
	return s[:i+4] + "****"
}

// validateKey checks one signing key of either scheme.
func validateKey(s string) error {
	if !IsPrivateKey(s) {
		_, err := SecretKey(s)
		return err
	}
	if _, err := signature.ParseKey(s); err != nil {
		return invalid("secret: %s", strings.TrimPrefix(err.Error(), signature.ErrBadPrivateKey.Error()+": ")+
			" (a whsk_ key is the base64 of a 32-byte ed25519 seed)")
	}
	return nil
}
