package replay

import (
	"testing"
	"time"
)

// ParseTime reads operator and API input: it must never panic, and what it
// accepts is a time no later than now for durations.
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"24h", "7d", "90m", "2026-05-01T10:00:00Z", "", "-1h", "9999999999d", "1e9h", "d", "0d"} {
		f.Add(s)
	}
	now := time.Date(2026, 5, 2, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTime(s, now)
		if err != nil {
			return
		}
		if _, rfcErr := time.Parse(time.RFC3339Nano, s); rfcErr != nil && got.After(now) {
			t.Fatalf("%q: a duration ago gave %s, after now", s, got)
		}
	})
}
