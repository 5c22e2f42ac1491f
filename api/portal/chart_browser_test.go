package portal

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/store"
)

// TestBrowserChart: in a real Chromium, with the portal's CSP and
// JavaScript off for the page, the chart's bars take their colours from
// portal.css in both colour schemes (an unstyled SVG rect is black), and
// differ between them. Screenshots: docs/portal/chart.png and
// chart-dark.png with HOOKD_PORTAL_SCREENSHOTS=1.
func TestBrowserChart(t *testing.T) {
	browser := newBrowser(t)
	b := setup(t, setupOpts{})
	e := b.endpoint(t, "acct_chart", "https://a.example.com/hooks")
	now := time.Now()
	for i := range 60 {
		// A day's shape: more traffic and slower answers in some hours.
		h := i % 24
		b.delivered(t, e, fmt.Sprintf("evt_b_%d", i), now.Add(-time.Duration(h)*time.Hour), time.Duration(20+h*h)*time.Millisecond)
	}
	for i := range 4 {
		b.deadLetter(t, e, fmt.Sprintf("evt_b_dead_%d", i))
	}
	tb := b.tab(t, browser, false)
	require.Equal(t, 200, tb.open("/portal/login/"+b.link(t, "acct_chart", "", store.PortalRead, time.Hour)))
	require.Equal(t, 200, tb.click(`form[action="/portal/login"] button`))
	require.Equal(t, 200, tb.open("/portal/endpoints/"+e.ID))
	require.Contains(t, tb.text(), "Attempts per hour: 60 delivered, 8 failed in the last 24 hours")
	light := tb.fills()
	tb.shot("chart")
	tb.dark()
	require.Equal(t, 200, tb.open("/portal/endpoints/"+e.ID))
	dark := tb.fills()
	tb.shot("chart-dark")
	for k, v := range light {
		require.NotEqual(t, "rgb(0, 0, 0)", v, "%s is unstyled in the light scheme", k)
		require.NotEqual(t, "rgb(0, 0, 0)", dark[k], "%s is unstyled in the dark scheme", k)
		require.NotEqual(t, v, dark[k], "%s reads the same in both schemes", k)
	}
}

// fills are the computed fill colours of the chart's bars and axis text.
func (tb *tab) fills() map[string]string {
	tb.t.Helper()
	out := map[string]string{}
	for _, sel := range []string{"svg.chart rect.ok", "svg.chart rect.bad", "svg.chart rect.p50", "svg.chart text.axis"} {
		props, err := chromedp.Run(tb.ctx, chromedp.ComputedStyle(chromedp.CSS(sel)))
		require.NoError(tb.t, err)
		for _, p := range props {
			if p.Name == "fill" {
				out[sel] = p.Value
			}
		}
		require.NotEmpty(tb.t, out[sel], "no fill for %s", sel)
	}
	return out
}
