package portal

import (
	"context"
	"html"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/store"
)

// The settings form edits the payload filter (checked as the API checks
// it; a bad one is a 400 naming its place), the endpoint page shows it,
// and an empty field removes it.
func TestSettingsFormEditsPayloadFilter(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx := context.Background()
	e := b.endpoint(t, "acct_a", "https://a.example.com/hook", "invoice.*")
	c := b.client(t)
	require.Equal(t, 200, c.login(b.link(t, "acct_a", "", store.PortalManage, time.Hour)).Status)
	page := "/portal/endpoints/" + e.ID
	form := func(filter string) url.Values {
		return url.Values{"url": {e.URL}, "event_types": {"invoice.*"}, "filter": {filter}}
	}
	require.Contains(t, c.get(page).Body, "<dt>Payload filter</dt><dd>none")

	p := c.submit(page, page+"/settings", form("{\"data\": {\"amount\": {\"$gte\": 100}}}\r\n"))
	require.Equal(t, 200, p.Status, p.Body)
	got, err := b.db.Store.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"data": {"amount": {"$gte": 100}}}`, string(got.Filter))
	body := html.UnescapeString(c.get(page).Body)
	require.Contains(t, body, `<code>{"data": {"amount": {"$gte": 100}}}</code>`)
	require.Contains(t, body, `>{"data": {"amount": {"$gte": 100}}}</textarea>`, "the form holds it")

	p = c.submit(page, page+"/settings", url.Values{"url": {e.URL}, "description": {"kept"}})
	require.Equal(t, 200, p.Status, p.Body)
	got, err = b.db.Store.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.NotNil(t, got.Filter, "a form without the field keeps it")

	for filter, want := range map[string]string{
		`{"data": {"amount": {"$regex": "1"}}}`: "filter.data.amount.$regex: unknown operator",
		`{"amount": 1}`:                         "filter.amount: unknown field",
		`{"data":`:                              "filter: not JSON",
	} {
		p := c.submit(page, page+"/settings", form(filter))
		require.Equal(t, 400, p.Status, filter)
		require.Contains(t, html.UnescapeString(p.Body), want, filter)
	}
	got, err = b.db.Store.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"data": {"amount": {"$gte": 100}}}`, string(got.Filter), "a refused form wrote nothing")

	p = c.submit(page, page+"/settings", form(""))
	require.Equal(t, 200, p.Status, p.Body)
	got, err = b.db.Store.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.Nil(t, got.Filter, "an empty field removes it")
}
