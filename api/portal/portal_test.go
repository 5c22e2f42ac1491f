package portal

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/api"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/store"
)

// A link opens the portal once, sets an HttpOnly cookie, lands on a URL
// without the token, and every page renders with the security headers.
func TestLinkOpensEveryPage(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	e := b.endpoint(t, "acct_a", "https://a.example.com/hook", "invoice.*")
	d := b.deadLetter(t, e, "evt_a1")
	token := b.link(t, "acct_a", "", store.PortalManage, time.Hour)

	c := b.client(t)
	// The link page only asks to continue: fetching it twice (a scanner)
	// uses nothing up.
	require.Equal(t, 200, c.get("/portal/login/"+token).Status)
	p := c.login(token)
	require.Equal(t, 200, p.Status, p.Body)
	require.Equal(t, b.srv.URL+"/portal/", p.URL, "lands on a URL without the token")
	require.Contains(t, p.Body, e.URL)
	require.NotContains(t, b.logs.String(), token, "link tokens are never logged")

	cookies := c.c.Jar.Cookies(mustURL(t, b.srv.URL+"/portal/"))
	require.Len(t, cookies, 1)
	require.Equal(t, "hookd_portal", cookies[0].Name, "plain name over http")

	for _, path := range []string{"/portal/", "/portal/endpoints/" + e.ID, "/portal/endpoints/" + e.ID + "?window=30d",
		"/portal/deliveries", "/portal/deliveries?status=dead&range=24h&endpoint=" + e.ID, "/portal/deliveries/" + d.ID,
		"/portal/replays", "/portal/policy"} {
		p := c.get(path)
		require.Equal(t, 200, p.Status, path+"\n"+p.Body)
		require.Equal(t, "no-store", p.Header.Get("Cache-Control"), path)
		require.Equal(t, "no-referrer", p.Header.Get("Referrer-Policy"), path)
		require.Equal(t, "DENY", p.Header.Get("X-Frame-Options"), path)
		require.Contains(t, p.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'", path)
		require.NotContains(t, p.Body, "<script", path)
	}
	css := c.get("/portal/static/portal.css")
	require.Equal(t, 200, css.Status)
	require.Contains(t, css.Header.Get("Content-Type"), "text/css")
	require.Contains(t, css.Body, "prefers-color-scheme: dark")
	require.Equal(t, 404, c.get("/portal/static/").Status, "no directory listing")
	require.Equal(t, 404, c.get("/portal/nope").Status)

	detail := c.get("/portal/deliveries/" + d.ID).Body
	for _, want := range []string{"evt_a1", "retries_exhausted", "upstream unavailable", "&#34;amount&#34;: 42", "503", "retry 1s"} {
		require.Contains(t, detail, want)
	}
	require.NotContains(t, html.UnescapeString(detail), e.Secrets[0], "secrets never appear in pages")
	require.Contains(t, c.get("/portal/deliveries?code=5xx").Body, d.ID)
	require.NotContains(t, c.get("/portal/deliveries?code=2xx").Body, d.ID)
	require.NotContains(t, c.get("/portal/deliveries?status=delivered").Body, d.ID)
	page := html.UnescapeString(c.get("/portal/endpoints/" + e.ID).Body)
	require.NotContains(t, page, e.Secrets[0])
	// Recover starts filled in (when the failures began, here): no ISO
	// timestamp to type (issue 32).
	require.Regexp(t, `name="since" value="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"`, page)

	// The link is used up; the session goes on.
	c2 := b.client(t)
	require.Equal(t, 410, c2.login(token).Status)
	require.Equal(t, 200, c.get("/portal/deliveries").Status)
}

func mustURL(t testing.TB, s string) *url.URL {
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}

// An expired, reused or unknown link gets a page that says so and what to
// do; none of them signs in.
func TestExpiredReusedAndUnknownLinks(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.endpoint(t, "acct_a", "https://a.example.com/hook")
	expired := b.link(t, "acct_a", "", store.PortalRead, -time.Minute)
	c := b.client(t)
	p := c.get("/portal/login/" + expired)
	require.Equal(t, 410, p.Status)
	require.Contains(t, p.Body, "This link has expired")
	require.Contains(t, p.Body, "new link")

	// Expiring between the page and the button.
	soon := b.link(t, "acct_a", "", store.PortalRead, time.Hour)
	page := c.get("/portal/login/" + soon)
	require.Equal(t, 200, page.Status)
	_, err := b.db.Store.Pool().Exec(context.Background(), `UPDATE webhooks.portal_links SET expires_at = now() - interval '1s'`)
	require.NoError(t, err)
	p = c.post("/portal/login", url.Values{"csrf": {csrfRe.FindStringSubmatch(page.Body)[1]}, "token": {soon}})
	require.Equal(t, 410, p.Status)
	require.Contains(t, p.Body, "This link has expired")

	fresh := b.link(t, "acct_a", "", store.PortalRead, time.Hour)
	require.Equal(t, 200, b.client(t).login(fresh).Status)
	p = b.client(t).login(fresh)
	require.Equal(t, 410, p.Status)
	require.Contains(t, p.Body, "already used")

	// Sign-ins prune what ended more than a day before.
	_, err = b.db.Store.Pool().Exec(context.Background(), `UPDATE webhooks.portal_links SET expires_at = now() - interval '3 days' WHERE used_at IS NULL`)
	require.NoError(t, err)
	require.Equal(t, 200, b.client(t).login(b.link(t, "acct_a", "", store.PortalRead, time.Hour)).Status)
	var left int
	require.NoError(t, b.db.Store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM webhooks.portal_links WHERE expires_at < now() - interval '2 days'`).Scan(&left))
	require.Zero(t, left)

	p = c.get("/portal/login/hpl_" + strings.Repeat("A", 43))
	require.Equal(t, 404, p.Status)
	require.Contains(t, p.Body, "not valid")
	require.Equal(t, 404, c.get("/portal/login/%00junk").Status)
	require.Equal(t, 401, c.get("/portal/deliveries").Status, "none of them signed in")
}

// Sign-out revokes the session: the old cookie is refused afterwards.
func TestSignOutAndSessionLimits(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{cfg: Config{SessionIdle: time.Minute, SessionMax: time.Hour}})
	b.endpoint(t, "acct_a", "https://a.example.com/hook")
	c := b.client(t)
	require.Equal(t, 200, c.login(b.link(t, "acct_a", "", store.PortalRead, time.Hour)).Status)
	cookies := c.c.Jar.Cookies(mustURL(t, b.srv.URL+"/portal/"))
	p := c.submit("/portal/", "/portal/logout", url.Values{})
	require.Equal(t, 200, p.Status)
	require.Contains(t, p.Body, "signed out")
	c.c.Jar.SetCookies(mustURL(t, b.srv.URL+"/portal/"), cookies)
	p = c.get("/portal/deliveries")
	require.Equal(t, 401, p.Status)
	require.Contains(t, p.Body, "session has ended")

	// Idle and absolute limits.
	for _, q := range []string{`last_seen_at = now() - interval '2 minutes'`, `created_at = now() - interval '2 hours'`} {
		c := b.client(t)
		require.Equal(t, 200, c.login(b.link(t, "acct_a", "", store.PortalRead, time.Hour)).Status)
		require.Equal(t, 200, c.get("/portal/deliveries").Status)
		_, err := b.db.Store.Pool().Exec(context.Background(), `UPDATE webhooks.portal_sessions SET `+q+` WHERE revoked_at IS NULL`)
		require.NoError(t, err)
		require.Equal(t, 401, c.get("/portal/deliveries").Status, q)
	}
}

// Account B's session gets the 404 page for every id of account A, by URL
// and by form, and nothing of A's changes; a link limited to one endpoint
// sees no other endpoint of its own account.
func TestScopeIsEnforcedOnEveryPageAndAction(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ea := b.endpoint(t, "acct_a", "https://a.example.com/hook")
	da := b.deadLetter(t, ea, "evt_a1")
	eb := b.endpoint(t, "acct_b", "https://b.example.com/hook")
	b.deadLetter(t, eb, "evt_b1")
	before, err := b.db.Store.GetEndpoint(context.Background(), ea.ID)
	require.NoError(t, err)

	c := b.client(t)
	require.Equal(t, 200, c.login(b.link(t, "acct_b", "", store.PortalManage, time.Hour)).Status)
	for _, path := range []string{"/portal/endpoints/" + ea.ID, "/portal/deliveries/" + da.ID, "/portal/deliveries?endpoint=" + ea.ID,
		"/portal/endpoints/nope", "/portal/deliveries/dlv_nope"} {
		p := c.get(path)
		require.Equal(t, 404, p.Status, path)
		require.NotContains(t, p.Body, "a.example.com", path)
		require.NotContains(t, p.Body, "evt_a1", path)
	}
	require.NotContains(t, c.get("/portal/deliveries?event=evt_a1").Body, da.ID, "A's event is not in B's log")
	from := "/portal/endpoints/" + eb.ID
	forms := map[string]url.Values{
		"/portal/endpoints/" + ea.ID + "/settings": {"url": {"https://evil.example.com"}},
		"/portal/endpoints/" + ea.ID + "/status":   {"action": {"disable"}},
		"/portal/endpoints/" + ea.ID + "/rotate":   {},
		"/portal/endpoints/" + ea.ID + "/test":     {"type": {"invoice.paid"}},
		"/portal/endpoints/" + ea.ID + "/recover":  {"since": {"2020-01-01"}, "reason": {"steal"}, "step": {"confirm"}},
		"/portal/deliveries/" + da.ID + "/replay":  {"reason": {"steal"}},
	}
	for action, form := range forms {
		p := c.submit(from, action, form)
		require.Equal(t, 404, p.Status, action)
	}
	after, err := b.db.Store.GetEndpoint(context.Background(), ea.ID)
	require.NoError(t, err)
	require.Equal(t, before, after, "A's endpoint is untouched")
	rs, err := b.db.Store.ListReplays(context.Background(), store.ListReplaysParams{})
	require.NoError(t, err)
	require.Empty(t, rs, "nothing replayed")

	// One endpoint only.
	eb2 := b.endpoint(t, "acct_b", "https://b2.example.com/hook")
	c2 := b.client(t)
	p := c2.login(b.link(t, "acct_b", eb.ID, store.PortalManage, time.Hour))
	require.Equal(t, 200, p.Status)
	require.Equal(t, b.srv.URL+"/portal/endpoints/"+eb.ID, p.URL)
	require.Equal(t, 404, c2.get("/portal/endpoints/"+eb2.ID).Status)
	require.NotContains(t, c2.get("/portal/").Body, eb2.URL)
	require.Equal(t, 404, c2.submit("/portal/endpoints/"+eb.ID, "/portal/endpoints/"+eb2.ID+"/status", url.Values{"action": {"disable"}}).Status)
}

// A POST without the session's CSRF token, or from another origin, is
// refused and changes nothing; so is a change through a read-only link.
func TestCSRFOriginAndReadOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	e := b.endpoint(t, "acct_a", "https://a.example.com/hook")
	c := b.client(t)
	require.Equal(t, 200, c.login(b.link(t, "acct_a", "", store.PortalManage, time.Hour)).Status)
	action := "/portal/endpoints/" + e.ID + "/status"
	p := c.post(action, url.Values{"action": {"disable"}})
	require.Equal(t, 403, p.Status)
	require.Contains(t, p.Body, "Form refused")
	p = c.post(action, url.Values{"action": {"disable"}, "csrf": {"forged"}})
	require.Equal(t, 403, p.Status)
	for _, h := range []struct{ k, v string }{{"Origin", "https://evil.example.com"}, {"Sec-Fetch-Site", "cross-site"}, {"Sec-Fetch-Site", "same-site"}} {
		token := c.csrf("/portal/endpoints/" + e.ID)
		c.header.Set(h.k, h.v)
		p = c.post(action, url.Values{"action": {"disable"}, "csrf": {token}})
		c.header.Del(h.k)
		require.Equal(t, 403, p.Status, h)
	}
	got, err := b.db.Store.GetEndpoint(context.Background(), e.ID)
	require.NoError(t, err)
	require.True(t, got.Active(), "still enabled")

	// The same form, right: same origin and the token.
	c.header.Set("Origin", b.srv.URL)
	p = c.submit("/portal/endpoints/"+e.ID, action, url.Values{"action": {"disable"}})
	c.header.Del("Origin")
	require.Equal(t, 200, p.Status, p.Body)
	require.Contains(t, p.Body, "Endpoint disabled")
	require.NotContains(t, c.get("/portal/endpoints/"+e.ID).Body, "Endpoint disabled.", "the notice shows once")

	ro := b.client(t)
	require.Equal(t, 200, ro.login(b.link(t, "acct_a", "", store.PortalRead, time.Hour)).Status)
	p = ro.submit("/portal/endpoints/"+e.ID, action, url.Values{"action": {"enable"}})
	require.Equal(t, 403, p.Status)
	require.Contains(t, p.Body, "read-only")
	got, err = b.db.Store.GetEndpoint(context.Background(), e.ID)
	require.NoError(t, err)
	require.False(t, got.Active())
}

// Bad input gets a page that says what was wrong, never a 500, and
// changes nothing.
func TestBadInputSaysWhatWasWrong(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	e := b.endpoint(t, "acct_a", "https://a.example.com/hook")
	d := b.deadLetter(t, e, "evt_a1")
	c := b.client(t)
	require.Equal(t, 200, c.login(b.link(t, "acct_a", "", store.PortalManage, time.Hour)).Status)
	for path, want := range map[string]string{
		"/portal/deliveries?status=lost":                         "state",
		"/portal/deliveries?since=yesterday":                     "from",
		"/portal/deliveries?since=2026-05-02&until=2026-05-01":   "time range",
		"/portal/deliveries?cursor=garbage":                      "cursor",
		"/portal/deliveries?range=9y":                            "time range",
		"/portal/deliveries?order=sideways":                      "order",
		"/portal/deliveries?type=a%20b":                          "event type",
		"/portal/endpoints/" + e.ID + "?window=1y":               "window",
		"/portal/deliveries?event=" + url.QueryEscape("\x00evt"): "event id",
	} {
		p := c.get(path)
		require.Equal(t, 400, p.Status, path+"\n"+p.Body)
		require.Contains(t, p.Body, want, path)
	}
	from := "/portal/endpoints/" + e.ID
	for action, f := range map[string]struct {
		form url.Values
		want string
	}{
		from + "/settings":                       {url.Values{"url": {"ftp://x"}}, "scheme"},
		from + "/settings#types":                 {url.Values{"url": {e.URL}, "event_types": {"invoice..paid"}}, "empty segment"},
		from + "/settings#nul":                   {url.Values{"url": {e.URL}, "description": {"a\x00b"}}, "control characters"},
		from + "/status":                         {url.Values{"action": {"explode"}}, "action"},
		from + "/test":                           {url.Values{"type": {"invoice.*"}}, "event type"},
		from + "/recover":                        {url.Values{"since": {"soon"}, "reason": {"x"}}, "since"},
		from + "/recover#future":                 {url.Values{"since": {"2999-01-01"}, "reason": {"x"}}, "future"},
		from + "/recover#reason":                 {url.Values{"since": {"2020-01-01"}}, "reason"},
		"/portal/deliveries/" + d.ID + "/replay": {url.Values{"reason": {"  "}}, "reason"},
	} {
		action, _, _ = strings.Cut(action, "#")
		p := c.submit(from, action, f.form)
		require.Equal(t, 400, p.Status, action+"\n"+p.Body)
		require.Contains(t, p.Body, f.want, action)
	}
	got, err := b.db.Store.GetEndpoint(context.Background(), e.ID)
	require.NoError(t, err)
	require.Equal(t, e.URL, got.URL)
	require.Equal(t, e.Secrets, got.Secrets)
	rs, err := b.db.Store.ListReplays(context.Background(), store.ListReplaysParams{})
	require.NoError(t, err)
	require.Empty(t, rs)
}

// The delivery log pages with opaque cursors, newest first, both ways,
// without skipping or repeating a row.
func TestDeliveryLogKeysetPagination(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{cfg: Config{PageSize: 3}})
	e := b.endpoint(t, "acct_a", "https://a.example.com/hook")
	ctx := context.Background()
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	var ids []string
	for i := range 8 {
		id := "dlv_" + string(rune('a'+i))
		// Two rows share each created_at: the id breaks the tie.
		_, err := b.db.Store.Pool().Exec(ctx, `INSERT INTO webhooks.deliveries (id, event_id, endpoint_id, account, event_type, status, event_created_at, created_at)
			VALUES ($1, $2, $3, 'acct_a', 'invoice.paid', 'delivered', $4, $4)`, id, "evt_"+id, e.ID, base.Add(time.Duration(i/2)*time.Minute))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	c := b.client(t)
	require.Equal(t, 200, c.login(b.link(t, "acct_a", "", store.PortalRead, time.Hour)).Status)
	var seen []string
	next := "/portal/deliveries"
	var pages []string
	for next != "" {
		p := c.get(next)
		require.Equal(t, 200, p.Status)
		pages = append(pages, next)
		seen = append(seen, rowIDs(p.Body)...)
		next = linkAfter(p.Body, "Older")
	}
	require.Equal(t, []string{"dlv_h", "dlv_g", "dlv_f", "dlv_e", "dlv_d", "dlv_c", "dlv_b", "dlv_a"}, seen)
	require.Len(t, pages, 3)
	// Back from the last page.
	p := c.get(pages[2])
	back := linkAfter(p.Body, "Newer")
	require.NotEmpty(t, back)
	require.Equal(t, []string{"dlv_e", "dlv_d", "dlv_c"}, rowIDs(c.get(back).Body))
	require.NotContains(t, p.Body, "cursor="+ids[0], "cursors are opaque")
}

// rowIDs lists the delivery ids linked from a log page, in order.
func rowIDs(body string) []string {
	var out []string
	for _, part := range strings.Split(body, `href="/portal/deliveries/`)[1:] {
		id, _, _ := strings.Cut(part, `"`)
		out = append(out, id)
	}
	return out
}

// linkAfter returns the href of the pager link whose text starts with word.
func linkAfter(body, word string) string {
	for _, part := range strings.Split(body, `<a class="button" href="`)[1:] {
		href, rest, _ := strings.Cut(part, `">`)
		if strings.Contains(rest[:min(len(rest), 20)], word) {
			return strings.ReplaceAll(strings.TrimPrefix(href, ""), "&amp;", "&")
		}
	}
	return ""
}

// Support staff sign in with the admin token in a form, find a delivery
// of any account, and act on behalf of that account, recorded as such.
func TestSupportSignInSearchAndActOnBehalf(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	e := b.endpoint(t, "acct_a", "https://a.example.com/hook")
	d := b.deadLetter(t, e, "evt_a1")
	c := b.client(t)
	page := c.get("/portal/support/login")
	require.Equal(t, 200, page.Status)
	loginCSRF := csrfRe.FindStringSubmatch(page.Body)[1]
	p := c.post("/portal/support/login", url.Values{"csrf": {loginCSRF}, "token": {"wrong"}})
	require.Equal(t, 401, p.Status)
	require.Contains(t, p.Body, "not the admin token")
	p = c.post("/portal/support/login", url.Values{"csrf": {loginCSRF}, "token": {testAdminToken}})
	require.Equal(t, 200, p.Status)
	require.Equal(t, b.srv.URL+"/portal/support", p.URL)
	require.NotContains(t, b.logs.String(), testAdminToken)

	for _, q := range []string{d.ID, "evt_a1", e.ID, "acct_"} {
		p = c.get("/portal/support?q=" + url.QueryEscape(q))
		require.Equal(t, 200, p.Status)
		require.Contains(t, p.Body, "Open as acct_a", q)
	}
	p = c.submit("/portal/support", "/portal/support/act", url.Values{"account": {"acct_a"}, "next": {"/portal/deliveries/" + d.ID}})
	require.Equal(t, 200, p.Status)
	require.Equal(t, b.srv.URL+"/portal/deliveries/"+d.ID, p.URL)
	require.Contains(t, p.Body, "support on behalf of acct_a")
	require.Equal(t, 1, strings.Count(p.Body, "acting on behalf of"), "one banner, not a banner and a notice saying the same (issue 32)")

	p = c.submit("/portal/endpoints/"+e.ID, "/portal/endpoints/"+e.ID+"/status", url.Values{"action": {"disable"}})
	require.Equal(t, 200, p.Status)
	got, err := b.db.Store.GetEndpoint(context.Background(), e.ID)
	require.NoError(t, err)
	require.Contains(t, got.DisabledReason, "support on behalf of acct_a")
	p = c.get("/portal/replays")
	require.Contains(t, p.Body, "support on behalf of acct_a")
	require.Contains(t, p.Body, "endpoint disable")
}

// End to end: a test event sent from the portal fails into the DLQ; after
// the receiver is fixed, Replay with a reason brings the same webhook-id
// to the receiver, signed, and the audit shows who replayed it and why.
func TestReplayFromThePortalReachesTheReceiver(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.startPipeline(t)
	secret := endpoint.NewSecret()
	rc := newReceiver(t, secret)
	e, err := b.db.Store.CreateEndpoint(context.Background(), endpoint.Endpoint{ID: endpoint.NewID(), Account: "acct_a",
		URL: rc.srv.URL + "/hook", Secrets: []string{secret}})
	require.NoError(t, err)
	c := b.client(t)
	require.Equal(t, 200, c.login(b.link(t, "acct_a", "", store.PortalManage, time.Hour)).Status)
	p := c.submit("/portal/endpoints/"+e.ID, "/portal/endpoints/"+e.ID+"/test", url.Values{"type": {"invoice.paid"}})
	require.Equal(t, 200, p.Status, p.Body)
	evt := evtID(t, p.Body)
	ctx := context.Background()
	var d store.Delivery
	wait.For(t, 30*time.Second, "the test event to be dead-lettered", func() bool {
		ds, err := b.db.Store.DeliveriesOfEvent(ctx, "acct_a", evt)
		require.NoError(t, err)
		if len(ds) == 1 && ds[0].Status == "dead" && ds[0].DLQOffset != nil {
			d = ds[0]
			return true
		}
		return false
	})
	require.Equal(t, 2, rc.count(evt), "the first attempt and one retry")
	css := c.get("/portal/static/portal.css")
	require.Equal(t, 200, css.Status)
	require.Contains(t, css.Header.Get("Content-Type"), "text/css")
	require.Contains(t, css.Body, "prefers-color-scheme: dark")
	require.Equal(t, 404, c.get("/portal/static/").Status, "no directory listing")
	require.Equal(t, 404, c.get("/portal/nope").Status)

	detail := c.get("/portal/deliveries/" + d.ID).Body
	require.Contains(t, detail, "retries_exhausted")
	require.Contains(t, detail, "receiver says Service Unavailable")

	rc.setFail(false)
	p = c.submit("/portal/deliveries/"+d.ID, "/portal/deliveries/"+d.ID+"/replay", url.Values{"reason": {"receiver fixed"}})
	require.Equal(t, 200, p.Status, p.Body)
	require.Contains(t, p.Body, "started")
	// A replay keeps the webhook-id (receivers dedupe on it): the notice says so.
	require.Contains(t, p.Body, "with the same webhook-id as before")
	wait.For(t, 30*time.Second, "the replay to reach the receiver", func() bool { return rc.delivered(evt) })
	wait.For(t, 30*time.Second, "the delivery to show delivered", func() bool {
		got, err := b.db.Store.GetDelivery(ctx, "acct_a", d.ID)
		require.NoError(t, err)
		return got.Status == "delivered"
	})
	audit := c.get("/portal/replays").Body
	require.Contains(t, audit, "acct_a via portal link")
	require.Contains(t, audit, "receiver fixed")
	// The same dead letter is not replayed twice.
	p = c.submit("/portal/deliveries/"+d.ID, "/portal/deliveries/"+d.ID+"/replay", url.Values{"reason": {"again"}})
	require.Equal(t, 200, p.Status)
	require.Contains(t, p.Body, "Only a dead-lettered delivery")
	require.Equal(t, 3, rc.count(evt))
}

func evtID(t testing.TB, body string) string {
	t.Helper()
	i := strings.Index(body, "evt_test_")
	require.GreaterOrEqual(t, i, 0, body)
	return body[i : i+len("evt_test_")+24]
}

// Over https the cookie is __Host- prefixed and Secure; framing is denied
// unless origins are allowed, and then the cookie works in a cross-site
// iframe (SameSite=None; Partitioned).
func TestCookieAndFramingHeaders(t *testing.T) {
	t.Parallel()
	h, err := New(Config{BaseURL: "https://hooks.example.com"}, Deps{})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/portal/", nil)
	h.headers(rec)
	h.setCookie(rec, r, sessionCookie, "v", 60)
	ck := rec.Result().Cookies()[0]
	require.Equal(t, "__Host-hookd_portal", ck.Name)
	require.True(t, ck.Secure && ck.HttpOnly)
	require.Equal(t, "/", ck.Path)
	require.Equal(t, http.SameSiteLaxMode, ck.SameSite)
	require.Equal(t, "DENY", rec.Header().Get("X-Frame-Options"))
	require.Contains(t, rec.Header().Get("Content-Security-Policy"), "frame-ancestors 'none'")
	require.NotContains(t, rec.Header().Get("Content-Security-Policy"), "unsafe-inline")

	h, err = New(Config{BaseURL: "https://hooks.example.com", FrameAncestors: []string{"https://app.example.com"}}, Deps{})
	require.NoError(t, err)
	rec = httptest.NewRecorder()
	h.headers(rec)
	h.setCookie(rec, r, sessionCookie, "v", 60)
	ck = rec.Result().Cookies()[0]
	require.Equal(t, http.SameSiteNoneMode, ck.SameSite)
	require.True(t, ck.Partitioned)
	require.Empty(t, rec.Header().Get("X-Frame-Options"))
	require.Contains(t, rec.Header().Get("Content-Security-Policy"), "frame-ancestors https://app.example.com")

	for _, bad := range []Config{{BaseURL: "hooks.example.com"}, {BaseURL: "https://h.example.com/portal"},
		{FrameAncestors: []string{"*"}}, {SessionIdle: time.Hour, SessionMax: time.Minute}} {
		_, err := New(bad, Deps{})
		require.Error(t, err, "%+v", bad)
	}
}

// The manage actions, each followed by a one-time notice: edit settings,
// rotate the secret (shown once), disable, enable (offering to resend
// since the disablement), and recover: a dry-run count, then, confirmed, a
// capped replay recorded with its actor and reason.
func TestManageActions(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx := context.Background()
	e := b.endpoint(t, "acct_a", "https://a.example.com/hook", "invoice.*")
	b.deadLetter(t, e, "evt_r1")
	b.deadLetter(t, e, "evt_r2")
	c := b.client(t)
	require.Equal(t, 200, c.login(b.link(t, "acct_a", "", store.PortalManage, time.Hour)).Status)
	page := "/portal/endpoints/" + e.ID

	p := c.submit(page, page+"/settings", url.Values{"url": {"https://a2.example.com/hook"}, "description": {"billing"},
		"event_types": {"invoice.paid\r\ncustomer.*, refund.created"}})
	require.Equal(t, 200, p.Status, p.Body)
	require.Contains(t, p.Body, "Settings saved")
	got, err := b.db.Store.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.Equal(t, "https://a2.example.com/hook", got.URL)
	require.Equal(t, []string{"invoice.paid", "customer.*", "refund.created"}, got.EventTypes)

	p = c.submit(page, page+"/rotate", url.Values{})
	require.Equal(t, 200, p.Status)
	got, err = b.db.Store.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.Equal(t, []string{got.Secrets[0], e.Secrets[0]}, got.Secrets, "the new secret first, the previous one kept")
	require.Contains(t, html.UnescapeString(p.Body), got.Secrets[0], "shown once")
	require.NotContains(t, html.UnescapeString(c.get(page).Body), got.Secrets[0], "and never again")

	p = c.submit(page, page+"/status", url.Values{"action": {"disable"}})
	require.Contains(t, p.Body, "Endpoint disabled")
	// Recovering a disabled endpoint counts, then refuses.
	p = c.submit(page, page+"/recover", url.Values{"since": {"2020-01-01"}, "reason": {"outage"}, "step": {"count"}})
	require.Equal(t, 200, p.Status, p.Body)
	require.Contains(t, p.Body, "endpoint_disabled")
	p = c.submit(page, page+"/recover", url.Values{"since": {"2020-01-01"}, "reason": {"outage"}, "step": {"confirm"}})
	require.Contains(t, p.Body, "enable it first")
	p = c.submit(page, page+"/status", url.Values{"action": {"enable"}})
	require.Contains(t, p.Body, "Endpoint enabled")
	require.Contains(t, p.Body, "resend_since=")

	p = c.submit(page, page+"/recover", url.Values{"since": {"2020-01-01T00:00:00Z"}, "reason": {"outage fixed"}, "step": {"count"}})
	require.Equal(t, 200, p.Status, p.Body)
	require.Contains(t, p.Body, "<strong>2</strong> dead letter(s)")
	rs, err := b.db.Store.ListPortalReplays(ctx, "acct_a", "", 10)
	require.NoError(t, err)
	require.Empty(t, rs, "a count replays nothing")
	p = c.post(page+"/recover", url.Values{"csrf": {csrfRe.FindStringSubmatch(p.Body)[1]}, "since": {"2020-01-01T00:00:00Z"},
		"reason": {"outage fixed"}, "step": {"confirm"}})
	require.Equal(t, 200, p.Status, p.Body)
	require.Contains(t, p.Body, "started")
	wait.For(t, 30*time.Second, "the recovery to finish", func() bool {
		rs, err = b.db.Store.ListPortalReplays(ctx, "acct_a", "", 10)
		require.NoError(t, err)
		return len(rs) == 1 && rs[0].Status == store.ReplayDone
	})
	require.EqualValues(t, 2, rs[0].Replayed)
	require.Equal(t, "acct_a via portal link "+linkIDOf(t, b), rs[0].Actor)
	require.Equal(t, "outage fixed", rs[0].Reason)
	require.Contains(t, c.get("/portal/replays").Body, rs[0].ID)
}

// linkIDOf is the id of the only link used so far.
func linkIDOf(t testing.TB, b *bundle) string {
	var id string
	require.NoError(t, b.db.Store.Pool().QueryRow(context.Background(),
		`SELECT id FROM webhooks.portal_links WHERE used_at IS NOT NULL`).Scan(&id))
	return id
}

// A link created with POST /v1/portal-links opens the portal mounted on
// the same mux, as hookd serves both on --listen.
func TestAPILinkOpensThePortal(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	e := b.endpoint(t, "acct_a", "https://a.example.com/hook")
	v1 := api.NewV1(api.V1Config{}, nil)
	v1.Attach(context.Background(), api.Backend{Store: b.db.Store})
	mux := http.NewServeMux()
	v1.Routes(mux)
	b.h.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	_, token, err := b.db.Store.CreateAPIToken(context.Background(), "acct_a", "test")
	require.NoError(t, err)
	req, err := http.NewRequest("POST", srv.URL+"/v1/portal-links", strings.NewReader(`{"endpoint":"`+e.ID+`","level":"manage"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 201, resp.StatusCode)
	var out struct{ URL, Path string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.Equal(t, srv.URL+out.Path, out.URL)

	c := b.client(t)
	c.base = srv.URL
	p := c.login(strings.TrimPrefix(out.Path, "/portal/login/"))
	require.Equal(t, 200, p.Status)
	require.Equal(t, srv.URL+"/portal/endpoints/"+e.ID, p.URL)
	require.Contains(t, p.Body, "Disable endpoint", "a manage link")
}
