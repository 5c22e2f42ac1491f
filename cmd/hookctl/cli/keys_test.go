package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/pgtest"
)

type keysView struct {
	Secret     string
	Secrets    []string
	PublicKeys []string `json:"public_keys"`
}

// hookctl endpoints add --signature-scheme ed25519 prints the public key,
// never the private one; rotate-secret keeps the kind (or switches it) and
// both keys sign until --finish.
func TestEndpointsEd25519Keys(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	parse := func(out string) keysView {
		t.Helper()
		var v keysView
		require.NoError(t, json.Unmarshal([]byte(out), &v), out)
		return v
	}
	code, out, errOut := hookctl(t, db, "endpoints", "add", "--account", "acct_1", "--url", "https://example.com/hook",
		"--event-type", "*", "--id", "ep_k", "--signature-scheme", "ed25519", "-o", "json")
	require.Equal(t, 0, code, errOut)
	added := parse(out)
	require.Empty(t, added.Secret, "the private key is never printed")
	require.Len(t, added.PublicKeys, 1)
	require.True(t, strings.HasPrefix(added.PublicKeys[0], "whpk_"))
	require.Regexp(t, `^whsk_.{4}\*\*\*\*$`, added.Secrets[0])

	code, out, _ = hookctl(t, db, "endpoints", "show", "ep_k")
	require.Equal(t, 0, code)
	require.Contains(t, out, "public key:")
	require.Contains(t, out, added.PublicKeys[0])

	code, out, errOut = hookctl(t, db, "endpoints", "rotate-secret", "ep_k", "-o", "json")
	require.Equal(t, 0, code, errOut)
	rotated := parse(out)
	require.Len(t, rotated.PublicKeys, 2, "a new key pair first, the previous one still signs")
	require.Equal(t, added.PublicKeys[0], rotated.PublicKeys[1])
	require.Empty(t, rotated.Secret)

	code, out, errOut = hookctl(t, db, "endpoints", "rotate-secret", "ep_k", "--signature-scheme", "hmac-sha256", "-o", "json")
	require.Equal(t, 0, code, errOut)
	switched := parse(out)
	require.True(t, strings.HasPrefix(switched.Secret, "whsec_"), "a new shared secret is printed once")
	require.Equal(t, []string{rotated.PublicKeys[0]}, switched.PublicKeys, "the previous key pair still signs")

	code, _, errOut = hookctl(t, db, "endpoints", "add", "--account", "acct_1", "--url", "https://example.com/hook",
		"--event-type", "*", "--secret", "whsk_AAAA")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "secret: 3 bytes")
}
