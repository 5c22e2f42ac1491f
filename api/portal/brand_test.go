package portal

import (
	"html"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/store"
)

// A branded portal shows the operator's name, logo and accent on every page
// and says "hookd" nowhere a customer reads (issue 32).
func TestBrandingOnEveryPage(t *testing.T) {
	t.Parallel()
	const logo = "data:image/svg+xml;base64,PHN2Zy8+"
	b := setup(t, setupOpts{cfg: Config{Name: "Acme Hooks", AccentColor: "#ffcc00", LogoURL: logo}})
	e := b.endpoint(t, "acct_a", "https://a.example.com/hook", "invoice.*")
	d := b.deadLetter(t, e, "evt_b1")
	c := b.client(t)
	welcome := c.get("/portal/")
	require.Contains(t, welcome.Body, "Acme Hooks delivery portal")
	require.NotContains(t, strings.ToLower(welcome.Body), "hookd delivery portal")
	c.login(b.link(t, "acct_a", "", store.PortalManage, time.Hour))
	for _, path := range []string{"/portal/", "/portal/endpoints/" + e.ID, "/portal/deliveries", "/portal/deliveries/" + d.ID,
		"/portal/replays", "/portal/policy"} {
		p := c.get(path)
		require.Equal(t, 200, p.Status, path)
		require.Contains(t, p.Body, "<title>", path)
		require.Contains(t, p.Body, "· Acme Hooks delivery portal</title>", path)
		require.Contains(t, html.UnescapeString(p.Body), `<img class="logo" src="`+logo+`"`, path)
		require.Contains(t, p.Body, `href="/portal/brand.css"`, path)
		visible := textOutsideTags(p.Body)
		require.NotContains(t, visible, "hookd ", path+": customer-facing text names hookd")
	}
	css := c.get("/portal/brand.css")
	require.Equal(t, 200, css.Status)
	require.Contains(t, css.Header.Get("Content-Type"), "text/css")
	require.Contains(t, css.Body, "--accent: #ffcc00; --accent-fg: #000000;", "dark text on a light accent")
}

// textOutsideTags drops markup so that attribute values (event types like
// hookd.test, cookie names) do not count as text a customer reads.
func textOutsideTags(page string) string {
	var out strings.Builder
	in := false
	for _, r := range page {
		switch {
		case r == '<':
			in = true
		case r == '>':
			in = false
		case !in:
			out.WriteRune(r)
		}
	}
	return out.String()
}

func TestBrandValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ accent, logo, err string }{
		{accent: "#2f5fd0"},
		{accent: "#abc", logo: "/brand/logo.svg"},
		{logo: "data:image/png;base64,iVBORw0KGgo="},
		{accent: "red", err: "portal accent color: must be #rgb or #rrggbb"},
		{accent: "#12345", err: "portal accent color"},
		{logo: "https://cdn.example/logo.png", err: "portal logo url: must be a path on the portal's own origin"},
		{logo: "//cdn.example/logo.png", err: "portal logo url: must be a path"},
		{logo: "javascript:alert(1)", err: "portal logo url: must be a path"},
		{logo: "data:text/html;base64,PHNjcmlwdD4=", err: "portal logo url: a data: logo must be data:image/"},
		{logo: `/x" onerror="alert(1)`, err: "portal logo url: must be a path"},
	} {
		cfg := Config{AccentColor: c.accent, LogoURL: c.logo}
		cfg.SetDefaults()
		err := cfg.Validate()
		if c.err == "" {
			require.NoError(t, err, "%+v", c)
			continue
		}
		require.ErrorContains(t, err, c.err, "%+v", c)
	}
	require.Equal(t, "#ffffff", accentForeground("#2f5fd0"))
	require.Equal(t, "#000000", accentForeground("#fc0"))
}
