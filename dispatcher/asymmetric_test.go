package dispatcher_test

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/dispatcher/signature"
)

// specVerify checks a request as a Standard Webhooks receiver does, from
// the specification alone: the signed content is
// "<webhook-id>.<webhook-timestamp>.<body>"; webhook-signature lists
// "<version>,<base64>" entries separated by spaces; a "v1a" entry is an
// ed25519 signature checked with the whpk_ public key, a "v1" entry an
// HMAC-SHA256 with the whsec_ secret's key. It reports which versions
// verified.
func specVerify(t *testing.T, h http.Header, body []byte, publicKey, secret string) map[string]bool {
	t.Helper()
	content := []byte(h.Get("Webhook-Id") + "." + h.Get("Webhook-Timestamp") + "." + string(body))
	pub, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(publicKey, "whpk_"))
	require.NoError(t, err)
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err)
	mac := hmac.New(sha256.New, key)
	mac.Write(content)
	wantV1 := mac.Sum(nil)
	ok := map[string]bool{}
	for _, entry := range strings.Fields(h.Get("Webhook-Signature")) {
		version, b64, _ := strings.Cut(entry, ",")
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			continue
		}
		switch version {
		case "v1a":
			ok["v1a"] = ok["v1a"] || (len(pub) == ed25519.PublicKeySize && ed25519.Verify(pub, content, sig))
		case "v1":
			ok["v1"] = ok["v1"] || hmac.Equal(sig, wantV1)
		}
	}
	return ok
}

// TestEd25519SignaturesDuringRotation: an endpoint rotating from a shared
// secret to an ed25519 key pair gets both signatures on a real request,
// each verifying on its own; after the rotation ends, v1a alone.
func TestEd25519SignaturesDuringRotation(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	var mu sync.Mutex
	type req struct {
		h    http.Header
		body []byte
	}
	var seen []req
	var rc *receiver
	rc = newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		// The harness has read the body already.
		rc.mu.Lock()
		body := rc.bodies[r.Header.Get("webhook-id")]
		rc.mu.Unlock()
		mu.Lock()
		seen = append(seen, req{r.Header.Clone(), body})
		mu.Unlock()
	})
	private := signature.NewPrivateKey()
	k, err := signature.ParseKey(private)
	require.NoError(t, err)
	b.eps.set(dispatcher.Target{ID: "ep_k", URL: rc.srv.URL, Secrets: []string{private, secretA}})
	b.start(dispatcher.Config{AllowPrivateNetworks: true}, runOpts{})
	b.produce(-1, newDelivery("evt_k1", "ep_k"))
	eventually(t, 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 1 }, "the first request")

	b.eps.set(dispatcher.Target{ID: "ep_k", URL: rc.srv.URL, Secrets: []string{private}})
	b.produce(-1, newDelivery("evt_k2", "ep_k"))
	eventually(t, 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 2 }, "the second request")

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]bool{"v1a": true, "v1": true}, specVerify(t, seen[0].h, seen[0].body, k.PublicKey(), secretA),
		"during the rotation: %s", seen[0].h.Get("Webhook-Signature"))
	require.Equal(t, map[string]bool{"v1a": true}, specVerify(t, seen[1].h, seen[1].body, k.PublicKey(), secretA),
		"after it: %s", seen[1].h.Get("Webhook-Signature"))
	other, _ := signature.ParseKey(signature.NewPrivateKey())
	require.Equal(t, map[string]bool{"v1a": false}, specVerify(t, seen[1].h, seen[1].body, other.PublicKey(), secretA),
		"another key pair's public key does not verify")
}
