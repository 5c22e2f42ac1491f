package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/pgtest"
)

// hookctl endpoints add/update --ordering fifo|none; show prints a FIFO
// endpoint's; a bad value is one line naming --ordering and exit 2.
func TestEndpointsOrderingFlag(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	orderingOf := func(out string) string {
		t.Helper()
		var v struct{ Ordering string }
		require.NoError(t, json.Unmarshal([]byte(out), &v), out)
		return v.Ordering
	}
	code, out, errOut := hookctl(t, db, "endpoints", "add", "--account", "acct_1", "--url", "https://example.com/hook",
		"--event-type", "*", "--id", "ep_o", "--ordering", "fifo", "-o", "json")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "fifo", orderingOf(out))
	code, out, _ = hookctl(t, db, "endpoints", "show", "ep_o")
	require.Equal(t, 0, code)
	require.Regexp(t, `ordering:\s+fifo`, out)

	code, out, errOut = hookctl(t, db, "endpoints", "update", "ep_o", "--description", "x", "-o", "json")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "fifo", orderingOf(out), "an update without --ordering keeps it")
	code, out, errOut = hookctl(t, db, "endpoints", "update", "ep_o", "--ordering", "none", "-o", "json")
	require.Equal(t, 0, code, errOut)
	require.Empty(t, orderingOf(out))
	code, out, _ = hookctl(t, db, "endpoints", "show", "ep_o")
	require.Equal(t, 0, code)
	require.NotContains(t, out, "ordering:")

	for _, args := range [][]string{
		{"add", "--account", "acct_1", "--url", "https://example.com/", "--event-type", "*", "--ordering", "lifo"},
		{"update", "ep_o", "--ordering", "FIFO"},
		{"update", "ep_o", "--ordering", ""},
	} {
		code, _, errOut := hookctl(t, db, append([]string{"endpoints"}, args...)...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, errOut)
		require.Contains(t, errOut, "--ordering: invalid endpoint: ordering: must be", args)
	}
}
