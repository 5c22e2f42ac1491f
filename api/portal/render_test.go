package portal

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/store"
)

func TestFormatting(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		10 * time.Second: "10s", 30 * time.Second: "30s", 2 * time.Minute: "2m", 90 * time.Minute: "1h30m",
		time.Hour: "1h", 72 * time.Hour: "3d", 24 * time.Hour: "24h", 30 * time.Minute: "30m", 1500 * time.Millisecond: "1.5s",
	} {
		require.Equal(t, want, formatDuration(d), d.String())
	}
	require.Equal(t, "2026-05-01T10:00:00Z", formatTime(time.Date(2026, 5, 1, 12, 0, 0, 0, time.FixedZone("CEST", 7200))))
	require.Equal(t, "invoice.paid", testType([]string{"invoice.*", "invoice.paid"}))
	require.Equal(t, "invoice.test", testType([]string{"invoice.*"}))
	require.Equal(t, "hookd.test", testType([]string{"*"}))
	require.Equal(t, "—", latency(store.EndpointStats{}))
	require.Equal(t, "< 1 ms", latency(store.EndpointStats{Failed: 2}))
	require.Equal(t, "15 ms", latency(store.EndpointStats{Delivered: 1, P50: 15 * time.Millisecond}))
}

func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	d := store.Delivery{ID: "dlv_x", CreatedAt: time.Date(2026, 5, 1, 10, 0, 0, 123456000, time.UTC)}
	for _, back := range []bool{false, true} {
		c, gotBack, err := parseCursor(makeCursor(d, back))
		require.NoError(t, err)
		require.Equal(t, back, gotBack)
		require.Equal(t, d.ID, c.ID)
		require.True(t, d.CreatedAt.Equal(c.CreatedAt), "microseconds survive")
	}
	for _, bad := range []string{"", "!!", "djF8MXx4", makeCursor(store.Delivery{ID: "a b"}, false)} {
		_, _, err := parseCursor(bad)
		require.ErrorIs(t, err, errBadInput, bad)
	}
}
