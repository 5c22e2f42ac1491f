package portal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/deadletter/replay"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/store"
)

// walkDirEnv names a directory for TestBrowserWalk's screenshots (every
// page in each scheme and width), for a person to look through.
const walkDirEnv = "HOOKD_PORTAL_WALK_DIR"

// TestBrowserWalk walks the portal as a new customer with a manage link
// would, over data the pipeline made (a delivered and a dead-lettered
// delivery, a resend, an operator's replay, the catalogue, a new endpoint
// with its secret shown once): every page answers 200 in the light and
// dark schemes, at desktop and phone width, and none is wider than a
// phone's screen (no sideways scrolling), nor squeezes an attempt's
// response into a column a few letters wide.
func TestBrowserWalk(t *testing.T) {
	w := newBrowserWorld(t)
	b, ctx := w.b, context.Background()
	b.catalog(t, testCatalog...)
	dead, _ := w.deadLetterOfA(t)
	var ok store.Delivery
	wait.For(t, 30*time.Second, "a delivered delivery with its position", func() bool {
		ds, _, err := b.db.Store.DeliveryLog(ctx, store.DeliveryLogParams{Account: "acct_a", EndpointID: w.healthy.ID, Status: "delivered", Limit: 1})
		require.NoError(t, err)
		if len(ds) == 1 && ds[0].RecordOffset != nil {
			ok = ds[0]
			return true
		}
		return false
	})
	be, _ := b.h.backend()
	_, err := replay.ResendDelivery(ctx, be.Replay, replay.DeliveryResend{Account: "acct_a", DeliveryID: ok.ID,
		Actor: "portal:acct_a", Reason: "we lost it"})
	require.NoError(t, err)
	_, err = replay.Run(ctx, be.Replay, replay.Request{Actor: "ops-ann", Reason: "INC-9 receiver outage",
		Filter: replay.Filter{Account: "acct_a"}})
	require.NoError(t, err)

	tb := b.tab(t, w.browser, true) // JavaScript for the width check; the portal sends none
	require.Equal(t, 200, tb.open("/portal/login/"+b.link(t, "acct_a", "", store.PortalManage, time.Hour)))
	require.Equal(t, 200, tb.click(`form[action="/portal/login"] button`))
	tb.set("#new-url", "https://hooks.example.com/new")
	tb.attr(`#new-endpoint input[name="event_type"][value="invoice.paid"]`, "checked", "checked")
	require.Equal(t, 200, tb.click(`form[action="/portal/endpoints"] button`))
	require.Contains(t, tb.text(), "shown this once")
	w.walkShot(t, tb, "created", "desktop-light")

	pages := []struct{ name, path string }{
		{"endpoints", "/portal/"},
		{"endpoints-30d", "/portal/?window=30d"},
		{"endpoint", "/portal/endpoints/" + w.healthy.ID},
		{"endpoint-failing-30d", "/portal/endpoints/" + w.ea.ID + "?window=30d"},
		{"deliveries", "/portal/deliveries"},
		{"delivery-delivered", "/portal/deliveries/" + ok.ID},
		{"delivery-dead", "/portal/deliveries/" + dead.ID},
		{"replays", "/portal/replays"},
		{"event-types", "/portal/event-types"},
		{"policy", "/portal/policy"},
	}
	for _, mode := range []struct {
		name        string
		phone, dark bool
	}{{"desktop-light", false, false}, {"desktop-dark", false, true}, {"phone-light", true, false}, {"phone-dark", true, true}} {
		if mode.phone {
			tb.phone()
		}
		if mode.dark {
			tb.dark()
		}
		for _, p := range pages {
			require.Equal(t, 200, tb.open(p.path), p.path)
			if mode.phone {
				wide, err := chromedp.Run(tb.ctx, chromedp.Evaluate[bool](
					`document.documentElement.scrollWidth > document.documentElement.clientWidth`))
				require.NoError(t, err)
				require.False(t, wide, "%s scrolls sideways on a phone (%s)", p.path, mode.name)
				if p.name == "delivery-delivered" {
					// An attempt's response excerpt takes the row's width,
					// not a third of it beside "Sent to" and the hash.
					px, err := chromedp.Run(tb.ctx, chromedp.Evaluate[float64](
						`document.querySelector('tr.detail pre').getBoundingClientRect().width`))
					require.NoError(t, err)
					require.Greater(t, px, 250.0, "the response excerpt is squeezed on a phone")
				}
			}
			w.walkShot(t, tb, p.name, mode.name)
		}
	}
}

func (w *browserWorld) walkShot(t *testing.T, tb *tab, page, mode string) {
	t.Helper()
	dir := os.Getenv(walkDirEnv)
	if dir == "" {
		return
	}
	png, err := chromedp.Run(tb.ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%s.png", page, mode)), png, 0o644))
}
