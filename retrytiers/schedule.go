// Package retrytiers owns the rules of hookd's tiered retries: the retry
// schedule (one tier topic per delay, named by TierName), the due-time
// arithmetic (jitter, Retry-After) and the Gate that pauses a tier
// partition until its head record is due. It has no consumer of its own:
// the dispatcher's consumer group fetches the tier topics and holds them
// back with a Gate. It never sends HTTP, never fetches or produces records
// and never sleeps while holding records.
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
