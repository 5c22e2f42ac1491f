package portal

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/store"
)

// The settings form's checkbox turns send_traceparent on and off; a form
// without it (an older page) keeps it; the endpoint page says which.
func TestSettingsFormEditsSendTraceparent(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx := context.Background()
	e := b.endpoint(t, "acct_a", "https://a.example.com/hook", "invoice.*")
	c := b.client(t)
	require.Equal(t, 200, c.login(b.link(t, "acct_a", "", store.PortalManage, time.Hour)).Status)
	page := "/portal/endpoints/" + e.ID
	require.Contains(t, c.get(page).Body, "<dt>Trace context</dt><dd>not sent</dd>")
	sends := func() bool {
		got, err := b.db.Store.GetEndpoint(ctx, e.ID)
		require.NoError(t, err)
		return got.SendTraceparent
	}
	form := url.Values{"url": {e.URL}, "event_types": {"invoice.*"}, "trace_form": {"1"}, "send_traceparent": {"on"}}
	p := c.submit(page, page+"/settings", form)
	require.Equal(t, 200, p.Status, p.Body)
	require.True(t, sends())
	body := c.get(page).Body
	require.Contains(t, body, "<code>traceparent</code> sent")
	require.Contains(t, body, `name="send_traceparent" value="on" checked>`)

	p = c.submit(page, page+"/settings", url.Values{"url": {e.URL}, "description": {"kept"}})
	require.Equal(t, 200, p.Status, p.Body)
	require.True(t, sends(), "a form without the checkbox keeps it")

	form.Del("send_traceparent") // unchecked
	p = c.submit(page, page+"/settings", form)
	require.Equal(t, 200, p.Status, p.Body)
	require.False(t, sends())
}
