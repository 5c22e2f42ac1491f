package portal

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/retrytiers"
	"github.com/hookd/hookd/store"
)

// screenshotsEnv, set to 1, makes the browser tests write a screenshot of
// each page to docs/portal/ (off in CI, so the tree stays clean).
const screenshotsEnv = "HOOKD_PORTAL_SCREENSHOTS"

// chromium returns the browser to drive. Missing, the test fails when it
// runs as root (scripts/ensure-deps.sh installs Debian's chromium then)
// and is skipped otherwise, saying how to install it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getuid() == 0 {
		t.Fatal("chromium not installed: scripts/ensure-deps.sh installs it (apt-get install chromium)")
	}
	t.Skip("chromium not installed (Debian: apt-get install chromium, or run scripts/ensure-deps.sh as root): the portal's browser tests did not run")
	return ""
}

// newBrowser starts a headless Chromium with a fresh profile for t.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	bctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(cancelB)
	require.NoError(t, chromedp.Do(bctx)) // starts the browser
	return bctx
}

// tab is one browser profile's tab (its own cookies), with or without
// JavaScript.
type tab struct {
	t    *testing.T
	ctx  context.Context
	base string
}

func (b *bundle) tab(t *testing.T, browser context.Context, js bool) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: !js})
		return err
	})))
	return &tab{t: t, ctx: ctx, base: b.srv.URL}
}

func (tb *tab) run(steps ...chromedp.Action[chromedp.Void]) int {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, steps...)
	require.NoError(tb.t, err)
	require.NotNil(tb.t, resp)
	return int(resp.Status)
}

// open loads path and returns the HTTP status of the page.
func (tb *tab) open(path string) int {
	tb.t.Helper()
	return tb.run(chromedp.Navigate(tb.base + path))
}

// click clicks sel (a button or link) and returns the status of the page
// it leads to.
func (tb *tab) click(sel string) int {
	tb.t.Helper()
	return tb.run(chromedp.Click(chromedp.CSS(sel)))
}

// set sets the value attribute of the input sel: what a person typing in
// an untouched field does, without JavaScript.
func (tb *tab) set(sel, value string) {
	tb.t.Helper()
	require.NoError(tb.t, chromedp.Do(tb.ctx, chromedp.SetAttributeValue(chromedp.CSS(sel), "value", value)))
}

func (tb *tab) attr(sel, name, value string) {
	tb.t.Helper()
	require.NoError(tb.t, chromedp.Do(tb.ctx, chromedp.SetAttributeValue(chromedp.CSS(sel), name, value)))
}

// text is the page's text. Right after a navigation the browser may
// still answer about the previous document's nodes: that read is retried.
func (tb *tab) text() string {
	tb.t.Helper()
	var s string
	wait.For(tb.t, 10*time.Second, "the page's text", func() bool {
		var err error
		s, err = chromedp.Run(tb.ctx, chromedp.Text(chromedp.CSS("body")))
		if err != nil && strings.Contains(err.Error(), "No node with given id") {
			return false
		}
		require.NoError(tb.t, err)
		return true
	})
	return s
}

// url is the address the tab shows.
func (tb *tab) url() string {
	tb.t.Helper()
	u, err := chromedp.Run(tb.ctx, func(ctx context.Context, tg *chromedp.Target) (string, error) {
		h, err := cdp.Call(ctx, tg, cdppage.GetNavigationHistory, cdp.Empty{})
		if err != nil {
			return "", err
		}
		return h.Entries[h.CurrentIndex].URL, nil
	})
	require.NoError(tb.t, err)
	return u
}

// shot writes a screenshot of the page to docs/portal/name.png when
// HOOKD_PORTAL_SCREENSHOTS=1.
func (tb *tab) shot(name string) {
	tb.t.Helper()
	if os.Getenv(screenshotsEnv) != "1" {
		return
	}
	png, err := chromedp.Run(tb.ctx, chromedp.FullScreenshot(100))
	require.NoError(tb.t, err)
	dir := filepath.Join("..", "..", "docs", "portal")
	require.NoError(tb.t, os.MkdirAll(dir, 0o755))
	require.NoError(tb.t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}

// phone switches the tab to a phone's viewport; dark to a dark color
// scheme.
func (tb *tab) phone() {
	tb.t.Helper()
	require.NoError(tb.t, chromedp.Do(tb.ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile)))
}

func (tb *tab) dark() {
	tb.t.Helper()
	require.NoError(tb.t, chromedp.Do(tb.ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
		return err
	})))
}

// browserWorld is the data the browser flows run against: account A's
// endpoint on a real receiver, and account B.
type browserWorld struct {
	b        *bundle
	rc       *receiver
	ea, eb   endpoint.Endpoint
	healthy  endpoint.Endpoint
	browser  context.Context
	deadOfB  store.Delivery
	deadOfA  store.Delivery
	eventOfA string
}

func newBrowserWorld(t *testing.T) *browserWorld {
	t.Helper()
	browser := newBrowser(t)
	b := setup(t, setupOpts{cfg: Config{Name: "Acme Billing"}})
	b.startPipeline(t)
	w := &browserWorld{b: b, browser: browser}
	secret := endpoint.NewSecret()
	w.rc = newReceiver(t, secret)
	ctx := context.Background()
	var err error
	w.ea, err = b.db.Store.CreateEndpoint(ctx, endpoint.Endpoint{ID: endpoint.NewID(), Account: "acct_a", URL: w.rc.srv.URL + "/webhooks",
		Description: "billing events", Secrets: []string{secret}, EventTypes: []string{"invoice.*"}})
	require.NoError(t, err)
	ok := newReceiver(t, secret)
	ok.setFail(false)
	w.healthy, err = b.db.Store.CreateEndpoint(ctx, endpoint.Endpoint{ID: endpoint.NewID(), Account: "acct_a", URL: ok.srv.URL + "/hooks/customers",
		Secrets: []string{secret}, EventTypes: []string{"customer.created", "customer.updated"}})
	require.NoError(t, err)
	for range 3 {
		_, err := b.h.sendTest(ctx, w.healthy, "customer.created", "seed")
		require.NoError(t, err)
	}
	w.eb = b.endpoint(t, "acct_b", "https://b.example.com/hook")
	w.deadOfB = b.deadLetter(t, w.eb, "evt_b1")
	return w
}

// deadLetterOfA sends an event to A's failing receiver through the
// pipeline and waits for it to be dead-lettered.
func (w *browserWorld) deadLetterOfA(t *testing.T) (store.Delivery, string) {
	t.Helper()
	w.rc.setFail(true)
	evt, err := w.b.h.sendTest(context.Background(), w.ea, "invoice.payment_failed", "seed")
	require.NoError(t, err)
	var d store.Delivery
	wait.For(t, 30*time.Second, "the event to be dead-lettered", func() bool {
		ds, err := w.b.db.Store.DeliveriesOfEvent(context.Background(), "acct_a", evt)
		require.NoError(t, err)
		if len(ds) == 1 && ds[0].Status == "dead" && ds[0].DLQOffset != nil {
			d = ds[0]
			return true
		}
		return false
	})
	return d, evt
}

// The browser flows, with JavaScript on and off: a customer link
// opens the portal and shows a dead-lettered delivery with its attempts;
// Replay with a reason brings the same webhook-id to the receiver, which
// verifies its signature; the audit shows the actor. Account B gets 404
// for A's ids by URL and by form; a POST without the CSRF token changes
// nothing; an expired or reused link is refused.
func TestBrowserFlows(t *testing.T) {
	w := newBrowserWorld(t)
	for _, js := range []bool{false, true} {
		t.Run(fmt.Sprintf("javascript=%v", js), func(t *testing.T) {
			w.customerReplays(t, js)
			w.otherAccountGets404(t, js)
			w.postWithoutCSRFChangesNothing(t, js)
			w.badLinksAreRefused(t, js)
		})
	}
}

func (w *browserWorld) customerReplays(t *testing.T, js bool) {
	d, evt := w.deadLetterOfA(t)
	token := w.b.link(t, "acct_a", "", store.PortalManage, time.Hour)
	tb := w.b.tab(t, w.browser, js)
	require.Equal(t, 200, tb.open("/portal/login/"+token))
	tb.shot("continue")
	require.Contains(t, tb.text(), "acct_a")
	require.Equal(t, 200, tb.click(`form[action="/portal/login"] button`))
	require.Equal(t, w.b.srv.URL+"/portal/", tb.url(), "a clean URL, without the token")
	require.Contains(t, tb.text(), w.ea.URL)
	tb.shot("endpoints")

	require.Equal(t, 200, tb.open("/portal/endpoints/"+w.ea.ID))
	require.Contains(t, tb.text(), "Recent dead letters")
	tb.shot("endpoint")
	require.Equal(t, 200, tb.open("/portal/deliveries?status=dead"))
	tb.shot("deliveries")
	require.Equal(t, 200, tb.click(`a[href="/portal/deliveries/`+d.ID+`"]`))
	detail := tb.text()
	require.Contains(t, detail, evt)
	require.Contains(t, detail, "retries_exhausted")
	require.Contains(t, detail, "receiver says Service Unavailable")
	require.Contains(t, detail, "retry 1s", "the attempts, by tier")
	tb.shot("delivery")

	w.rc.setFail(false)
	tb.set("#reason", "receiver fixed, resend please")
	require.Equal(t, 200, tb.click(`form[action$="/replay"] button`))
	require.Contains(t, tb.text(), "started")
	wait.For(t, 30*time.Second, "the replayed webhook-id at the receiver", func() bool { return w.rc.delivered(evt) })
	wait.For(t, 30*time.Second, "the delivery to show delivered", func() bool {
		got, err := w.b.db.Store.GetDelivery(context.Background(), "acct_a", d.ID)
		require.NoError(t, err)
		return got.Status == "delivered"
	})
	require.Equal(t, 200, tb.open("/portal/deliveries/"+d.ID))
	require.Contains(t, tb.text(), "replay")
	require.Equal(t, 200, tb.open("/portal/replays"))
	audit := tb.text()
	require.Contains(t, audit, "acct_a via portal link")
	require.Contains(t, audit, "receiver fixed, resend please")
	tb.shot("replays")
	if !js {
		w.deadOfA, w.eventOfA = d, evt
		tb.dark()
		require.Equal(t, 200, tb.open("/portal/endpoints/"+w.ea.ID))
		tb.shot("endpoint-dark")
		tb.phone()
		require.Equal(t, 200, tb.open("/portal/deliveries"))
		tb.shot("deliveries-phone")
	}
}

func (w *browserWorld) otherAccountGets404(t *testing.T, js bool) {
	a := w.deadOfA
	if a.ID == "" {
		a = w.b.deadLetter(t, w.ea, "evt_a_other")
	}
	tb := w.b.tab(t, w.browser, js)
	require.Equal(t, 200, tb.open("/portal/login/"+w.b.link(t, "acct_b", "", store.PortalManage, time.Hour)))
	require.Equal(t, 200, tb.click(`form[action="/portal/login"] button`))
	for _, path := range []string{"/portal/deliveries/" + a.ID, "/portal/endpoints/" + w.ea.ID} {
		require.Equal(t, 404, tb.open(path), path)
		require.Contains(t, tb.text(), "Not found")
		require.NotContains(t, tb.text(), w.ea.URL)
	}
	// By form: B's own replay form, pointed at A's delivery.
	require.Equal(t, 200, tb.open("/portal/deliveries/"+w.deadOfB.ID))
	tb.attr(`form[action$="/replay"]`, "action", "/portal/deliveries/"+a.ID+"/replay")
	tb.set("#reason", "not mine")
	require.Equal(t, 404, tb.click(`form[action$="/replay"] button`))
	rs, err := w.b.db.Store.ListReplays(context.Background(), store.ListReplaysParams{Account: "acct_b"})
	require.NoError(t, err)
	require.Empty(t, rs, "B replayed nothing")
	// And B's disable button pointed at A's endpoint.
	require.Equal(t, 200, tb.open("/portal/endpoints/"+w.eb.ID))
	tb.attr(`form[action$="/status"]`, "action", "/portal/endpoints/"+w.ea.ID+"/status")
	require.Equal(t, 404, tb.click(`form[action$="/status"] button`))
	got, err := w.b.db.Store.GetEndpoint(context.Background(), w.ea.ID)
	require.NoError(t, err)
	require.True(t, got.Active(), "A's endpoint untouched")
}

func (w *browserWorld) postWithoutCSRFChangesNothing(t *testing.T, js bool) {
	tb := w.b.tab(t, w.browser, js)
	require.Equal(t, 200, tb.open("/portal/login/"+w.b.link(t, "acct_a", "", store.PortalManage, time.Hour)))
	require.Equal(t, 200, tb.click(`form[action="/portal/login"] button`))
	require.Equal(t, 200, tb.open("/portal/endpoints/"+w.ea.ID))
	tb.attr(`form[action$="/status"] input[name="csrf"]`, "value", "")
	require.Equal(t, 403, tb.click(`form[action$="/status"] button`))
	require.Contains(t, tb.text(), "Form refused")
	got, err := w.b.db.Store.GetEndpoint(context.Background(), w.ea.ID)
	require.NoError(t, err)
	require.True(t, got.Active(), "the endpoint was not disabled")
	// The same button with its token works.
	require.Equal(t, 200, tb.open("/portal/endpoints/"+w.ea.ID))
	require.Equal(t, 200, tb.click(`form[action$="/status"] button`))
	require.Contains(t, tb.text(), "Endpoint disabled")
	require.Equal(t, 200, tb.click(`form[action$="/status"] button`))
	require.Contains(t, tb.text(), "Endpoint enabled")
}

func (w *browserWorld) badLinksAreRefused(t *testing.T, js bool) {
	tb := w.b.tab(t, w.browser, js)
	expired := w.b.link(t, "acct_a", "", store.PortalRead, -time.Minute)
	require.Equal(t, 410, tb.open("/portal/login/"+expired))
	require.Contains(t, tb.text(), "This link has expired")
	tb.shot("link-expired")
	used := w.b.link(t, "acct_a", "", store.PortalRead, time.Hour)
	require.Equal(t, 200, tb.open("/portal/login/"+used))
	require.Equal(t, 200, tb.click(`form[action="/portal/login"] button`))
	other := w.b.tab(t, w.browser, js)
	require.Equal(t, 410, other.open("/portal/login/"+used))
	require.Contains(t, other.text(), "already used")
	require.Equal(t, 401, other.open("/portal/deliveries"))
	require.True(t, strings.Contains(other.text(), "Sign in"), other.text())
}

// Support staff, in the browser: sign in with the admin token (a form),
// search, act on behalf of an account.
func TestBrowserSupport(t *testing.T) {
	browser := newBrowser(t)
	b := setup(t, setupOpts{schedule: retrytiers.DefaultSchedule})
	e := b.endpoint(t, "acct_a", "https://a.example.com/hook")
	d := b.deadLetter(t, e, "evt_support")
	tb := b.tab(t, browser, false)
	require.Equal(t, 200, tb.open("/portal/support/login"))
	tb.shot("support-login")
	tb.set("#token", testAdminToken)
	require.Equal(t, 200, tb.click(`form[action="/portal/support/login"] button`))
	require.Equal(t, b.srv.URL+"/portal/support", tb.url(), "the token is never in a URL")
	require.Equal(t, 200, tb.open("/portal/support?q=evt_support"))
	require.Contains(t, tb.text(), "Open as acct_a")
	tb.shot("support")
	require.Equal(t, 200, tb.click(`form[action="/portal/support/act"] button`))
	require.Equal(t, b.srv.URL+"/portal/deliveries/"+d.ID, tb.url())
	require.Contains(t, tb.text(), "support on behalf of acct_a")
	require.Equal(t, 200, tb.open("/portal/policy"))
	require.Contains(t, tb.text(), "24h")
	tb.shot("policy")
}
