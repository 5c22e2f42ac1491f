package retrytiers_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/retrytiers"
)

func TestParseSchedule(t *testing.T) {
	t.Parallel()
	s, err := retrytiers.ParseSchedule(retrytiers.DefaultSchedule)
	require.NoError(t, err)
	require.Len(t, s, 10)
	require.Equal(t, retrytiers.DefaultSchedule, s.String())
	require.Equal(t, 30*time.Second+2*time.Minute+10*time.Minute+30*time.Minute+(1+2+4+8+12+24)*time.Hour, s.Total())

	for in, want := range map[string]string{
		"abc":       `"abc" is not a duration`,
		"1s,1s":     "must be longer than the tier before it",
		"2m,30s":    "must be longer than the tier before it",
		"500ms":     "shorter than 1s",
		" , ":       "names no tier",
		"1s,-2s,3s": "is shorter than 1s",
	} {
		_, err := retrytiers.ParseSchedule(in)
		require.ErrorContains(t, err, want, "input %q", in)
	}
}

func TestTierName(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		30 * time.Second:                 "30s",
		2 * time.Minute:                  "2m",
		90 * time.Second:                 "1m30s",
		time.Hour:                        "1h",
		24 * time.Hour:                   "24h",
		time.Hour + 30*time.Minute:       "1h30m",
		time.Hour + 30*time.Minute + 5e9: "1h30m5s",
	} {
		require.Equal(t, want, retrytiers.TierName(d))
	}
}
