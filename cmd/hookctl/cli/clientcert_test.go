package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/tlstest"
)

// hookctl endpoints add/update --client-cert/--client-key, show prints the
// subject and expiry (never the key), --clear-client-cert removes it, and
// a key of another certificate is one line and exit 2.
func TestEndpointsClientCertFlags(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ca := tlstest.NewCA(t)
	a, b := ca.Client(t, "hookd-a"), ca.Client(t, "hookd-b")
	code, out, errOut := hookctl(t, db, "endpoints", "add", "--account", "acct_1", "--url", "https://example.com/hook",
		"--event-type", "*", "--id", "ep_c", "--client-cert", a.CertFile, "--client-key", a.KeyFile)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `client cert:\s+CN=hookd-a, expires 20`, out)

	code, out, errOut = hookctl(t, db, "endpoints", "show", "ep_c", "-o", "json")
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, out, "PRIVATE KEY", "the key is never printed")
	var v struct {
		ClientCert string `json:"client_cert"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Contains(t, v.ClientCert, "BEGIN CERTIFICATE")

	code, _, errOut = hookctl(t, db, "endpoints", "update", "ep_c", "--client-cert", a.CertFile, "--client-key", b.KeyFile)
	require.Equal(t, 2, code, errOut)
	require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, errOut)
	require.Contains(t, errOut, "client_key: does not match the public key of client_cert")
	code, _, errOut = hookctl(t, db, "endpoints", "update", "ep_c", "--client-cert", b.CertFile)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "give both")

	code, out, errOut = hookctl(t, db, "endpoints", "update", "ep_c", "--client-cert", b.CertFile, "--client-key", b.KeyFile)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "CN=hookd-b")
	code, out, errOut = hookctl(t, db, "endpoints", "update", "ep_c", "--clear-client-cert")
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, out, "client cert:")
}
