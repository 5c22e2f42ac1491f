package router

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A partition's state forgets keys past the window (in record time) and
// beyond maxKeys, oldest first, and a key added again is kept by its new
// time.
func TestSeenEvictsByWindowAndCap(t *testing.T) {
	t.Parallel()
	const window, maxKeys = time.Hour, 3
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newSeen()
	for i := range 3 {
		s.add(fmt.Sprint("k", i), t0.Add(time.Duration(i)*time.Minute), window, maxKeys)
	}
	require.True(t, s.dup("k0", t0.Add(59*time.Minute), window))
	require.False(t, s.dup("k0", t0.Add(61*time.Minute), window), "a repeat past the window is new")

	s.add("k3", t0.Add(3*time.Minute), window, maxKeys)
	require.False(t, s.dup("k0", t0.Add(4*time.Minute), window), "the oldest key is forgotten beyond maxKeys")
	require.True(t, s.dup("k1", t0.Add(4*time.Minute), window))
	require.Len(t, s.at, maxKeys)

	s.add("k1", t0.Add(90*time.Minute), window, maxKeys) // k1 again, past the window: its new time counts
	require.True(t, s.dup("k1", t0.Add(91*time.Minute), window))
	require.False(t, s.dup("k2", t0.Add(91*time.Minute), window), "stream time moved k2 out of the window")
	require.Equal(t, map[string]time.Time{"k1": t0.Add(90 * time.Minute)}, s.at)
}
