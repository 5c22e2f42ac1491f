package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/pgtest"
)

// hookctl endpoints add/update --header, --remove-header, --clear-headers;
// show lists them; a bad or reserved header is one line and exit 2.
func TestEndpointsHeaderFlags(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	headersOf := func(out string) map[string]string {
		t.Helper()
		var v struct{ Headers map[string]string }
		require.NoError(t, json.Unmarshal([]byte(out), &v), out)
		return v.Headers
	}
	code, out, errOut := hookctl(t, db, "endpoints", "add", "--account", "acct_1", "--url", "https://example.com/hook",
		"--event-type", "*", "--id", "ep_h", "--header", "X-Tenant: acme", "--header", "X-List: a, b", "-o", "json")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, map[string]string{"X-Tenant": "acme", "X-List": "a, b"}, headersOf(out), "commas stay in the value")

	code, out, _ = hookctl(t, db, "endpoints", "show", "ep_h")
	require.Equal(t, 0, code)
	require.Regexp(t, `header:\s+X-List: a, b\n`, out)
	require.Regexp(t, `header:\s+X-Tenant: acme\n`, out)

	code, out, errOut = hookctl(t, db, "endpoints", "update", "ep_h", "--header", "x-tenant: globex", "--header", "X-New: 1",
		"--remove-header", "x-list", "-o", "json")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, map[string]string{"x-tenant": "globex", "X-New": "1"}, headersOf(out), "replaced whatever its case, removed, added")

	code, out, errOut = hookctl(t, db, "endpoints", "update", "ep_h", "--clear-headers", "-o", "json")
	require.Equal(t, 0, code, errOut)
	require.Empty(t, headersOf(out))
	code, out, _ = hookctl(t, db, "endpoints", "show", "ep_h")
	require.Equal(t, 0, code)
	require.NotContains(t, out, "header:")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"add", "--account", "acct_1", "--url", "https://example.com/", "--event-type", "*", "--header", "Webhook-Signature: v1,x"}, "Webhook-Signature is reserved"},
		{[]string{"add", "--account", "acct_1", "--url", "https://example.com/", "--event-type", "*", "--header", "X-Tenant"}, `"Name: value"`},
		{[]string{"add", "--account", "acct_1", "--url", "https://example.com/", "--event-type", "*", "--header", "X-A: 1", "--header", "x-a: 2"}, "x-a given twice"},
		{[]string{"update", "ep_h", "--header", "Host: evil"}, "Host is reserved"},
		{[]string{"update", "ep_h", "--header", "Connection: close", "--header", "content-length: 5"}, "Connection, content-length are reserved"},
		{[]string{"update", "ep_h", "--header", "X Bad: 1"}, `name "X Bad"`},
		{[]string{"update", "ep_h", "--header", "X-A: " + strings.Repeat("v", 1025)}, "value of X-A"},
		{[]string{"update", "ep_h", "--remove-header", "X-Absent"}, `has no header "X-Absent"`},
	} {
		code, _, errOut := hookctl(t, db, append([]string{"endpoints"}, c.args...)...)
		require.Equal(t, 2, code, "%v: %s", c.args, errOut)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, errOut)
		require.Contains(t, errOut, c.want, c.args)
	}
	code, out, _ = hookctl(t, db, "endpoints", "show", "ep_h", "-o", "json")
	require.Equal(t, 0, code)
	require.Empty(t, headersOf(out), "a refused update wrote nothing")
}
