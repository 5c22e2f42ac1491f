package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/store"
)

// PortalChart buckets attempts by local day across a DST change (New York,
// 2026-11-01 has 25 hours) and by hour, counts delivered and failed apart,
// leaves out other endpoints, and estimates percentiles from the hourly
// rollup within 5% of percentile_cont's.
func TestPortalChartBuckets(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	addEndpoint(t, db, "ep1")
	addEndpoint(t, db, "ep2")
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	day := func(d int) time.Time { return time.Date(2026, 10, 31+d, 0, 0, 0, 0, ny) } // Oct 31, Nov 1, Nov 2, Nov 3
	write := func(id, ep string, at time.Time, ms int, o attempt.Outcome, next attempt.NextAction) {
		r := rec(id, ep, 1, o, next)
		r.StartedAt, r.Duration = at, time.Duration(ms)*time.Millisecond
		_, err := db.Store.WriteAttempts(ctx, store.WriteAttemptsParams{Records: []*attempt.Record{r}, Now: at})
		require.NoError(t, err)
	}
	// 24.5 h after the midnight of Nov 1 is 23:30 EST, still Nov 1.
	write("d1", "ep1", day(1).Add(24*time.Hour+30*time.Minute), 10, attempt.OutcomeDelivered, attempt.NextDone)
	write("d2", "ep1", day(1).Add(time.Hour), 20, attempt.OutcomeDelivered, attempt.NextDone)
	write("d3", "ep1", day(1).Add(2*time.Hour), 30, attempt.OutcomeRetry, attempt.NextRetry)
	write("d4", "ep1", day(2).Add(time.Minute), 40, attempt.OutcomeDelivered, attempt.NextDone)
	write("d5", "ep2", day(1).Add(time.Hour), 50, attempt.OutcomeDelivered, attempt.NextDone)

	bounds := []time.Time{day(0), day(1), day(2), day(3)}
	require.Equal(t, 25*time.Hour, bounds[2].Sub(bounds[1]))
	got, err := db.Store.PortalChart(ctx, store.PortalChartParams{Account: "acct_1", EndpointIDs: []string{"ep1"}, Bounds: bounds, Zone: ny})
	require.NoError(t, err)
	require.Len(t, got, 3)
	require.Equal(t, store.ChartBucket{Start: day(0), End: day(1)}, got[0])
	require.EqualValues(t, 2, got[1].Delivered, "the 25th hour counts in its local day")
	require.EqualValues(t, 1, got[1].Failed)
	require.InEpsilon(t, 20, ms(got[1].P50), 0.05)
	require.InEpsilon(t, 29.8, ms(got[1].P99), 0.05, "10, 20, 30 ms: 20 + 0.98 * 10")
	require.EqualValues(t, 1, got[2].Delivered)
	require.InEpsilon(t, 40, ms(got[2].P99), 0.05)

	for i := range 4 {
		bounds[i] = day(1).Add(time.Duration(i) * time.Hour)
	}
	got, err = db.Store.PortalChart(ctx, store.PortalChartParams{Account: "acct_1", EndpointIDs: []string{"ep1", "ep2"}, Bounds: bounds})
	require.NoError(t, err)
	counts := ""
	for _, b := range got {
		counts += fmt.Sprintf("%d/%d ", b.Delivered, b.Failed)
	}
	require.Equal(t, "0/0 2/0 0/1 ", counts, "by hour, both endpoints")

	got, err = db.Store.PortalChart(ctx, store.PortalChartParams{Account: "acct_other", EndpointIDs: []string{"ep1"}, Bounds: bounds})
	require.NoError(t, err)
	require.Zero(t, got[1].Delivered, "another account's attempts are not charted")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// chartCounts renders ep1's hourly chart of the 4 hours from base: counts
// and percentiles.
func chartCounts(t *testing.T, db *pgtest.DB, base time.Time) string {
	t.Helper()
	bounds := []time.Time{base}
	for i := 1; i <= 4; i++ {
		bounds = append(bounds, base.Add(time.Duration(i)*time.Hour))
	}
	got, err := db.Store.PortalChart(context.Background(), store.PortalChartParams{Account: "acct_1", EndpointIDs: []string{"ep1"}, Bounds: bounds})
	require.NoError(t, err)
	out := ""
	for _, b := range got {
		out += fmt.Sprintf("%d/%d %s %s; ", b.Delivered, b.Failed, b.P50, b.P99)
	}
	return out
}

// The rollup the attempt-log writer keeps equals the one rebuilt from the
// log, counts a record written twice once, and the percentiles read from
// it are those of percentile_cont below 16 ms and within 5% above.
func TestAttemptHoursMatchLog(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	addEndpoint(t, db, "ep1")
	base := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	var recs []*attempt.Record
	for i := range 200 {
		o, next := attempt.OutcomeDelivered, attempt.NextDone
		if i%7 == 0 {
			o, next = attempt.OutcomeRetry, attempt.NextRetry
		}
		r := rec(fmt.Sprintf("d%d", i), "ep1", 1, o, next)
		r.StartedAt = base.Add(time.Duration(i) * time.Minute)
		r.Duration = time.Duration(1+i*37%900) * time.Millisecond
		recs = append(recs, r)
	}
	for _, batch := range [][]*attempt.Record{recs[:120], recs[100:]} { // 20 written twice
		_, err := db.Store.WriteAttempts(ctx, store.WriteAttemptsParams{Records: batch, Now: time.Now()})
		require.NoError(t, err)
	}
	read := func() string {
		var out string
		require.NoError(t, db.Store.Pool().QueryRow(ctx, `SELECT string_agg(format('%s %s %s %s %s', endpoint_id, hour, delivered, failed, latency), ';' ORDER BY hour)
			FROM webhooks.attempt_hours WHERE account = 'acct_1'`).Scan(&out))
		return out
	}
	require.Empty(t, rollupRows(t, db), "nothing folded yet: the batches' deltas are staged")
	charted := chartCounts(t, db, base)
	folded, err := db.Store.FoldAttemptHours(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, folded.Batches, "one row of deltas per batch")
	kept := read()
	require.NotEmpty(t, kept)
	require.Equal(t, charted, chartCounts(t, db, base), "the charts read the staged deltas as the folded rollup")
	require.NoError(t, db.Store.RebuildAttemptHours(ctx))
	require.Equal(t, read(), kept, "the writer's rollup is the log's")

	bounds := []time.Time{base, base.Add(time.Hour), base.Add(2 * time.Hour), base.Add(3 * time.Hour), base.Add(4 * time.Hour)}
	got, err := db.Store.PortalChart(ctx, store.PortalChartParams{Account: "acct_1", EndpointIDs: []string{"ep1"}, Bounds: bounds})
	require.NoError(t, err)
	var n int64
	for i, b := range got {
		var exact []float64
		require.NoError(t, db.Store.Pool().QueryRow(ctx, `SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY duration_ms)
			FROM webhooks.attempts WHERE endpoint_id = 'ep1' AND started_at >= $1 AND started_at < $2`, b.Start, b.End).Scan(&exact))
		n += b.Delivered + b.Failed
		require.InEpsilon(t, exact[0], ms(b.P50), 0.05, "p50 of hour %d", i)
		require.InEpsilon(t, exact[1], ms(b.P99), 0.05, "p99 of hour %d", i)
	}
	require.EqualValues(t, 200, n)

	// Endpoint stats since the middle of an hour: that part from the log,
	// the whole hours from the rollup; the counts exact.
	since := base.Add(90 * time.Minute)
	var delivered, failed int64
	var p50 float64
	require.NoError(t, db.Store.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE outcome = 'delivered'), count(*) FILTER (WHERE outcome <> 'delivered'),
		percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms) FROM webhooks.attempts WHERE endpoint_id = 'ep1' AND started_at >= $1`, since).
		Scan(&delivered, &failed, &p50))
	stats, err := db.Store.PortalEndpointStats(ctx, "acct_1", []string{"ep1", "ep_none"}, since)
	require.NoError(t, err)
	require.Equal(t, delivered, stats["ep1"].Delivered)
	require.Equal(t, failed, stats["ep1"].Failed)
	require.EqualValues(t, 110, delivered+failed)
	require.InEpsilon(t, p50, ms(stats["ep1"].P50), 0.05)
	require.False(t, stats["ep1"].LastSuccessAt.IsZero())
	require.Zero(t, stats["ep_none"])
	require.EqualValues(t, 200/7+1, got[0].Failed+got[1].Failed+got[2].Failed+got[3].Failed)
}

// Below 16 ms a latency bucket is one ms, so the percentiles are
// percentile_cont's exactly.
func TestLatencyPercentileExactBelow16ms(t *testing.T) {
	t.Parallel()
	h := store.LatencyHist{3: 1, 5: 1, 9: 2}
	require.Equal(t, 7*time.Millisecond, h.Percentile(0.5), "3 5 9 9: 5 + 0.5 * 4")
	require.Equal(t, 9*time.Millisecond, h.Percentile(0.99))
	require.Zero(t, store.LatencyHist{}.Percentile(0.5))
}
