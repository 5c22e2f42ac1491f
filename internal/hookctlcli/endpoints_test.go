package hookctlcli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/hookctlcli"
	"github.com/hookd/hookd/internal/pgtest"
)

func hookctl(t *testing.T, db *pgtest.DB, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := hookctlcli.Main(context.Background(), append([]string{"--database-url", db.URL}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestEndpointsCommands(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)

	code, out, errOut := hookctl(t, db, "endpoints", "add", "--account", "acct_1", "--url", "https://example.com/hook",
		"--event-type", "invoice.*,customer.created", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var added struct {
		ID, Secret string
		Secrets    []string
		EventTypes []string `json:"event_types"`
		Status     string
	}
	require.NoError(t, json.Unmarshal([]byte(out), &added))
	require.True(t, strings.HasPrefix(added.ID, "ep_"))
	require.True(t, strings.HasPrefix(added.Secret, "whsec_"), "add prints the generated secret once")
	require.NotContains(t, added.Secrets[0], added.Secret[6:], "stored secrets are masked")
	require.Equal(t, []string{"invoice.*", "customer.created"}, added.EventTypes)
	require.Equal(t, "active", added.Status)

	code, out, _ = hookctl(t, db, "endpoints", "list", "--account", "acct_1")
	require.Equal(t, 0, code)
	require.Contains(t, out, added.ID)
	require.NotContains(t, out, added.Secret)

	code, out, _ = hookctl(t, db, "endpoints", "show", added.ID, "--show-secrets", "-o", "json")
	require.Equal(t, 0, code)
	require.Contains(t, out, added.Secret)

	code, out, _ = hookctl(t, db, "endpoints", "update", added.ID, "--all-event-types", "--max-in-flight", "2", "-o", "json")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"event_types": []`)
	require.Contains(t, out, `"max_in_flight": 2`)

	code, out, _ = hookctl(t, db, "endpoints", "disable", added.ID, "--reason", "maintenance")
	require.Equal(t, 0, code)
	require.Contains(t, out, "disabled")
	require.Contains(t, out, "maintenance")
	code, out, _ = hookctl(t, db, "endpoints", "enable", added.ID, "-o", "json")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"status": "active"`)

	code, out, _ = hookctl(t, db, "endpoints", "rotate-secret", added.ID, "-o", "json")
	require.Equal(t, 0, code)
	var rotated struct {
		Secret  string
		Secrets []string
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rotated))
	require.Len(t, rotated.Secrets, 2, "the previous secret keeps signing")
	require.NotEqual(t, added.Secret, rotated.Secret)
	code, out, _ = hookctl(t, db, "endpoints", "rotate-secret", added.ID, "--finish", "-o", "json")
	require.Equal(t, 0, code)
	require.NoError(t, json.Unmarshal([]byte(out), &rotated))
	require.Len(t, rotated.Secrets, 1)

	// Bad input: one line, exit 2.
	code, _, errOut = hookctl(t, db, "endpoints", "add", "--account", "acct_1", "--url", "ftp://x")
	require.Equal(t, 2, code)
	require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, errOut)
	require.Contains(t, errOut, "scheme must be http or https")
	code, _, errOut = hookctl(t, db, "endpoints", "add", "--account", "acct_1", "--url", "https://x", "--secret", "hunter2")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "whsec_")
	code, _, errOut = hookctl(t, db, "endpoints", "show", "ep_nope")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "not found")

	code, out, _ = hookctl(t, db, "endpoints", "delete", added.ID, "-o", "json")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"deleted": true`)
	code, _, _ = hookctl(t, db, "endpoints", "delete", added.ID)
	require.Equal(t, 2, code)
}
