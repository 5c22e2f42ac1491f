package portal

import (
	"context"
	"encoding/json"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/eventtype"
	"github.com/hookd/hookd/store"
)

// catalog fills the event-type catalogue for a test.
func (b *bundle) catalog(t testing.TB, types ...eventtype.Type) {
	t.Helper()
	for _, et := range types {
		_, err := b.db.Store.CreateEventType(context.Background(), et)
		require.NoError(t, err)
	}
}

var testCatalog = []eventtype.Type{
	{Name: "invoice.paid", Description: "An invoice was paid.", Schema: []byte(`{"type":"object","required":["invoice"]}`),
		Example: []byte(`{"invoice":"in_123","amount":4200}`)},
	{Name: "customer.created", Description: "A customer <b>signed up</b>.", Deprecated: true},
}

// The endpoint settings form offers the catalogue's types as checkboxes
// (the subscribed ones ticked) and keeps free patterns in the text box;
// saving merges both. The test-event form suggests the types, and a test
// event of a type with an example carries the example as its data; one
// without, the portal's note.
func TestCatalogInEndpointForms(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.catalog(t, testCatalog...)
	e := b.endpoint(t, "acct_a", "https://a.example.com/hook", "invoice.paid", "order.*")
	c := b.client(t)
	require.Equal(t, 200, c.login(b.link(t, "acct_a", "", store.PortalManage, time.Hour)).Status)

	p := c.get("/portal/endpoints/" + e.ID)
	require.Equal(t, 200, p.Status)
	require.Contains(t, p.Body, `<input type="checkbox" name="event_type" value="invoice.paid" checked>`)
	require.Contains(t, p.Body, `<input type="checkbox" name="event_type" value="customer.created">`)
	require.Contains(t, p.Body, `A customer &lt;b&gt;signed up&lt;/b&gt;.`)
	require.Regexp(t, `<textarea id="event_types" name="event_types" rows="3">order\.\*</textarea>`, p.Body, "only the free pattern in the box")
	require.Contains(t, p.Body, `<datalist id="catalog-types"><option value="customer.created"><option value="invoice.paid"></datalist>`)

	p = c.submit("/portal/endpoints/"+e.ID, "/portal/endpoints/"+e.ID+"/settings", url.Values{"url": {e.URL},
		"event_type": {"customer.created", "invoice.paid"}, "event_types": {"order.*\ninvoice.paid"}})
	require.Equal(t, 200, p.Status, p.Body)
	got, err := b.db.Store.GetEndpoint(context.Background(), e.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"customer.created", "invoice.paid", "order.*"}, got.EventTypes, "ticked, then free, each once")

	for _, typ := range []string{"invoice.paid", "order.shipped"} {
		p = c.submit("/portal/endpoints/"+e.ID, "/portal/endpoints/"+e.ID+"/test", url.Values{"type": {typ}})
		require.Equal(t, 200, p.Status, p.Body)
	}
	data := testEventData(t, b, 2)
	require.JSONEq(t, `{"invoice":"in_123","amount":4200}`, data["invoice.paid"], "the catalogue's example")
	require.Contains(t, data["order.shipped"], `"test":true`, "no example: the portal's note")
}

// testEventData reads n test deliveries off the deliveries topic: the data
// of each, by event type.
func testEventData(t *testing.T, b *bundle, n int) map[string]string {
	t.Helper()
	cl := b.cluster.Client(t, kgo.ConsumeTopics(b.names.Deliveries), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	out := map[string]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "only %d of %d test deliveries", len(out), n)
		fs.EachRecord(func(r *kgo.Record) {
			d, err := delivery.Decode(r)
			require.NoError(t, err)
			var body struct{ Data json.RawMessage }
			require.NoError(t, json.Unmarshal(d.Body, &body))
			out[d.EventType] = string(body.Data)
		})
	}
	return out
}

// The catalogue page lists every type with its description (escaped),
// deprecated flag, schema and example, for a read-only link too.
func TestCatalogPage(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	c := b.client(t)
	require.Equal(t, 200, c.login(b.link(t, "acct_a", "", store.PortalRead, time.Hour)).Status)
	p := c.get("/portal/event-types")
	require.Equal(t, 200, p.Status)
	require.Contains(t, p.Body, "No event types are listed yet.")
	b.catalog(t, testCatalog...)
	p = c.get("/portal/event-types")
	require.Equal(t, 200, p.Status)
	require.Contains(t, p.Body, `<a href="/portal/event-types" aria-current="page">Event types</a>`)
	require.Contains(t, p.Body, `id="type-invoice.paid"`)
	require.Contains(t, p.Body, "An invoice was paid.")
	require.Contains(t, p.Body, "&#34;invoice&#34;: &#34;in_123&#34;", "the example, indented")
	require.Contains(t, p.Body, "&#34;required&#34;: [", "the schema, indented")
	require.Contains(t, p.Body, `A customer &lt;b&gt;signed up&lt;/b&gt;.`)
	require.Contains(t, p.Body, `deprecated</span>`)
	require.Contains(t, p.Body, "No schema.")
}
