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

// The settings form sets the ordering (a bad value is a 400 naming it),
// the endpoint page shows it, and a form without the field keeps it.
func TestSettingsFormEditsOrdering(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx := context.Background()
	e := b.endpoint(t, "acct_a", "https://a.example.com/hook", "invoice.*")
	c := b.client(t)
	require.Equal(t, 200, c.login(b.link(t, "acct_a", "", store.PortalManage, time.Hour)).Status)
	page := "/portal/endpoints/" + e.ID
	form := func(ordering string) url.Values {
		return url.Values{"url": {e.URL}, "event_types": {"invoice.*"}, "ordering": {ordering}}
	}
	require.Contains(t, c.get(page).Body, "<dt>Ordering</dt><dd>none")

	p := c.submit(page, page+"/settings", form("fifo"))
	require.Equal(t, 200, p.Status, p.Body)
	got, err := b.db.Store.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.True(t, got.FIFO())
	body := c.get(page).Body
	require.Contains(t, body, "<dt>Ordering</dt><dd>fifo")
	require.Contains(t, body, `<option value="fifo" selected>`, "the form holds it")

	p = c.submit(page, page+"/settings", url.Values{"url": {e.URL}, "description": {"kept"}})
	require.Equal(t, 200, p.Status, p.Body)
	got, err = b.db.Store.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.True(t, got.FIFO(), "a form without the field keeps it")

	for _, bad := range []string{"lifo", ""} {
		p := c.submit(page, page+"/settings", form(bad))
		require.Equal(t, 400, p.Status, bad)
		require.Contains(t, html.UnescapeString(p.Body), `ordering: must be "none" or "fifo"`, bad)
	}
	p = c.submit(page, page+"/settings", form("none"))
	require.Equal(t, 200, p.Status, p.Body)
	got, err = b.db.Store.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.False(t, got.FIFO())
}
