package cli_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/pgtest"
)

// hookctl endpoints add --send-traceparent, update --send-traceparent and
// --no-send-traceparent; an update without either keeps it; show says so.
func TestEndpointsSendTraceparentFlag(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	sends := func(out string) bool {
		t.Helper()
		var v struct {
			SendTraceparent bool `json:"send_traceparent"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &v), out)
		return v.SendTraceparent
	}
	code, out, errOut := hookctl(t, db, "endpoints", "add", "--account", "acct_1", "--url", "https://example.com/hook",
		"--event-type", "*", "--id", "ep_t", "--send-traceparent", "-o", "json")
	require.Equal(t, 0, code, errOut)
	require.True(t, sends(out))
	code, out, _ = hookctl(t, db, "endpoints", "show", "ep_t")
	require.Equal(t, 0, code)
	require.Regexp(t, `traceparent:\s+sent`, out)

	code, out, errOut = hookctl(t, db, "endpoints", "update", "ep_t", "--description", "x", "-o", "json")
	require.Equal(t, 0, code, errOut)
	require.True(t, sends(out), "an update without the flag keeps it")
	code, out, errOut = hookctl(t, db, "endpoints", "update", "ep_t", "--no-send-traceparent", "-o", "json")
	require.Equal(t, 0, code, errOut)
	require.False(t, sends(out))
	code, out, _ = hookctl(t, db, "endpoints", "show", "ep_t")
	require.Equal(t, 0, code)
	require.NotContains(t, out, "traceparent")
	code, out, errOut = hookctl(t, db, "endpoints", "update", "ep_t", "--send-traceparent", "-o", "json")
	require.Equal(t, 0, code, errOut)
	require.True(t, sends(out))
}
