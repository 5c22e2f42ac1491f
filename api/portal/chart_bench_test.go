package portal

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/store"
)

// BenchmarkCharts times the pages with charts, over real HTTP with a
// signed-in session, on an account with 1 million delivery rows over 30
// days (HOOKD_PORTAL_BENCH_ROWS to change it), each holding its first
// attempt, plus a retry row in the attempt log for 1 in 50, and the hourly
// rollup the charts read rebuilt from them. It reports the
// p50 and p99 of each page besides the mean:
//
//	scripts/test.sh -run '^$' -bench BenchmarkCharts -benchtime 50x ./api/portal/
func BenchmarkCharts(b *testing.B) {
	rows := benchRows(b)
	bd := setup(b, setupOpts{})
	eps := []string{
		bd.endpoint(b, "acct_big", "https://a.example.com/1").ID,
		bd.endpoint(b, "acct_big", "https://a.example.com/2").ID,
		bd.endpoint(b, "acct_big", "https://a.example.com/3").ID,
	}
	bd.endpoint(b, "acct_small", "https://b.example.com/1")
	start := time.Now()
	fillAttempts(b, bd, eps, rows)
	b.Logf("%d delivery rows with their attempts written in %s", rows, time.Since(start).Round(time.Second))

	c := bd.client(b)
	require.Equal(b, 200, c.login(bd.link(b, "acct_big", "", store.PortalRead, time.Hour)).Status)
	measurePages(b, c, []benchPage{
		{"account/24h", "/portal/"},
		{"account/7d", "/portal/?window=7d"},
		{"account/30d", "/portal/?window=30d"},
		{"endpoint/30d", "/portal/endpoints/" + eps[0] + "?window=30d"},
	})
}

// fillAttempts writes n delivery rows of acct_big over the last 30 days,
// spread over eps, each holding its first attempt (as the attempt log
// writes a first attempt), 1 in 50 failed with its retry in attempt_rows.
func fillAttempts(b *testing.B, bd *bundle, eps []string, n int) {
	b.Helper()
	ctx := context.Background()
	pool := bd.db.Store.Pool()
	_, err := pool.Exec(ctx, `INSERT INTO webhooks.deliveries
		(id, event_id, endpoint_id, account, event_type, status, attempts, last_status_code, event_created_at, created_at, updated_at,
		 a_id, a_attempt, a_tier, a_started_at, a_duration_ms, a_status_code, a_outcome, a_next_action)
		SELECT 'dlv_c' || g, 'evt_' || g, ($1::text[])[1 + g % cardinality($1::text[])], 'acct_big', 'invoice.paid',
			CASE WHEN g % 50 = 0 THEN 'dead' ELSE 'delivered' END, 1 + (g % 50 = 0)::int, CASE WHEN g % 50 = 0 THEN 503 ELSE 200 END,
			t, t, t,
			'att_c' || g, 1, 'deliveries', t, 20 + (g::bigint * 7919 % 400)::int + CASE WHEN g % 97 = 0 THEN 3000 ELSE 0 END,
			CASE WHEN g % 50 = 0 THEN 503 ELSE 200 END,
			CASE WHEN g % 50 = 0 THEN 'retry' ELSE 'delivered' END, CASE WHEN g % 50 = 0 THEN 'retry' ELSE 'done' END
		FROM generate_series(1, $2::int) g, LATERAL (SELECT now() - make_interval(secs => (($2::int - g)::float8 / $2::int) * 30 * 86400) AS t) x`,
		eps, n)
	require.NoError(b, err)
	_, err = pool.Exec(ctx, `INSERT INTO webhooks.attempt_rows
		(attempt_id, delivery_id, event_id, endpoint_id, account, attempt, tier, started_at, duration_ms, status_code, outcome, next_action)
		SELECT 'att_c' || g || '_2', 'dlv_c' || g, 'evt_' || g, endpoint_id, account, 2, 'retry-1', a_started_at + interval '30 seconds',
			a_duration_ms, 503, 'retry', 'dead_letter'
		FROM webhooks.deliveries, LATERAL (SELECT substr(id, 6) AS g) x WHERE account = 'acct_big' AND a_outcome = 'retry'`)
	require.NoError(b, err)
	// Rows written around the attempt-log writer: the rollup the charts
	// read is rebuilt from them, as migration 18 does.
	require.NoError(b, bd.db.Store.RebuildAttemptHours(ctx))
	_, err = pool.Exec(ctx, `ANALYZE webhooks.deliveries, webhooks.attempt_rows, webhooks.attempt_hours`)
	require.NoError(b, err)
}

// benchRows is HOOKD_PORTAL_BENCH_ROWS, or 1 million.
func benchRows(b *testing.B) int {
	if v := os.Getenv("HOOKD_PORTAL_BENCH_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(b, err)
		return n
	}
	return 1_000_000
}
