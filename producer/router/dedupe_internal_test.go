package router

import (
	"fmt"
	"math"
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
	h := newHasher()
	s := newSeen()
	add := func(k string, d time.Duration) { s.add(h.key(k), t0.Add(d).UnixMilli(), window, maxKeys) }
	dup := func(k string, d time.Duration) bool { return s.dup(h.key(k), t0.Add(d).UnixMilli(), window) }
	for i := range 3 {
		add(fmt.Sprint("k", i), time.Duration(i)*time.Minute)
	}
	require.True(t, dup("k0", 59*time.Minute))
	require.False(t, dup("k0", 61*time.Minute), "a repeat past the window is new")

	add("k3", 3*time.Minute)
	require.False(t, dup("k0", 4*time.Minute), "the oldest key is forgotten beyond maxKeys")
	require.True(t, dup("k1", 4*time.Minute))
	require.Len(t, s.at, maxKeys)

	add("k1", 90*time.Minute) // k1 again, past the window: its new time counts
	require.True(t, dup("k1", 91*time.Minute))
	require.False(t, dup("k2", 91*time.Minute), "stream time moved k2 out of the window")
	require.Equal(t, map[key]int64{h.key("k1"): t0.Add(90 * time.Minute).UnixMilli()}, s.at)
}

// Keys of distinct events differ, the same event's key is the same every
// time, and two routers (seeds) disagree: a key is never stored or
// compared outside the process that made it.
func TestDedupeKeys(t *testing.T) {
	t.Parallel()
	h, other := newHasher(), newHasher()
	keys := map[key]string{}
	for i := range 20000 {
		name := dedupeKey(fmt.Sprint("acct_", i%100), fmt.Sprint("evt_", i))
		k := h.key(name)
		if prev, ok := keys[k]; ok {
			t.Fatalf("%s collides with %s", name, prev)
		}
		keys[k] = name
		if k != h.key(name) || k == other.key(name) {
			t.Fatalf("%s: key not stable within a router or equal across routers", name)
		}
	}
}

// A timestamp at either end of int64 milliseconds neither wraps a
// distance into the window nor panics.
func TestSeenExtremeTimestamps(t *testing.T) {
	t.Parallel()
	h, s := newHasher(), newSeen()
	s.add(h.key("k"), math.MinInt64+1, time.Hour, 10)
	require.False(t, s.dup(h.key("k"), math.MaxInt64, time.Hour), "a distance past int64 is past the window")
	s.add(h.key("j"), math.MaxInt64, time.Hour, 10)
	require.NotContains(t, s.at, h.key("k"), "evicted: stream time is far past its timestamp")
}
