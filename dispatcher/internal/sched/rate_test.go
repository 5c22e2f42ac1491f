package sched

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRateDelay(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		perSec float64
		last   time.Time
		now    time.Time
		want   time.Duration
	}{
		{"unlimited", 0, t0, t0, 0},
		{"negative is unlimited", -3, t0, t0, 0},
		{"NaN is unlimited", math.NaN(), t0, t0, 0},
		{"infinite is unlimited", math.Inf(1), t0, t0, 0},
		{"first request starts at once", 1, time.Time{}, t0, 0},
		{"1/s right after a start", 1, t0, t0, time.Second},
		{"1/s 400ms after a start", 1, t0, t0.Add(400 * time.Millisecond), 600 * time.Millisecond},
		{"1/s exactly 1s after", 1, t0, t0.Add(time.Second), 0},
		{"1/s long idle saves no burst", 1, t0, t0.Add(time.Hour), 0},
		{"10/s", 10, t0, t0.Add(30 * time.Millisecond), 70 * time.Millisecond},
		{"0.5/s", 0.5, t0, t0.Add(time.Second), time.Second},
		{"tiny rate capped at a day", 1e-12, t0, t0, maxRateInterval},
		{"huge rate", 1e12, t0, t0, 0},
		{"clock behind the last start", 1, t0, t0.Add(-time.Second), 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, rateDelay(tc.perSec, tc.last, tc.now))
		})
	}
}

// TestRateDelayWindowBound: starting every request as soon as rateDelay
// allows, any window of W seconds holds at most floor(W*rate)+1 starts.
func TestRateDelayWindowBound(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, perSec := range []float64{0.3, 1, 7, 100} {
		var starts []time.Time
		var last time.Time
		now := t0
		for len(starts) < 200 {
			if w := rateDelay(perSec, last, now); w > 0 {
				now = now.Add(w)
				continue
			}
			starts = append(starts, now)
			last = now
			now = now.Add(time.Duration(len(starts)%3) * time.Millisecond) // uneven polling
		}
		for _, w := range []time.Duration{time.Second, 5 * time.Second} {
			limit := int(math.Floor(w.Seconds()*perSec)) + 1
			for i := range starts {
				n := 0
				for j := i; j < len(starts) && starts[j].Sub(starts[i]) < w; j++ {
					n++
				}
				require.LessOrEqual(t, n, limit, "rate %g, window %s from start %d", perSec, w, i)
			}
		}
	}
}
