package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/pgtest"
)

// hookctl endpoints add/update --filter; show prints it; '{}' removes it;
// a bad filter is one line naming its place and exit 2.
func TestEndpointsFilterFlag(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	filterOf := func(out string) string {
		t.Helper()
		var v struct{ Filter json.RawMessage }
		require.NoError(t, json.Unmarshal([]byte(out), &v), out)
		return string(v.Filter)
	}
	f := `{"data": {"amount": {"$gte": 100}}}`
	code, out, errOut := hookctl(t, db, "endpoints", "add", "--account", "acct_1", "--url", "https://example.com/hook",
		"--event-type", "*", "--id", "ep_f", "--filter", f, "-o", "json")
	require.Equal(t, 0, code, errOut)
	require.JSONEq(t, f, filterOf(out))
	code, out, _ = hookctl(t, db, "endpoints", "show", "ep_f")
	require.Equal(t, 0, code)
	require.Regexp(t, `filter:\s+\{"data": \{"amount": \{"\$gte": 100\}\}\}\n`, out)

	code, out, errOut = hookctl(t, db, "endpoints", "update", "ep_f", "--description", "x", "-o", "json")
	require.Equal(t, 0, code, errOut)
	require.JSONEq(t, f, filterOf(out), "an update without --filter keeps it")
	code, out, errOut = hookctl(t, db, "endpoints", "update", "ep_f", "--filter", `{"type": "invoice.paid"}`, "-o", "json")
	require.Equal(t, 0, code, errOut)
	require.JSONEq(t, `{"type": "invoice.paid"}`, filterOf(out))

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"add", "--account", "acct_1", "--url", "https://example.com/", "--event-type", "*", "--filter", `{"amount": 1}`}, "--filter: invalid endpoint: filter.amount: unknown field"},
		{[]string{"update", "ep_f", "--filter", `{"data": {"a": {"$gt": true}}}`}, "filter.data.a.$gt: compares with a number or a string"},
		{[]string{"update", "ep_f", "--filter", `{"data":`}, "filter: not JSON"},
	} {
		code, _, errOut := hookctl(t, db, append([]string{"endpoints"}, c.args...)...)
		require.Equal(t, 2, code, "%v: %s", c.args, errOut)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, errOut)
		require.Contains(t, errOut, c.want, c.args)
	}
	code, out, errOut = hookctl(t, db, "endpoints", "update", "ep_f", "--filter", `{}`, "-o", "json")
	require.Equal(t, 0, code, errOut)
	require.Empty(t, filterOf(out))
	code, out, _ = hookctl(t, db, "endpoints", "show", "ep_f")
	require.Equal(t, 0, code)
	require.NotContains(t, out, "filter:")
}
