package api

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/dispatcher/signature"
)

// An endpoint created with signature_scheme ed25519 gets a whsk_ key that
// the API never shows; its whpk_ public key is in every answer. A bad
// scheme or key is a 400 naming the field.
func TestEndpointEd25519OverAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ep endpointOut
	require.Equal(t, 201, b.do(t, b.tokA, "POST", "/v1/endpoints",
		`{"event_types":["*"],"url":"https://x.example.com","signature_scheme":"ed25519"}`, &ep))
	require.Empty(t, ep.Secret, "a private key is never shown")
	require.Equal(t, "ed25519", ep.SignatureScheme)
	require.Len(t, ep.PublicKeys, 1)
	require.True(t, strings.HasPrefix(ep.PublicKeys[0], "whpk_"), ep.PublicKeys[0])
	require.Len(t, ep.Secrets, 1)
	require.Regexp(t, `^whsk_.{4}\*\*\*\*$`, ep.Secrets[0])

	stored, err := b.db.Store.GetEndpoint(context.Background(), ep.ID)
	require.NoError(t, err)
	k, err := signature.ParseKey(stored.Secrets[0])
	require.NoError(t, err)
	require.Equal(t, k.PublicKey(), ep.PublicKeys[0], "the public key shown is the stored key's")

	var got endpointOut
	require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/endpoints/"+ep.ID, "", &got))
	require.Equal(t, ep.PublicKeys, got.PublicKeys)

	var hm endpointOut
	require.Equal(t, 201, b.do(t, b.tokA, "POST", "/v1/endpoints", `{"event_types":["*"],"url":"https://x.example.com"}`, &hm))
	require.Equal(t, "hmac-sha256", hm.SignatureScheme)
	require.Empty(t, hm.PublicKeys)
	require.True(t, strings.HasPrefix(hm.Secret, "whsec_"))

	own := signature.NewPrivateKey()
	var imported endpointOut
	require.Equal(t, 201, b.do(t, b.tokA, "POST", "/v1/endpoints", `{"event_types":["*"],"url":"https://x.example.com","secret":"`+own+`"}`, &imported))
	ok, _ := signature.ParseKey(own)
	require.Equal(t, []string{ok.PublicKey()}, imported.PublicKeys)
	require.Empty(t, imported.Secret)

	url := `"event_types":["*"],"url":"https://x.example.com"`
	before := b.state(t)
	for body, want := range map[string]string{
		`{` + url + `,"signature_scheme":"rsa"}`:                                "signature_scheme",
		`{` + url + `,"secret":"whsk_abc"}`:                                     "secret: invalid base64",
		`{` + url + `,"secret":"whsk_AAAA"}`:                                    "secret: 3 bytes",
		`{` + url + `,"secret":"` + own + `","signature_scheme":"hmac-sha256"}`: "signature_scheme: hmac-sha256 contradicts the secret given",
	} {
		var e apiError
		require.Equal(t, 400, b.do(t, b.tokA, "POST", "/v1/endpoints", body, &e), "%s: %s", body, e.Error.Message)
		require.Contains(t, e.Error.Message, want, body)
		require.NotContains(t, e.Error.Message, own[5:], "an error never holds the key")
	}
	require.Equal(t, before, b.state(t), "a refused request wrote something")
}
