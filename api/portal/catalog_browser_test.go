package portal

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/store"
)

// TestBrowserCatalog: in a real Chromium, the Event types tab opens the
// catalogue page, which shows each type's description, the example open
// and the schema folded (a <details>, no JavaScript). Screenshot:
// docs/portal/event-types.png with HOOKD_PORTAL_SCREENSHOTS=1.
func TestBrowserCatalog(t *testing.T) {
	browser := newBrowser(t)
	b := setup(t, setupOpts{})
	b.catalog(t, testCatalog...)
	tb := b.tab(t, browser, false)
	require.Equal(t, 200, tb.open("/portal/login/"+b.link(t, "acct_a", "", store.PortalRead, time.Hour)))
	require.Equal(t, 200, tb.click(`form[action="/portal/login"] button`))
	require.Equal(t, 200, tb.click(`nav a[href="/portal/event-types"]`))
	text := tb.text()
	require.Contains(t, text, "invoice.paid")
	require.Contains(t, text, "An invoice was paid.")
	require.Contains(t, text, "A customer <b>signed up</b>.", "shown as text, not markup")
	require.Contains(t, text, `"amount": 4200`, "the example is open")
	require.NotContains(t, text, `"required"`, "the schema is folded")
	tb.shot("event-types")
	_, err := chromedp.Run(tb.ctx, chromedp.Click(chromedp.CSS(`#type-invoice\.paid details summary`))) // no navigation
	require.NoError(t, err)
	require.Contains(t, tb.text(), `"required": [`, "the schema unfolds")
}
