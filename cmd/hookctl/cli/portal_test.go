package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/pgtest"
)

func TestPortalLinkCommand(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	code, out, errOut := hookctl(t, db, "endpoints", "add", "--event-type", "*", "--account", "acct_1", "--url", "https://example.com/hook", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var ep struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(out), &ep))

	code, out, errOut = hookctl(t, db, "portal", "link", "--account", "acct_1", "--endpoint", ep.ID, "--ttl", "30m", "--manage",
		"--base-url", "https://hooks.example.com/", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var l struct {
		ID, Account, Endpoint, Level, URL string
	}
	require.NoError(t, json.Unmarshal([]byte(out), &l))
	require.Equal(t, "acct_1", l.Account)
	require.Equal(t, ep.ID, l.Endpoint)
	require.Equal(t, "manage", l.Level)
	token, ok := strings.CutPrefix(l.URL, "https://hooks.example.com/portal/login/")
	require.True(t, ok, l.URL)
	got, err := db.Store.PortalLinkByToken(context.Background(), token)
	require.NoError(t, err, "the printed token is the stored link's")
	require.Equal(t, l.ID, got.ID)

	code, out, errOut = hookctl(t, db, "portal", "link", "--account", "acct_1")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "read-only")
	require.Contains(t, out, "http://127.0.0.1:8080/portal/login/hpl_")

	// Bad input: one line, exit 2, no link.
	for _, args := range [][]string{
		{"--account", "acct_1", "--ttl", "48h"},
		{"--account", "acct_2", "--endpoint", ep.ID},
		{"--account", "bad account"},
		{"--account", "acct_1", "--base-url", "hooks.example.com"},
	} {
		code, _, errOut = hookctl(t, db, append([]string{"portal", "link"}, args...)...)
		require.Equal(t, 2, code, args)
		require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	}
	var n int
	require.NoError(t, db.Store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM webhooks.portal_links`).Scan(&n))
	require.Equal(t, 2, n)
}
