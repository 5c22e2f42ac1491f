package portal

import (
	"html"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/store"
)

func TestRelativeTimes(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{now.Add(-10 * time.Second), "just now"},
		{now.Add(-3 * time.Minute), "3 min ago"},
		{now.Add(-80 * time.Minute), "80 min ago"},
		{now.Add(-5 * time.Hour), "5 h ago"},
		{now.Add(-3 * 24 * time.Hour), "3 days ago"},
		{now.Add(-45 * 24 * time.Hour), "2026-10-19"},
		{now.Add(10 * time.Minute), "in 10 min"},
		{now.Add(2 * time.Hour), "in 2 h"},
	} {
		require.Equal(t, c.want, relative(now, c.at), c.at)
	}
	berlin, err := loadZone("Europe/Berlin")
	require.NoError(t, err)
	v := view{clock: readerClock{now: now, zone: berlin}}
	require.Equal(t, `<time datetime="2026-12-03T08:57:00Z" title="2026-12-03 09:57:00 CET (Europe/Berlin)">3 min ago</time>`,
		string(v.When(now.Add(-3*time.Minute))))
	require.Equal(t, "never", string(v.When(time.Time{})))
	for _, bad := range []string{"", "Local", "../../etc/passwd", "Mars/Olympus"} {
		_, err := loadZone(bad)
		require.Error(t, err, bad)
	}
}

// Pages say "3 min ago" with the exact time on hover, in the zone the
// reader chose from the footer, remembered by a cookie (issue 32).
func TestTimesInTheReadersZone(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	e := b.endpoint(t, "acct_a", "https://a.example.com/hook", "invoice.*")
	b.deadLetter(t, e, "evt_t1")
	c := b.client(t)
	c.login(b.link(t, "acct_a", "", store.PortalManage, time.Hour))
	page := html.UnescapeString(c.get("/portal/deliveries").Body)
	require.Regexp(t, `<time datetime="[0-9T:Z-]+" title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC">(just now|\d+ min ago)</time>`, page)
	require.Contains(t, page, `<option selected>UTC</option>`)

	p := c.get("/portal/timezone?" + url.Values{"tz": {"Asia/Tokyo"}, "back": {"/portal/deliveries?status=dead"}}.Encode())
	require.Equal(t, http.StatusOK, p.Status)
	require.Equal(t, b.srv.URL+"/portal/deliveries?status=dead", p.URL, "back where the form was")
	page = html.UnescapeString(p.Body)
	require.Regexp(t, `title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d JST \(Asia/Tokyo\)"`, page)
	require.Contains(t, page, `<option selected>Asia/Tokyo</option>`)
	require.Contains(t, html.UnescapeString(c.get("/portal/").Body), "(Asia/Tokyo)", "remembered on the next page")

	require.Equal(t, http.StatusBadRequest, c.get("/portal/timezone?tz=Mars%2FOlympus").Status)
	require.Equal(t, b.srv.URL+"/portal/", c.get("/portal/timezone?tz=UTC&back=%2F%2Fevil.example").URL)
}
