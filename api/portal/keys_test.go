package portal

import (
	"context"
	"html"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/tlstest"
	"github.com/hookd/hookd/store"
)

// Rotating to an ed25519 key pair from the portal: the page lists the
// public keys, never the private key; a rotation without a choice keeps
// the current kind, and the previous key keeps signing.
func TestRotateToEd25519KeyPair(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx := context.Background()
	e := b.endpoint(t, "acct_a", "https://a.example.com/hook", "invoice.*")
	c := b.client(t)
	require.Equal(t, 200, c.login(b.link(t, "acct_a", "", store.PortalManage, time.Hour)).Status)
	page := "/portal/endpoints/" + e.ID
	require.NotContains(t, c.get(page).Body, "<dt>Public keys</dt>")

	p := c.submit(page, page+"/rotate", url.Values{"scheme": {"ed25519"}})
	require.Equal(t, 200, p.Status, p.Body)
	got, err := b.db.Store.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.True(t, endpoint.IsPrivateKey(got.Secrets[0]))
	require.Equal(t, e.Secrets[0], got.Secrets[1], "the previous secret keeps signing")
	body := html.UnescapeString(p.Body)
	require.Contains(t, body, "New ed25519 key pair")
	require.NotContains(t, body, strings.TrimPrefix(got.Secrets[0], "whsk_"), "the private key is never shown")
	pub := got.PublicKeys()
	require.Len(t, pub, 1)
	require.Contains(t, body, "<dt>Public keys</dt><dd><code class=\"key\">"+pub[0]+"</code>")

	p = c.submit(page, page+"/rotate", url.Values{})
	require.Equal(t, 200, p.Status, p.Body)
	got, err = b.db.Store.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.True(t, endpoint.IsPrivateKey(got.Secrets[0]), "the same kind as the current key")
	require.Len(t, got.PublicKeys(), 2)
	require.Equal(t, pub[0], got.PublicKeys()[1])

	p = c.submit(page, page+"/rotate", url.Values{"scheme": {"rsa"}})
	require.Equal(t, 400, p.Status)
	require.Contains(t, html.UnescapeString(p.Body), `signature_scheme "rsa"`)
}

// The settings form sets a client certificate (checked: a key of another
// certificate is a 400 naming client_key), the endpoint page shows its
// subject and expiry, flagged when it expires within 14 days, never its
// key; empty fields keep it and the checkbox removes it.
func TestSettingsFormClientCert(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx := context.Background()
	e := b.endpoint(t, "acct_a", "https://a.example.com/hook", "invoice.*")
	ca := tlstest.NewCA(t)
	read := func(c tlstest.Cert) (string, string) {
		cert, err := os.ReadFile(c.CertFile)
		require.NoError(t, err)
		key, err := os.ReadFile(c.KeyFile)
		require.NoError(t, err)
		return string(cert), string(key)
	}
	certA, keyA := read(ca.Client(t, "hookd-client")) // expires in a day
	_, keyB := read(ca.Client(t, "other"))
	cl := b.client(t)
	require.Equal(t, 200, cl.login(b.link(t, "acct_a", "", store.PortalManage, time.Hour)).Status)
	page := "/portal/endpoints/" + e.ID
	form := func(cert, key string) url.Values {
		return url.Values{"url": {e.URL}, "event_types": {"invoice.*"}, "client_cert": {cert}, "client_key": {key}}
	}

	p := cl.submit(page, page+"/settings", form(certA, keyB))
	require.Equal(t, 400, p.Status)
	require.Contains(t, html.UnescapeString(p.Body), "client_key: does not match the public key of client_cert")
	p = cl.submit(page, page+"/settings", form(certA, keyA))
	require.Equal(t, 200, p.Status, p.Body)
	got, err := b.db.Store.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.Contains(t, got.ClientKey, "PRIVATE KEY")
	body := html.UnescapeString(cl.get(page).Body)
	require.Contains(t, body, "<dt>Client certificate</dt><dd><code>CN=hookd-client</code>, <strong class=\"warn\">expires soon</strong>")
	require.NotContains(t, body, "PRIVATE KEY-----\n", "the key is never sent back")

	p = cl.submit(page, page+"/settings", form("", ""))
	require.Equal(t, 200, p.Status, p.Body)
	got, err = b.db.Store.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.NotEmpty(t, got.ClientCert, "empty fields keep it")
	v := form("", "")
	v.Set("clear_client_cert", "1")
	p = cl.submit(page, page+"/settings", v)
	require.Equal(t, 200, p.Status, p.Body)
	got, err = b.db.Store.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.Empty(t, got.ClientCert)
}
