package endpoint_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/endpoint"
)

func TestValidateHeaders(t *testing.T) {
	t.Parallel()
	twenty := map[string]string{}
	for i := range endpoint.MaxHeaders {
		twenty["X-H"+strconv.Itoa(i)] = "v"
	}
	good := []map[string]string{
		nil,
		{},
		{"X-Tenant": "acme"},
		{"Authorization": "Bearer abc.def", "x-weird_!#$%&'*+.^`|~": "ünïcode\tand spaces inside", "X-Empty": ""},
		{"X-Long": strings.Repeat("v", endpoint.MaxHeaderValueLen)},
		{"Webhook": "not the prefix", "Contents": "not the prefix", "Hostname": "x", "Tea": "x"},
		twenty,
	}
	for _, h := range good {
		require.NoError(t, endpoint.ValidateHeaders(h), "%v", h)
	}
	over := map[string]string{"X-One-More": "v"}
	for k, v := range twenty {
		over[k] = v
	}
	cases := []struct {
		name    string
		h       map[string]string
		mention []string // each must appear in the message
	}{
		{"too many", over, []string{"at most 20, got 21"}},
		{"empty name", map[string]string{"": "v"}, []string{"HTTP token"}},
		{"space in name", map[string]string{"X Tenant": "v"}, []string{`"X Tenant"`}},
		{"colon in name", map[string]string{"X-Tenant:": "v"}, []string{`"X-Tenant:"`}},
		{"non-ASCII name", map[string]string{"X-Ténant": "v"}, []string{"HTTP token"}},
		{"long name", map[string]string{strings.Repeat("x", endpoint.MaxHeaderNameLen+1): "v"}, []string{"HTTP token"}},
		{"CR LF in value", map[string]string{"X-A": "v\r\nX-Injected: 1"}, []string{"X-A", "CR, LF"}},
		{"NUL in value", map[string]string{"X-A": "v\x00"}, []string{"X-A", "NUL"}},
		{"LF in value", map[string]string{"X-A": "v\nw"}, []string{"X-A"}},
		{"DEL in value", map[string]string{"X-A": "v\x7f"}, []string{"X-A"}},
		{"bad UTF-8 value", map[string]string{"X-A": "\xff"}, []string{"X-A", "UTF-8"}},
		{"padded value", map[string]string{"X-A": " v"}, []string{"X-A", "space"}},
		{"long value", map[string]string{"X-A": strings.Repeat("v", endpoint.MaxHeaderValueLen+1)}, []string{"X-A", "1024"}},
		{"same but case", map[string]string{"X-Tenant": "a", "x-tenant": "b"}, []string{"X-Tenant", "x-tenant"}},
		{"webhook-id", map[string]string{"Webhook-Id": "x"}, []string{"Webhook-Id is reserved"}},
		{"webhook-signature lower", map[string]string{"webhook-signature": "v1,x"}, []string{"webhook-signature"}},
		{"WEBHOOK-anything", map[string]string{"WEBHOOK-FOO": "x"}, []string{"WEBHOOK-FOO"}},
		{"content-type", map[string]string{"Content-Type": "text/plain"}, []string{"Content-Type"}},
		{"content-length", map[string]string{"content-length": "1"}, []string{"content-length"}},
		{"host", map[string]string{"HOST": "evil"}, []string{"HOST"}},
		{"user-agent", map[string]string{"User-Agent": "me"}, []string{"User-Agent"}},
		{"connection", map[string]string{"Connection": "close"}, []string{"Connection"}},
		{"keep-alive", map[string]string{"Keep-Alive": "1"}, []string{"Keep-Alive"}},
		{"proxy-authorization", map[string]string{"Proxy-Authorization": "x"}, []string{"Proxy-Authorization"}},
		{"te", map[string]string{"TE": "trailers"}, []string{"TE"}},
		{"trailer", map[string]string{"Trailer": "x"}, []string{"Trailer"}},
		{"transfer-encoding", map[string]string{"Transfer-Encoding": "chunked"}, []string{"Transfer-Encoding"}},
		{"upgrade", map[string]string{"Upgrade": "h2c"}, []string{"Upgrade"}},
		{"all reserved named", map[string]string{"Host": "x", "X-Ok": "y", "Webhook-Id": "z"}, []string{"Host, Webhook-Id are reserved"}},
		{"reserved before bad value", map[string]string{"Host": "x", "A-Bad": "\n"}, []string{"Host is reserved"}},
	}
	for _, c := range cases {
		err := endpoint.ValidateHeaders(c.h)
		require.ErrorIs(t, err, endpoint.ErrInvalid, c.name)
		require.Contains(t, err.Error(), "headers", c.name)
		for _, m := range c.mention {
			require.Contains(t, err.Error(), m, c.name)
		}
		require.NotContains(t, err.Error(), "\n", c.name)
		require.NotContains(t, err.Error(), "\r", c.name)
		// Validate applies the same rule to the endpoint.
		e := endpoint.Endpoint{ID: "ep_1", Account: "a", URL: "https://example.com/", Secrets: []string{endpoint.NewSecret()},
			Status: endpoint.StatusActive, Headers: c.h}
		require.ErrorIs(t, e.Validate(), endpoint.ErrInvalid, c.name)
	}
}

func TestParseHeaderLine(t *testing.T) {
	t.Parallel()
	for line, want := range map[string][2]string{
		"X-Tenant: acme":          {"X-Tenant", "acme"},
		"X-Tenant:acme":           {"X-Tenant", "acme"},
		"  X-Tenant :\t a: b  ":   {"X-Tenant", "a: b"},
		"X-Empty:":                {"X-Empty", ""},
		"Authorization: Bearer x": {"Authorization", "Bearer x"},
	} {
		n, v, err := endpoint.ParseHeaderLine(line)
		require.NoError(t, err, line)
		require.Equal(t, want, [2]string{n, v}, line)
	}
	for _, line := range []string{"", "X-Tenant", ": acme", "  : acme"} {
		_, _, err := endpoint.ParseHeaderLine(line)
		require.ErrorIs(t, err, endpoint.ErrInvalid, line)
		require.Contains(t, err.Error(), "Name: value", line)
	}
}
