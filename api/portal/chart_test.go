package portal

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

func buckets(n int, start time.Time, step time.Duration) []store.ChartBucket {
	out := make([]store.ChartBucket, n)
	for i := range out {
		out[i].Start, out[i].End = start.Add(time.Duration(i)*step), start.Add(time.Duration(i+1)*step)
	}
	return out
}

func TestChartBarsScale(t *testing.T) {
	t.Parallel()
	b := buckets(4, time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC), time.Hour)
	b[1].Delivered, b[1].Failed = 150, 50 // the tallest: 200, a round top
	b[3].Delivered = 100
	b[1].P50, b[1].P99 = 20*time.Millisecond, 100*time.Millisecond
	v, err := newChartView("24h", "hour", b, time.UTC)
	require.NoError(t, err)
	require.EqualValues(t, 250, v.Delivered)
	require.EqualValues(t, 50, v.Failed)
	require.Len(t, v.Rows, 2)

	c := countsChart(v)
	require.Len(t, c.Bars, 4)
	tall, half := c.Bars[1], c.Bars[3]
	require.Equal(t, plotH, tall.H1+tall.H2, "the tallest bucket fills the plot")
	require.Equal(t, chartTop, tall.Y2, "its top is the plot's top")
	require.InDelta(t, plotH*150/200, tall.H1, 0.1)
	require.Equal(t, chartTop+plotH, tall.Y1+tall.H1, "bars stand on the x axis")
	require.Equal(t, tall.Y1, tall.Y2+tall.H2, "failed sits on delivered")
	require.InDelta(t, plotH/2, half.H1, 0.1)
	require.Zero(t, c.Bars[0].H1+c.Bars[0].H2)
	require.Equal(t, "200", c.YTick[2].Label)
	require.Greater(t, c.Bars[1].X, c.Bars[0].X+c.Bars[0].W, "bars do not overlap")
	require.LessOrEqual(t, c.Bars[3].X+c.Bars[3].W, chartW-chartRight)

	l := latencyChart(v)
	require.Equal(t, plotH, l.Bars[1].H1, "the highest p99 fills the plot")
	require.InDelta(t, plotH/5, l.Bars[1].H2, 0.1)
	require.Less(t, l.Bars[1].W2, l.Bars[1].W, "p50 is the narrower bar")

	svg := string(v.Counts)
	require.Contains(t, svg, `role="img"`)
	require.Contains(t, svg, `aria-label="Attempts per hour, last 24 hours: 250 delivered, 50 failed"`)
	require.Contains(t, svg, "<title>Thu 3 Dec 09:00: 150 delivered, 50 failed</title>")
	require.Contains(t, string(v.Latency), "<title>Thu 3 Dec 09:00: p50 20 ms, p99 100 ms</title>")
	require.NotContains(t, svg, "style=", "the CSP forbids inline style")
}

func TestChartEmpty(t *testing.T) {
	t.Parallel()
	v, err := newChartView("7d", "hour", buckets(168, time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC), time.Hour), time.UTC)
	require.NoError(t, err)
	require.Empty(t, v.Rows)
	c := countsChart(v)
	require.True(t, c.Empty)
	require.Len(t, c.Bars, 168)
	for _, b := range c.Bars {
		require.Zero(t, b.H1+b.H2)
	}
	require.Equal(t, []string{"0", "1"}, tickLabels(c.YTick), "an empty chart still has an axis, without a second 0 at 0.5")
	require.Contains(t, string(v.Counts), "No attempts in this window")
	require.NotContains(t, string(v.Counts), "NaN")
	require.NotContains(t, string(v.Latency), "NaN")
}

func TestChartOneBucket(t *testing.T) {
	t.Parallel()
	b := buckets(1, time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC), 24*time.Hour)
	b[0].Failed = 3
	v, err := newChartView("30d", "day", b, time.UTC)
	require.NoError(t, err)
	c := countsChart(v)
	require.Len(t, c.Bars, 1)
	require.InDelta(t, plotW*0.8, c.Bars[0].W, 0.1, "one bucket takes the whole slot")
	require.InDelta(t, chartLeft+plotW*0.1, c.Bars[0].X, 0.1)
	require.Zero(t, c.Bars[0].H1)
	require.InDelta(t, plotH*3/5, c.Bars[0].H2, 0.1, "3 on a 0-5 axis")
	require.Len(t, c.XTick, 1)
	require.Equal(t, "3 Dec", c.XTick[0].Label)
	require.Contains(t, string(v.Counts), "0 delivered, 3 failed")
}

func TestChartBounds(t *testing.T) {
	t.Parallel()
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	// 2026-11-01 is a DST change in New York: that day has 25 hours.
	now := time.Date(2026, 11, 20, 15, 30, 0, 0, time.UTC)
	b, step := chartBounds("30d", now, ny)
	require.Equal(t, "day", step)
	require.Len(t, b, 31)
	for i, t0 := range b {
		l := t0.In(ny)
		require.Zero(t, l.Hour()+l.Minute(), "edge %d is a local midnight: %s", i, l)
	}
	require.Equal(t, time.Date(2026, 11, 21, 0, 0, 0, 0, ny), b[30])

	b, step = chartBounds("7d", now, time.UTC)
	require.Equal(t, "hour", step)
	require.Len(t, b, 169)
	require.Equal(t, time.Date(2026, 11, 20, 16, 0, 0, 0, time.UTC), b[168])
	require.Equal(t, 7*24*time.Hour, b[168].Sub(b[0]))
}

func tickLabels(ts []chartTick) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Label)
	}
	return out
}

// The middle y label is drawn only where it is a whole number: on a 0-5
// axis a "2" on the 2.5 line misread every bar.
func TestYTicksWhole(t *testing.T) {
	t.Parallel()
	count := func(f float64) string { return fmt.Sprintf("%.0f", f) }
	for top, want := range map[float64][]string{1: {"0", "1"}, 2: {"0", "1", "2"}, 5: {"0", "5"}, 10: {"0", "5", "10"}, 50: {"0", "25", "50"}} {
		require.Equal(t, want, tickLabels(yTicks(top, count)), "top %v", top)
	}
}

func TestNiceCeil(t *testing.T) {
	t.Parallel()
	for in, want := range map[float64]float64{0: 1, 1: 1, 3: 5, 7: 10, 10: 10, 11: 20, 200: 200, 201: 500, 999: 1000} {
		require.Equal(t, want, niceCeil(in), "niceCeil(%v)", in)
	}
	require.True(t, strings.HasPrefix(formatMS(1500*time.Microsecond), "1 "))
}

// delivered writes one delivered attempt of a new delivery to e, started
// at start, that took d.
func (b *bundle) delivered(t testing.TB, e endpoint.Endpoint, evt string, start time.Time, d time.Duration) {
	t.Helper()
	_, err := b.db.Store.WriteAttempts(context.Background(), store.WriteAttemptsParams{Now: time.Now(), Records: []*attempt.Record{{
		AttemptID: "att_" + evt, DeliveryID: delivery.ID(evt, e.ID), EventID: evt, EventType: "invoice.paid",
		EndpointID: e.ID, Account: e.Account, EventCreated: start, Attempt: 1, Tier: b.names.Deliveries,
		StartedAt: start, Duration: d, StatusCode: 200, Outcome: attempt.OutcomeDelivered, NextAction: attempt.NextDone}}})
	require.NoError(t, err)
}

// TestChartPages: the endpoint page charts its endpoint's attempts and the
// endpoints page all of the account's, each with the right totals, per
// window, and nothing of another account.
func TestChartPages(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	now := time.Now()
	e1 := b.endpoint(t, "acct_chart", "https://a.example.com/1")
	e2 := b.endpoint(t, "acct_chart", "https://a.example.com/2")
	other := b.endpoint(t, "acct_other", "https://b.example.com/1")
	b.deadLetter(t, e1, "evt_chart_dead") // 2 failed attempts
	// Seconds apart, not minutes: the dead letter's attempts are 1 and 2 s
	// old, and attempts of two different hours read otherwise (the
	// rollup's buckets) when a run crosses an hour.
	for i := range 3 {
		b.delivered(t, e1, fmt.Sprintf("evt_c1_%d", i), now.Add(-time.Duration(i+1)*time.Second), time.Duration(10*(i+1))*time.Millisecond)
	}
	b.delivered(t, e1, "evt_c1_old", now.Add(-10*24*time.Hour), 40*time.Millisecond) // only in 30d
	b.delivered(t, e2, "evt_c2", now.Add(-2*time.Hour), 5*time.Millisecond)
	for i := range 5 {
		b.delivered(t, other, fmt.Sprintf("evt_o_%d", i), now.Add(-time.Minute), time.Millisecond)
	}

	c := b.client(t)
	require.Equal(t, 200, c.login(b.link(t, "acct_chart", "", store.PortalRead, time.Hour)).Status)
	for path, want := range map[string]string{
		"/portal/endpoints/" + e1.ID:                 "Attempts per hour, last 24 hours: 3 delivered, 2 failed",
		"/portal/endpoints/" + e1.ID + "?window=7d":  "Attempts per hour, last 7 days: 3 delivered, 2 failed",
		"/portal/endpoints/" + e1.ID + "?window=30d": "Attempts per day, last 30 days: 4 delivered, 2 failed",
		"/portal/endpoints/" + e2.ID:                 "Attempts per hour, last 24 hours: 1 delivered, 0 failed",
		"/portal/":                                   "Attempts per hour, last 24 hours: 4 delivered, 2 failed",
		"/portal/?window=30d":                        "Attempts per day, last 30 days: 5 delivered, 2 failed",
	} {
		p := c.get(path)
		require.Equal(t, 200, p.Status, path)
		require.Contains(t, p.Body, `<svg class="chart counts"`, path)
		require.Contains(t, p.Body, `aria-label="`+want+`"`, path)
		require.Contains(t, p.Body, `<svg class="chart latency"`, path)
		require.Contains(t, p.Body, "<th>"+map[bool]string{true: "day", false: "hour"}[strings.Contains(path, "30d")]+"</th>", path)
	}
	p := c.get("/portal/endpoints/" + e1.ID)
	// Exactly: p99 = 20 + 0.96 * 10 = 29.6 ms; the rollup's latency buckets
	// estimate it within 4.5% (30 ms here), the p50 below 16 ms exactly.
	require.Regexp(t, `p50 15 ms, p99 (29|30) ms`, p.Body, "10, 12, 15, 20 and 30 ms: the delivered and the failed attempts")
	require.Equal(t, 400, c.get("/portal/?window=1y").Status)
}
