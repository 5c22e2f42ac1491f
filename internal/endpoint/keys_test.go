package endpoint_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/endpoint"
)

func TestSigningKeys(t *testing.T) {
	t.Parallel()
	private, err := endpoint.NewSigningKey(endpoint.SchemeEd25519)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(private, "whsk_"))
	secret, err := endpoint.NewSigningKey("")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(secret, "whsec_"))
	_, err = endpoint.NewSigningKey("rsa")
	require.ErrorIs(t, err, endpoint.ErrInvalid)
	require.Contains(t, err.Error(), "signature_scheme")

	e := endpoint.Endpoint{ID: "ep_1", Account: "a", URL: "https://example.com/", Status: endpoint.StatusActive,
		Secrets: []string{private, secret}}
	require.NoError(t, e.Validate())
	pub := e.PublicKeys()
	require.Len(t, pub, 1)
	require.True(t, strings.HasPrefix(pub[0], "whpk_"))
	require.Equal(t, endpoint.SchemeEd25519, endpoint.SchemeOf(private))
	require.Equal(t, endpoint.SchemeHMAC, endpoint.SchemeOf(secret))
	require.Equal(t, private[:9]+"****", endpoint.MaskSecret(private))
	require.Equal(t, secret[:10]+"****", endpoint.MaskSecret(secret))

	e.Secrets = []string{"whsk_AAAA"}
	err = e.Validate()
	require.ErrorIs(t, err, endpoint.ErrInvalid)
	require.Contains(t, err.Error(), "secret: 3 bytes")
}
