package portal

import (
	"context"
	"net/netip"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/store"
)

// fakeDNS answers from a map, as the API tests' resolver does.
type fakeDNS map[string][]netip.Addr

func (f fakeDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return f[host], nil
}

// Issue 32: a manage link creates an endpoint (its secret shown once) and
// deletes it; the URL and SSRF rules are the API's (a private destination
// and a missing event type are refused, naming the field); a read-only
// link has no such forms, and its POST is refused. The form offers the
// catalogue's types as checkboxes beside free patterns, as the settings
// form does; neither ticked nor typed is refused naming the form's field.
func TestBrowserEndpointCreateAndDelete(t *testing.T) {
	browser := newBrowser(t)
	b := setup(t, setupOpts{cfg: Config{Name: "Acme Billing"}})
	b.catalog(t, testCatalog...)
	b.h.cfg.AllowPrivateNetworks = false
	b.h.resolver = fakeDNS{"hooks.example.com": {netip.MustParseAddr("93.184.216.34")},
		"internal.example.com": {netip.MustParseAddr("10.0.0.7")}}
	ctx := context.Background()

	tb := b.tab(t, browser, false)
	require.Equal(t, 200, tb.open("/portal/login/"+b.link(t, "acct_a", "", store.PortalManage, time.Hour)))
	require.Equal(t, 200, tb.click(`form[action="/portal/login"] button`))
	require.Contains(t, tb.text(), "New endpoint")
	tb.shot("endpoint-new")

	// A private destination: refused as the API refuses it.
	tb.set("#new-url", "https://internal.example.com/hook")
	tb.set("#new-types", "invoice.*")
	require.Equal(t, 400, tb.click(`form[action="/portal/endpoints"] button`))
	require.Contains(t, tb.text(), "private and internal destinations are refused")
	eps, err := b.db.Store.ListEndpoints(ctx, store.ListEndpointsParams{Account: "acct_a"})
	require.NoError(t, err)
	require.Empty(t, eps)

	// No type ticked or typed: refused, naming the form's fields.
	require.Equal(t, 200, tb.open("/portal/"))
	require.Contains(t, tb.text(), "Event types from the catalogue")
	tb.set("#new-url", "https://hooks.example.com/billing")
	require.Equal(t, 400, tb.click(`form[action="/portal/endpoints"] button`))
	require.Contains(t, tb.text(), "event types: tick at least one type, or enter one or a pattern")

	require.Equal(t, 200, tb.open("/portal/"))
	tb.set("#new-url", "https://hooks.example.com/billing")
	tb.set("#new-description", "billing events")
	tb.attr(`#new-endpoint input[name="event_type"][value="invoice.paid"]`, "checked", "checked")
	tb.set("#new-types", "invoice.*, customer.created")
	require.Equal(t, 200, tb.click(`form[action="/portal/endpoints"] button`))
	page := tb.text()
	require.Contains(t, page, "Endpoint created")
	secret := regexp.MustCompile(`whsec_[A-Za-z0-9+/=]+`).FindString(page)
	require.NotEmpty(t, secret, "the secret, shown once")
	eps, err = b.db.Store.ListEndpoints(ctx, store.ListEndpointsParams{Account: "acct_a"})
	require.NoError(t, err)
	require.Len(t, eps, 1)
	e := eps[0]
	require.Equal(t, "https://hooks.example.com/billing", e.URL)
	require.Equal(t, []string{"invoice.paid", "invoice.*", "customer.created"}, e.EventTypes, "ticked, then typed")
	require.Equal(t, []string{secret}, e.Secrets)
	require.Contains(t, tb.url(), "/portal/endpoints/"+e.ID)
	tb.shot("endpoint-created")
	require.Equal(t, 200, tb.open("/portal/endpoints/"+e.ID))
	require.NotContains(t, tb.text(), secret, "shown once only")

	// Delete: the box must be ticked (the browser insists; so does the server).
	mc := b.client(t)
	require.Equal(t, 200, mc.login(b.link(t, "acct_a", "", store.PortalManage, time.Hour)).Status)
	p := mc.submit("/portal/endpoints/"+e.ID, "/portal/endpoints/"+e.ID+"/delete", url.Values{})
	require.Contains(t, p.Body, "Tick the confirmation box")
	_, err = b.db.Store.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	tb.attr(`#delete input[name="confirm"]`, "checked", "checked")
	require.Equal(t, 200, tb.click(`form[action$="/delete"] button`))
	require.Contains(t, tb.text(), "deleted")
	_, err = b.db.Store.GetEndpoint(ctx, e.ID)
	require.ErrorIs(t, err, store.ErrNotFound)

	// A read-only link: no forms, and the action is refused.
	ro := b.client(t)
	require.Equal(t, 200, ro.login(b.link(t, "acct_a", "", store.PortalRead, time.Hour)).Status)
	home := ro.get("/portal/")
	require.NotContains(t, home.Body, `action="/portal/endpoints"`)
	m := csrfRe.FindStringSubmatch(home.Body)
	require.NotNil(t, m)
	p = ro.post("/portal/endpoints", map[string][]string{"csrf": {m[1]}, "url": {"https://hooks.example.com/x"}, "event_types": {"*"}})
	require.Equal(t, 403, p.Status)
	eps, err = b.db.Store.ListEndpoints(ctx, store.ListEndpointsParams{Account: "acct_a"})
	require.NoError(t, err)
	require.Empty(t, eps)
}
