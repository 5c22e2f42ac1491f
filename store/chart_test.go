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
// leaves out other endpoints, and interpolates percentiles as
// percentile_cont does.
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
	require.Equal(t, 20*time.Millisecond, got[1].P50)
	require.InDelta(t, 29.8, float64(got[1].P99)/float64(time.Millisecond), 0.001, "10, 20, 30 ms: 20 + 0.98 * 10")
	require.EqualValues(t, 1, got[2].Delivered)
	require.Equal(t, 40*time.Millisecond, got[2].P99)

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
