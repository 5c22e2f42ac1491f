package portal

import (
	"context"
	"html"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

// The settings form edits the custom headers (one "Name: value" per line,
// checked as the API checks them), the endpoint page lists their names,
// and a delivery's "Headers sent" includes them.
func TestSettingsFormEditsCustomHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx := context.Background()
	e := b.endpoint(t, "acct_a", "https://a.example.com/hook", "invoice.*")
	d := b.deadLetter(t, e, "evt_h1")
	c := b.client(t)
	require.Equal(t, 200, c.login(b.link(t, "acct_a", "", store.PortalManage, time.Hour)).Status)
	page := "/portal/endpoints/" + e.ID
	form := func(headers string) url.Values {
		return url.Values{"url": {e.URL}, "event_types": {"invoice.*"}, "headers": {headers}}
	}

	p := c.submit(page, page+"/settings", form("X-Tenant: acme\r\n\r\n  Authorization :  Bearer t  \r\n"))
	require.Equal(t, 200, p.Status, p.Body)
	require.Contains(t, p.Body, "Settings saved")
	got, err := b.db.Store.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"X-Tenant": "acme", "Authorization": "Bearer t"}, got.Headers)
	body := html.UnescapeString(c.get(page).Body)
	require.Contains(t, body, "<code>Authorization</code> <code>X-Tenant</code>", "the settings list their names")
	require.Contains(t, body, ">Authorization: Bearer t\nX-Tenant: acme\n</textarea>", "the form holds them, one per line")
	detail := html.UnescapeString(c.get("/portal/deliveries/" + d.ID).Body)
	require.Contains(t, detail, "content-type: application/json\nAuthorization: Bearer t\nX-Tenant: acme</pre>")

	// A form without the field (an older page) keeps them.
	p = c.submit(page, page+"/settings", url.Values{"url": {e.URL}, "description": {"kept"}})
	require.Equal(t, 200, p.Status, p.Body)
	got, err = b.db.Store.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.Len(t, got.Headers, 2)

	for headers, want := range map[string]string{
		"Webhook-Id: forged\nHost: x": "Host, Webhook-Id are reserved",
		"transfer-encoding: chunked":  "transfer-encoding is reserved",
		"X-Tenant acme":               "Name: value",
		"X-A: 1\nx-a: 2":              "x-a given twice",
		"X Tenant: acme":              "X Tenant",
		"X-A: " + strings.Repeat("v", endpoint.MaxHeaderValueLen+1): "value of X-A",
		manyHeaderLines(21): "at most 20, got 21",
	} {
		p := c.submit(page, page+"/settings", form(headers))
		require.Equal(t, 400, p.Status, headers)
		require.Contains(t, html.UnescapeString(p.Body), want, headers)
	}
	got, err = b.db.Store.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.Len(t, got.Headers, 2, "a refused form wrote nothing")

	p = c.submit(page, page+"/settings", form(""))
	require.Equal(t, 200, p.Status, p.Body)
	got, err = b.db.Store.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.Nil(t, got.Headers, "an empty field clears them")
	require.Contains(t, c.get(page).Body, "<dt>Custom headers</dt><dd>none</dd>")
}

func manyHeaderLines(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString("X-H" + strings.Repeat("i", i+1) + ": v\n")
	}
	return b.String()
}
