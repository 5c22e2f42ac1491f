// Package retrytiers owns hookd's tiered retry topics: the retry schedule,
// the due-time arithmetic (jitter, Retry-After) and the tier consumers that
// hold a delivery back until it is due and then hand it to the dispatcher.
// It never sends HTTP itself and never sleeps while holding records.
//
// Applications should not import this package: it is hookd's own code, with no compatibility promise.
package retrytiers

import (
	"fmt"
	"strings"
	"time"
)

// DefaultSchedule is the retry schedule of PRODUCT.md: ten tiers, about two
// days in all.
const DefaultSchedule = "30s,2m,10m,30m,1h,2h,4h,8h,12h,24h"

// Schedule is the ordered list of tier delays.
type Schedule []time.Duration

// ParseSchedule reads a comma-separated list of strictly increasing
// durations such as "30s,2m,10m".
func ParseSchedule(s string) (Schedule, error) {
	var out Schedule
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		d, err := time.ParseDuration(part)
		if err != nil {
			return nil, fmt.Errorf("retry schedule: %q is not a duration (e.g. 30s, 2m, 1h)", part)
		}
		if d < time.Second {
			return nil, fmt.Errorf("retry schedule: %q is shorter than 1s", part)
		}
		if n := len(out); n > 0 && d <= out[n-1] {
			return nil, fmt.Errorf("retry schedule: %s must be longer than the tier before it (%s)", part, TierName(out[n-1]))
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("retry schedule: %q names no tier", s)
	}
	if len(out) > 32 {
		return nil, fmt.Errorf("retry schedule: %d tiers is more than 32", len(out))
	}
	return out, nil
}

// String renders the schedule as ParseSchedule reads it.
func (s Schedule) String() string {
	names := make([]string, len(s))
	for i, d := range s {
		names[i] = TierName(d)
	}
	return strings.Join(names, ",")
}

// Total is the sum of every delay: how long a delivery can spend in tiers.
func (s Schedule) Total() time.Duration {
	var t time.Duration
	for _, d := range s {
		t += d
	}
	return t
}

// TierName renders a delay as the shortest readable form used in topic
// names: 30s, 2m, 1h, 24h, 1h30m, 90s stays 1m30s.
func TierName(d time.Duration) string {
	s := d.String() // e.g. "1h30m0s", "2m0s", "30s"
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
