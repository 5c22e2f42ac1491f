package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	hookctlcli "github.com/hookd/hookd/cmd/hookctl/cli"
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
	code, _, errOut = hookctl(t, db, "endpoints", "add", "--event-type", "*", "--account", "acct_1", "--url", "ftp://x")
	require.Equal(t, 2, code)
	require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, errOut)
	require.Contains(t, errOut, "scheme must be http or https")
	code, _, errOut = hookctl(t, db, "endpoints", "add", "--event-type", "*", "--account", "acct_1", "--url", "https://x", "--secret", "hunter2")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "whsec_")
	// No silent subscription to everything: the choice is explicit.
	code, out, errOut = hookctl(t, db, "endpoints", "add", "--account", "acct_1", "--url", "https://x.example.com/")
	require.Equal(t, 2, code, out)
	require.Equal(t, "hookctl: --event-type: required: name the event types to receive, or pass --event-type '*' for all", strings.TrimSpace(errOut))
	code, out, errOut = hookctl(t, db, "endpoints", "add", "--account", "acct_1", "--url", "https://x.example.com/", "--event-type", "*", "-o", "json")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `"event_types": [
    "*"
  ]`)
	code, _, errOut = hookctl(t, db, "endpoints", "show", "ep_nope")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "not found")

	code, out, _ = hookctl(t, db, "endpoints", "delete", added.ID, "-o", "json")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"deleted": true`)
	code, _, _ = hookctl(t, db, "endpoints", "delete", added.ID)
	require.Equal(t, 2, code)
}

// Issue 11 item 4: hookctl refuses private destinations at add and update
// with one line and exit 2, unless --allow-private-networks.
func TestEndpointsPrivateDestinations(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	for url, why := range map[string]string{
		"http://10.0.0.1/hook":          "url: 10.0.0.1 is a private address (RFC 1918)",
		"http://127.0.0.1:8080/":        "url: 127.0.0.1 is a loopback address (RFC 1122)",
		"http://[::ffff:0:a9fe:a9fe]/":  "url: ::ffff:0:a9fe:a9fe embeds 169.254.169.254, a cloud instance metadata address",
		"http://localhost:9000/":        "url: localhost is a loopback name (RFC 6761)",
		"http://169.254.169.254/latest": "url: 169.254.169.254 is a cloud instance metadata address",
		// Full-width dots and circled digits are what net/http dials (issue 29).
		"http://127。0。0。1/": "url: 127.0.0.1 is a loopback address (RFC 1122)",
		"http://①②⑦.⓪.⓪.①/": "url: 127.0.0.1 is a loopback address (RFC 1122)",
	} {
		code, out, errOut := hookctl(t, db, "endpoints", "add", "--event-type", "*", "--account", "acct_1", "--url", url)
		require.Equal(t, 2, code, url)
		require.Empty(t, out)
		require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
		require.Contains(t, errOut, why, url)
		require.Contains(t, errOut, "--allow-private-networks", url)
	}
	code, out, _ := hookctl(t, db, "endpoints", "list", "-o", "json")
	require.Equal(t, 0, code)
	require.Equal(t, "[]\n", out, "nothing written")

	code, out, errOut := hookctl(t, db, "endpoints", "add", "--event-type", "*", "--account", "acct_1", "--url", "http://127.0.0.1:8080/", "--allow-private-networks", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var ep struct{ ID, URL string }
	require.NoError(t, json.Unmarshal([]byte(out), &ep))

	code, _, errOut = hookctl(t, db, "endpoints", "update", ep.ID, "--url", "http://10.9.8.7/")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "url: 10.9.8.7 is a private address (RFC 1918)")
	code, _, errOut = hookctl(t, db, "endpoints", "update", ep.ID, "--description", "local receiver")
	require.Equal(t, 0, code, "the check runs when the URL changes only: %s", errOut)
	code, out, _ = hookctl(t, db, "endpoints", "show", ep.ID, "-o", "json")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"url": "http://127.0.0.1:8080/"`)
	code, _, errOut = hookctl(t, db, "endpoints", "update", ep.ID, "--url", "http://10.9.8.7/", "--allow-private-networks")
	require.Equal(t, 0, code, errOut)
}

// HOOKD_ALLOW_PRIVATE_NETWORKS is the flag's environment variable (the
// same as hookd's, so one export serves both in development).
func TestEndpointsPrivateNetworksFromEnv(t *testing.T) {
	db := pgtest.New(t)
	t.Setenv("HOOKD_ALLOW_PRIVATE_NETWORKS", "false")
	code, _, errOut := hookctl(t, db, "endpoints", "add", "--event-type", "*", "--account", "acct_1", "--url", "http://127.0.0.1:8080/")
	require.Equal(t, 2, code, errOut)
	t.Setenv("HOOKD_ALLOW_PRIVATE_NETWORKS", "true")
	code, _, errOut = hookctl(t, db, "endpoints", "add", "--event-type", "*", "--account", "acct_1", "--url", "http://127.0.0.1:8080/")
	require.Equal(t, 0, code, errOut)
}

// Bad values are refused before anything is written, with the API's
// field names and the API's event-type rule.
func TestEndpointsBadInput(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	code, out, errOut := hookctl(t, db, "endpoints", "add", "--event-type", "*", "--account", "acct_1", "--url", "https://x.example/", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var ep struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(out), &ep))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--event-type", "invoice..paid"}, "event_types: \"invoice..paid\" has an empty segment"},
		{[]string{"--event-type", "invoice:paid"}, "event_types"},
		{[]string{"--timeout", "1000h"}, "timeout"},
		{[]string{"--timeout=-1s"}, "timeout"},
		{[]string{"--max-in-flight", "3000000000"}, "max_in_flight"},
		{[]string{"--rate", "NaN"}, "rate_per_sec"},
		{[]string{"--rate=-1"}, "rate_per_sec"},
		{[]string{"--description", "a\x1bb"}, "description"},
		{[]string{"--url", "http://2130706433/"}, "numeric"},
	} {
		add := append([]string{"endpoints", "add", "--event-type", "*", "--account", "acct_1", "--url", "https://y.example/"}, c.args...)
		if c.args[0] == "--url" {
			add = append([]string{"endpoints", "add", "--event-type", "*", "--account", "acct_1"}, c.args...)
		}
		code, _, errOut := hookctl(t, db, add...)
		require.Equal(t, 2, code, "%v: %s", c.args, errOut)
		require.Contains(t, errOut, c.want, c.args)
		require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
		code, _, errOut = hookctl(t, db, append([]string{"endpoints", "update", ep.ID}, c.args...)...)
		require.Equal(t, 2, code, "update %v: %s", c.args, errOut)
		require.Contains(t, errOut, c.want, c.args)
	}
	code, out, _ = hookctl(t, db, "endpoints", "list", "-o", "json")
	require.Equal(t, 0, code)
	require.Equal(t, 1, strings.Count(out, `"id"`), "only the first endpoint: %s", out)
}

// A database nobody migrated gets advice, not a raw SQL error (issue 32: it
// exited 1 with `relation "webhooks.endpoints" does not exist`).
func TestUnmigratedDatabaseSaysToMigrate(t *testing.T) {
	t.Parallel()
	db := pgtest.NewUnmigrated(t)
	code, _, errOut := hookctl(t, db, "endpoints", "list", "--account", "acct_1")
	require.Equal(t, hookctlcli.ExitUsage, code, errOut)
	require.Equal(t, "hookctl: the database has no hookd schema: run `hookd migrate` against this database first\n", errOut)
}
