package endpoint_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/tlstest"
)

func readPEM(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func TestParseClientCert(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	a, b := ca.Client(t, "hookd-a"), ca.Client(t, "hookd-b")
	certA, keyA, keyB := readPEM(t, a.CertFile), readPEM(t, a.KeyFile), readPEM(t, b.KeyFile)

	info, err := endpoint.ParseClientCert(certA, keyA, time.Now())
	require.NoError(t, err)
	require.Equal(t, "CN=hookd-a", info.Subject)
	require.WithinDuration(t, time.Now().Add(23*time.Hour), info.NotAfter, 2*time.Hour)

	info, err = endpoint.ParseClientCert("", "", time.Now())
	require.NoError(t, err)
	require.Zero(t, info)

	for _, c := range []struct{ cert, key, want string }{
		{certA, "", "client_key: required with client_cert"},
		{"", keyA, "client_cert: required with client_key"},
		{certA, keyB, "client_key: does not match the public key of client_cert"},
		{"not pem", keyA, "client_cert:"},
		{certA, "not pem", "client_key:"},
		{strings.Repeat("x", endpoint.MaxClientCertBytes+1), keyA, "client_cert: at most"},
	} {
		_, err := endpoint.ParseClientCert(c.cert, c.key, time.Now())
		require.ErrorIs(t, err, endpoint.ErrInvalid, c.want)
		require.Contains(t, err.Error(), c.want)
		require.NotContains(t, err.Error(), "PRIVATE KEY-----\n", "never the key")
	}
	_, err = endpoint.ParseClientCert(certA, keyA, time.Now().Add(48*time.Hour))
	require.ErrorContains(t, err, "client_cert: expired at")

	e := endpoint.Endpoint{ID: "ep_1", Account: "a", URL: "https://example.com/", Status: endpoint.StatusActive,
		Secrets: []string{endpoint.NewSecret()}, ClientCert: certA, ClientKey: keyB}
	require.ErrorContains(t, e.Validate(), "client_key: does not match")
	e.ClientKey = keyA
	require.NoError(t, e.Validate())
	got, ok := e.ClientCertInfo()
	require.True(t, ok)
	require.Equal(t, "CN=hookd-a", got.Subject)
}
