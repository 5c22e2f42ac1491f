package api

import (
	"context"
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
