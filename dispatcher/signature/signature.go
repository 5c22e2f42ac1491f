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
	"strconv"
	"strings"
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
// the exact bytes that will be sent.
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
