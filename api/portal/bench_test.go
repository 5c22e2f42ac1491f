package portal

import (
	"context"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/store"
)

// BenchmarkPortalPages times the delivery log and delivery detail pages,
// over real HTTP with a signed-in session, on an account with 1 million
// delivery rows (HOOKD_PORTAL_BENCH_ROWS to change it), and reports the
// p99 of each page besides the mean:
//
//	scripts/test.sh -run '^$' -bench BenchmarkPortalPages -benchtime 200x ./api/portal/
func BenchmarkPortalPages(b *testing.B) {
	rows := 1_000_000
	if v := os.Getenv("HOOKD_PORTAL_BENCH_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(b, err)
		rows = n
	}
	bd := setup(b, setupOpts{})
	eps := []string{
		bd.endpoint(b, "acct_big", "https://a.example.com/1").ID,
		bd.endpoint(b, "acct_big", "https://a.example.com/2").ID,
		bd.endpoint(b, "acct_big", "https://a.example.com/3").ID,
	}
	bd.endpoint(b, "acct_small", "https://b.example.com/1")
	dead := bd.deadLetter(b, bd.endpoint(b, "acct_big", "https://a.example.com/4", "invoice.*"), "evt_bench_dead")
	start := time.Now()
	fillDeliveries(b, bd, eps, rows)
	b.Logf("%d delivery rows written in %s", rows, time.Since(start).Round(time.Second))

	c := bd.client(b)
	require.Equal(b, 200, c.login(bd.link(b, "acct_big", "", store.PortalManage, time.Hour)).Status)
	mid := c.get("/portal/deliveries")
	require.Equal(b, 200, mid.Status)
	// A cursor deep in the log: follow "Older" a few pages.
	deep := "/portal/deliveries"
	for range 20 {
		deep = linkAfter(c.get(deep).Body, "Older")
		require.NotEmpty(b, deep)
	}
	var someID string
	require.NoError(b, bd.db.Store.Pool().QueryRow(context.Background(),
		`SELECT id FROM webhooks.deliveries WHERE account = 'acct_big' AND status = 'delivered' ORDER BY created_at LIMIT 1 OFFSET $1`, rows/2).Scan(&someID))
	measurePages(b, c, []benchPage{
		{"log/first-page", "/portal/deliveries"},
		{"log/page-21", deep},
		{"log/dead-lettered", "/portal/deliveries?status=dead"},
		{"log/event-type", "/portal/deliveries?type=customer.updated"},
		{"log/endpoint-last-24h", "/portal/deliveries?range=24h&endpoint=" + eps[1]},
		{"log/event-id", "/portal/deliveries?event=" + url.QueryEscape("evt_"+strconv.Itoa(rows/3))},
		{"log/oldest-first", "/portal/deliveries?order=oldest"},
		{"detail/delivered", "/portal/deliveries/" + someID},
		{"detail/dead-lettered-with-payload", "/portal/deliveries/" + dead.ID},
	})
}

// fillDeliveries writes n delivery rows of acct_big over the last 30 days,
// spread over eps, event types and states, in one INSERT ... SELECT.
func fillDeliveries(b *testing.B, bd *bundle, eps []string, n int) {
	b.Helper()
	ctx := context.Background()
	_, err := bd.db.Store.Pool().Exec(ctx, `INSERT INTO webhooks.deliveries
		(id, event_id, endpoint_id, account, event_type, status, attempts, last_status_code, event_created_at, created_at, updated_at)
		SELECT 'dlv_b' || g, 'evt_' || g, ($1::text[])[1 + g % cardinality($1::text[])], 'acct_big',
			(ARRAY['invoice.paid','invoice.created','customer.created','customer.updated','payment.failed'])[1 + (g / 7) % 5],
			CASE WHEN g % 50 = 0 THEN 'dead' WHEN g % 97 = 0 THEN 'retrying' ELSE 'delivered' END,
			1 + g % 3, CASE WHEN g % 50 = 0 THEN 503 ELSE 200 END,
			t, t, t
		FROM generate_series(1, $2::int) g, LATERAL (SELECT now() - make_interval(secs => (($2::int - g)::float8 / $2::int) * 30 * 86400) AS t) x`,
		eps, n)
	require.NoError(b, err)
	_, err = bd.db.Store.Pool().Exec(ctx, `ANALYZE webhooks.deliveries`)
	require.NoError(b, err)
	require.False(b, strings.Contains(bd.logs.String(), "level=ERROR"))
}

// benchPage is a page a benchmark measures.
type benchPage struct{ name, path string }

// measurePages runs one sub-benchmark per page, reporting p50 and p99 of
// the page's answer time as the browser's client sees it.
func measurePages(b *testing.B, c *client, pages []benchPage) {
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				pg := c.get(p.path)
				lat = append(lat, time.Since(t0))
				if pg.Status != 200 {
					b.Fatalf("%s: %d", p.path, pg.Status)
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		})
	}
}
