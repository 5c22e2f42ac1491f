package sched

import "time"

// RateRecheck bounds how long an endpoint waiting for its next start time
// waits before it reads its rate again, so a rate changed by an endpoint
// update takes effect within this long even if no new record arrives.
const RateRecheck = time.Second

// maxRateInterval caps the spacing of a tiny rate (and keeps the
// arithmetic far from overflowing a Duration).
const maxRateInterval = 24 * time.Hour

// rateInterval is the minimum spacing of request starts of an endpoint
// limited to perSec requests per second; 0 means unlimited (perSec zero,
// negative, NaN or infinite).
func rateInterval(perSec float64) time.Duration {
	if !(perSec > 0) || perSec > float64(time.Second) {
		return 0
	}
	if perSec < float64(time.Second)/float64(maxRateInterval) {
		return maxRateInterval
	}
	return time.Duration(float64(time.Second) / perSec)
}

// rateDelay returns how long an endpoint limited to perSec requests per
// second, whose last request started at last (zero: never), must wait at
// now before it starts another; 0 means it may start now.
//
// The limit is a token bucket of one token: starts are spaced at least
// 1/perSec apart, so any window of W seconds holds at most
// floor(W*perSec)+1 starts, and an idle endpoint saves up no burst. The
// spacing is recomputed from the current rate at every check, so a rate
// change applies to the very next start.
func rateDelay(perSec float64, last, now time.Time) time.Duration {
	iv := rateInterval(perSec)
	if iv == 0 || last.IsZero() {
		return 0
	}
	return max(last.Add(iv).Sub(now), 0)
}
