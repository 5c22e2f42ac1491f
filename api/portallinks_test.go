package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// POST /v1/portal-links: an account token creates links of its own
// account only, the admin token of any; the token is shown once and
// stored hashed.
func TestPortalLinks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var out portalLinkOut
	require.Equal(t, 201, b.do(t, b.tokA, "POST", "/v1/portal-links", `{"endpoint":"`+b.epA+`","ttl":"30m","level":"manage"}`, &out))
	require.Equal(t, "acct_a", out.Account)
	require.Equal(t, b.epA, out.EndpointID)
	require.Equal(t, "manage", out.Level)
	require.Equal(t, "api:acct_a", out.CreatedBy)
	token, ok := strings.CutPrefix(out.Path, "/portal/login/")
	require.True(t, ok)
	require.Equal(t, b.srv.URL+out.Path, out.URL)
	l, err := b.db.Store.PortalLinkByToken(context.Background(), token)
	require.NoError(t, err)
	require.Equal(t, out.ID, l.ID)

	require.Equal(t, 201, b.do(t, adminToken, "POST", "/v1/portal-links", `{"account":"acct_b"}`, &out))
	require.Equal(t, "read", out.Level, "read-only unless asked")
	require.Equal(t, "api:admin", out.CreatedBy)

	var e apiError
	for _, c := range []struct {
		token, body string
		status      int
		field       string
	}{
		{b.tokA, `{"account":"acct_b"}`, 400, "account"},
		{b.tokA, `{"endpoint":"` + b.epB + `"}`, 404, "endpoint"},
		{b.tokA, `{"ttl":"48h"}`, 400, "ttl"},
		{b.tokA, `{"ttl":"soon"}`, 400, "ttl"},
		{b.tokA, `{"level":"owner"}`, 400, "level"},
		{b.tokA, `{"nope":1}`, 400, "nope"},
		{adminToken, `{}`, 400, "account"},
		{"", `{}`, 401, ""},
	} {
		require.Equal(t, c.status, b.do(t, c.token, "POST", "/v1/portal-links", c.body, &e), c.body)
		require.Contains(t, e.Error.Message, c.field, c.body)
	}
}

// Issue 29: a link's url never comes from a Host header as sent. It starts
// with --portal-base-url; without it, only a request to the address hookd
// listens on (or localhost on a loopback listener) gets one, and any other
// Host is refused with a message naming the flag, before a link exists.
func TestPortalLinkURLIgnoresForeignHosts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	port := b.srv.URL[strings.LastIndexByte(b.srv.URL, ':')+1:]
	post := func(base, host string) (int, portalLinkOut, apiError) {
		t.Helper()
		req, err := http.NewRequest("POST", base+"/v1/portal-links", strings.NewReader(`{}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+b.tokA)
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var (
			out portalLinkOut
			e   apiError
		)
		if resp.StatusCode == 201 {
			require.NoError(t, json.Unmarshal(raw, &out))
		} else {
			require.NoError(t, json.Unmarshal(raw, &e), string(raw))
		}
		return resp.StatusCode, out, e
	}
	links := func() int {
		var n int
		require.NoError(t, b.db.Store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM webhooks.portal_links`).Scan(&n))
		return n
	}

	before := links()
	for _, host := range []string{"evil.example", "evil.example:" + port, "127.0.0.2:" + port, "127.0.0.1:1", "localhost.evil.example:" + port} {
		code, _, e := post(b.srv.URL, host)
		require.Equal(t, 400, code, host)
		require.Contains(t, e.Error.Message, "--portal-base-url", host)
		require.Contains(t, e.Error.Message, host, host)
	}
	require.Equal(t, before, links(), "no link is made for a refused request")

	code, out, _ := post(b.srv.URL, "localhost:"+port)
	require.Equal(t, 201, code)
	require.Equal(t, "http://localhost:"+port+out.Path, out.URL)
	code, out, _ = post(b.srv.URL, "")
	require.Equal(t, 201, code)
	require.Equal(t, b.srv.URL+out.Path, out.URL)

	// With --portal-base-url, the link starts with it whatever the Host.
	base := b.server(t, V1Config{PortalBaseURL: "https://hooks.example.com/"})
	for _, host := range []string{"evil.example", ""} {
		code, out, _ = post(base, host)
		require.Equal(t, 201, code, host)
		require.Equal(t, "https://hooks.example.com"+out.Path, out.URL, host)
	}

	bad := V1Config{PortalBaseURL: "hooks.example.com"}
	bad.SetDefaults()
	require.ErrorContains(t, bad.Validate(), "portal base url")
}
