package dispatcher

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSlowWatch: a produce unanswered for slowTicks whole ticks is
// reported at the next tick (it may have started late in its own), once; answered ones never are, and a bucket reused by new
// produces still reports an old one left in it.
func TestSlowWatch(t *testing.T) {
	var w slowWatch
	ticks := func(n int) (slow int) {
		for range n {
			if w.tick() {
				slow++
			}
		}
		return slow
	}
	answered := w.start()
	stuck := w.start()
	w.done(answered)
	require.Equal(t, 0, ticks(slowTicks), "not slow within slowTicks ticks")
	require.Equal(t, 1, ticks(1), "slow at the next tick")
	w.done(stuck)
	require.Equal(t, 0, ticks(3*slowBuckets), "answered: never again")

	left := w.start()
	require.Equal(t, 1, ticks(slowTicks+1), "slow once")
	for range slowBuckets {
		w.done(w.start()) // new produces through every bucket
		ticks(1)
	}
	require.Positive(t, ticks(slowBuckets), "still unanswered: reported again")
	w.done(left)
	require.Equal(t, 0, ticks(3*slowBuckets))
}

// TestSlowWatchAllocates nothing per produce.
func TestSlowWatchAllocates(t *testing.T) {
	var w slowWatch
	require.Zero(t, testing.AllocsPerRun(100, func() { w.done(w.start()) }))
}
