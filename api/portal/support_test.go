package portal

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 29: support's next page is a path of the portal, whatever is
// posted: no other site, no path outside /portal/ once cleaned.
func TestSupportActNextStaysInThePortal(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	e := b.endpoint(t, "acct_a", "https://a.example.com/hook")
	c := b.client(t)
	page := c.get("/portal/support/login")
	loginCSRF := csrfRe.FindStringSubmatch(page.Body)[1]
	require.Equal(t, 200, c.post("/portal/support/login", url.Values{"csrf": {loginCSRF}, "token": {testAdminToken}}).Status)
	for _, next := range []string{`/portal/../\evil.example`, `/portal/..\evil.example`, "//evil.example/portal/", `/portal/%2e%2e/%5cevil.example`,
		"/portal/..%2f..%2fevil", "https://evil.example/portal/", "/portal/../admin"} {
		p := c.submit("/portal/support", "/portal/support/act", url.Values{"account": {"acct_a"}, "next": {next}})
		require.Equal(t, 200, p.Status, next)
		require.Equal(t, b.srv.URL+"/portal/", p.URL, next)
	}
	p := c.submit("/portal/support", "/portal/support/act", url.Values{"account": {"acct_a"}, "next": {"/portal/x/../endpoints/" + e.ID}})
	require.Equal(t, b.srv.URL+"/portal/endpoints/"+e.ID, p.URL)
}

func TestSafeNext(t *testing.T) {
	t.Parallel()
	for next, want := range map[string]string{
		"/portal/deliveries/dlv_1":        "/portal/deliveries/dlv_1",
		"/portal/endpoints/ep_1?tab=log":  "/portal/endpoints/ep_1?tab=log",
		"/portal/":                        "/portal/",
		"/portal/a/../b":                  "/portal/b",
		"/portal/%2e%2e/portal/x":         "/portal/x",
		"/portal//endpoints":              "/portal/endpoints",
		"/portal/endpoints/a%25b":         "/portal/endpoints/a%25b",
		"/portal/endpoints/ep%20with%20s": "/portal/endpoints/ep%20with%20s",
	} {
		got, ok := safeNext(next)
		require.True(t, ok, next)
		require.Equal(t, want, got, next)
	}
	for _, next := range []string{"", `/portal/../\evil.example`, `/portal\..\..\evil`, "//evil.example", "/\\evil", "/portal/%5c..%5cevil",
		"/portal/%2e%2e/%5cevil.example", "/portal/%2E%2E/%2E%2E/evil", "/portal/..%2f..%2fevil", "http://evil.example/portal/",
		"/portal/../", "/portals/x", "/portal/x\r\nLocation: //evil", "/portal/%0d%0aX: y", "portal/x", "/portal/x#frag",
		"/portal/\xff", "javascript:alert(1)//portal/", "/%70ortal/../evil"} {
		got, ok := safeNext(next)
		require.False(t, ok, "%q accepted as %q", next, got)
	}
}

// FuzzSafeNext: whatever is posted, an accepted next redirects (through
// http.Redirect, as supportAct answers) to a same-origin path under
// /portal/, also as a browser resolves it.
func FuzzSafeNext(f *testing.F) {
	for _, s := range []string{"/portal/deliveries/dlv_1", `/portal/../\evil.example`, "//evil", "/portal/%2e%2e/%5cevil",
		"/portal/..%2f..%2fevil", `/portal/\/evil`, "/portal/x?next=//evil", "/portal/%2F%2Fevil", "/portal/./../portal/",
		"https://evil/portal/", "/portal/\t/evil", "/portal/%09"} {
		f.Add(s)
	}
	base, _ := url.Parse("https://portal.example/portal/support/act")
	f.Fuzz(func(t *testing.T, next string) {
		to, ok := safeNext(next)
		if !ok {
			return
		}
		rec := httptest.NewRecorder()
		http.Redirect(rec, httptest.NewRequest("POST", "/portal/support/act", nil), to, http.StatusSeeOther)
		loc := rec.Header().Get("Location")
		if strings.ContainsAny(loc, "\\\r\n\t") || strings.HasPrefix(loc, "//") || !strings.HasPrefix(loc, "/portal") {
			t.Fatalf("%q redirects to %q", next, loc)
		}
		u, err := url.Parse(loc)
		if err != nil {
			t.Fatalf("%q redirects to %q, which does not parse: %v", next, loc, err)
		}
		got := base.ResolveReference(u)
		clean := path.Clean(got.Path)
		if got.Scheme != "https" || got.Host != "portal.example" || clean != "/portal" && !strings.HasPrefix(clean, "/portal/") {
			t.Fatalf("%q redirects to %q, which a browser resolves to %s", next, loc, got)
		}
	})
}
