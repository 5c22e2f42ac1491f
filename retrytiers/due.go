package retrytiers

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Policy decides which tier a failed delivery goes to and when it is due.
//
// Bounds, documented for operators: after attempt n fails at time t, the
// delivery goes to tier n (1-based; tier 1 after the first attempt) with a
// due time in [t+d, t+d*(1+Jitter)], d being that tier's delay. A valid
// Retry-After of r moves it to the first later tier whose delay is at least
// r (so a tier partition stays roughly in due order) and the due time is
// never before t+r; a Retry-After longer than the last tier is capped at the
// last tier's delay. After the attempt that follows the last tier, retries
// are exhausted.
type Policy struct {
	// Schedule is the ordered tier delays. Required.
	Schedule Schedule
	// Jitter is the fraction of a tier's delay added at random, in [0, 1];
	// zero means none. With 0.1 (the dispatcher's default) a 30s tier is
	// due 30s to 33s after the failure.
	Jitter float64
	// Rand returns a float in [0, 1). Defaults to math/rand/v2's Float64.
	Rand func() float64
}

// Validate reports a policy that cannot be used.
func (p Policy) Validate() error {
	switch {
	case len(p.Schedule) == 0:
		return fmt.Errorf("retry schedule: names no tier")
	case p.Jitter < 0 || p.Jitter > 1:
		return fmt.Errorf("retry jitter: must be between 0 and 1, got %g", p.Jitter)
	}
	return nil
}

func (p Policy) jittered(d time.Duration) time.Duration {
	if p.Jitter <= 0 {
		return d
	}
	r := p.Rand
	if r == nil {
		r = rand.Float64
	}
	return d + time.Duration(float64(d)*p.Jitter*r())
}

// Next returns the tier index (0-based) and due time of a delivery whose
// attempt number attempt (1-based) failed at failedAt, with the receiver's
// Retry-After (zero if none). ok is false when retries are exhausted.
func (p Policy) Next(attempt int, failedAt time.Time, retryAfter time.Duration) (tier int, due time.Time, ok bool) {
	tier = max(attempt-1, 0)
	if tier >= len(p.Schedule) {
		return 0, time.Time{}, false
	}
	last := p.Schedule[len(p.Schedule)-1]
	retryAfter = min(max(retryAfter, 0), last)
	for tier < len(p.Schedule)-1 && p.Schedule[tier] < retryAfter {
		tier++
	}
	due = failedAt.Add(p.jittered(p.Schedule[tier]))
	if floor := failedAt.Add(retryAfter); due.Before(floor) {
		due = floor
	}
	return tier, due, true
}

// maxDeferTier is the last tier (0-based) a deferred delivery goes to: the
// second, two minutes with the default schedule. A deferral spends no
// attempt, so it must not run down the schedule the way failures do; but a
// delivery deferred again and again (an account over its fair share for
// minutes, an endpoint fed faster than its rate) cycling through the first
// tier cost a retry record and an attempt row every first-tier delay.
const maxDeferTier = 1

// Defer returns the tier index (0-based) and due time of a delivery handed
// to a tier without an attempt at now, for its deferrals-th deferral in a
// row since its last attempt (1-based): the first tier the first time, the
// second from then on (or the first, with a one-tier schedule).
func (p Policy) Defer(deferrals int, now time.Time) (tier int, due time.Time) {
	tier = min(max(deferrals-1, 0), maxDeferTier, len(p.Schedule)-1)
	return tier, now.Add(p.jittered(p.Schedule[tier]))
}

// Bounds returns the earliest and latest due time Next can return for tier
// after a failure at failedAt without Retry-After.
func (p Policy) Bounds(tier int, failedAt time.Time) (earliest, latest time.Time) {
	d := p.Schedule[tier]
	return failedAt.Add(d), failedAt.Add(d + time.Duration(float64(d)*max(p.Jitter, 0)))
}

// maxRetryAfterSeconds caps delta-seconds before they overflow a Duration.
const maxRetryAfterSeconds = 100 * 365 * 24 * 3600

// ParseRetryAfter reads a Retry-After header value: delta-seconds or an
// HTTP-date (RFC 9110). A date in the past means zero. ok is false for an
// absent or invalid value, which callers ignore.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		for i := 0; i < len(v); i++ {
			if v[i] < '0' || v[i] > '9' {
				return 0, false
			}
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > maxRetryAfterSeconds {
			n = maxRetryAfterSeconds
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if d := t.Sub(now); d > 0 {
		return d, true
	}
	return 0, true
}
