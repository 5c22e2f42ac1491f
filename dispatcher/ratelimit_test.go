package dispatcher_test

import (
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/clock/fakeclock"
	"github.com/hookd/hookd/internal/delivery"
)

// arrivals records when each request reached a receiver (wall clock).
type arrivals struct {
	mu sync.Mutex
	at []time.Time
}

func (a *arrivals) handle(http.ResponseWriter, *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.at = append(a.at, time.Now())
}

func (a *arrivals) sorted() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := append([]time.Time(nil), a.at...)
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// maxInWindow is the largest number of times within any window of length w.
func maxInWindow(ts []time.Time, w time.Duration) int {
	best := 0
	for i := range ts {
		n := 0
		for j := i; j < len(ts) && ts[j].Sub(ts[i]) < w; j++ {
			n++
		}
		best = max(best, n)
	}
	return best
}

// TestRateLimitFakeClock: with the clock stopped, a 1/s endpoint gets one
// request while another endpoint on the same partition gets all of its;
// the limited one waits on a timer, not in a loop, and its rate is read
// again at every wake-up, so raising it applies without a new record.
func TestRateLimitFakeClock(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 1})
	clk := fakeclock.New(t0)
	limited, free := newReceiver(t, nil), newReceiver(t, nil)
	b.eps.set(dispatcher.Target{ID: "ep_limited", URL: limited.srv.URL, RatePerSec: 0.01}) // one per 100s
	b.eps.set(dispatcher.Target{ID: "ep_free", URL: free.srv.URL})
	var ds []*delivery.Delivery
	for i := range 5 {
		ds = append(ds, newDelivery(fmt.Sprintf("evt_l%d", i), "ep_limited"))
	}
	for i := range 5 {
		ds = append(ds, newDelivery(fmt.Sprintf("evt_f%d", i), "ep_free"))
	}
	b.produce(0, ds...)
	b.start(dispatcher.Config{AllowPrivateNetworks: true}, runOpts{clock: clk})

	// waitTimer waits until the only armed timer is the limited endpoint's, at at.
	waitTimer := func(at time.Time) {
		t.Helper()
		eventually(t, 20*time.Second, func() bool { n, next := clk.Pending(); return n == 1 && next.Equal(at) },
			"rate timer armed at %s", at)
	}
	eventually(t, 20*time.Second, func() bool { return free.answered.Load() == 5 }, "the other endpoint is not held up")
	eventually(t, 20*time.Second, func() bool { return limited.answered.Load() == 1 }, "first request at once")
	// Waits at most rateRecheck (1s) before reading its rate again.
	waitTimer(t0.Add(time.Second))
	require.Equal(t, 1, limited.total(), "no second request while the clock stands")

	clk.Set(t0.Add(time.Second)) // re-check: still 0.01/s, waits again
	waitTimer(t0.Add(2 * time.Second))
	require.Equal(t, 1, limited.total(), "still over its rate after 1s")

	b.eps.set(dispatcher.Target{ID: "ep_limited", URL: limited.srv.URL, RatePerSec: 100}) // endpoint update
	clk.Set(t0.Add(2 * time.Second))
	eventually(t, 20*time.Second, func() bool { return limited.answered.Load() == 2 }, "raised rate applies at the next wake-up")
	next := t0.Add(2*time.Second + 10*time.Millisecond)
	for k := 3; k <= 5; k++ {
		waitTimer(next)
		require.Equal(t, k-1, limited.total(), "spaced by 10ms at 100/s")
		clk.Set(next)
		eventually(t, 20*time.Second, func() bool { return limited.answered.Load() == int32(k) }, "request %d", k)
		next = next.Add(10 * time.Millisecond)
	}
	require.Equal(t, 5, limited.distinct())
}

// TestRateLimitRealReceiver: 127.0.0.1 receivers and the wall clock. A
// 4/s endpoint whose records come first in the partition gets its requests
// spaced by the rate, counted from the receiver's arrival times, while an
// unlimited endpoint on the same partition finishes long before it.
func TestRateLimitRealReceiver(t *testing.T) {
	t.Parallel()
	const rate, nLimited, nFree = 4.0, 12, 100
	b := setup(t, setupOpts{partitions: 1})
	var limitedAt, freeAt arrivals
	limited, free := newReceiver(t, limitedAt.handle), newReceiver(t, freeAt.handle)
	b.eps.set(dispatcher.Target{ID: "ep_limited", URL: limited.srv.URL, RatePerSec: rate})
	b.eps.set(dispatcher.Target{ID: "ep_free", URL: free.srv.URL})
	var ds []*delivery.Delivery
	for i := range nLimited {
		ds = append(ds, newDelivery(fmt.Sprintf("evt_l%d", i), "ep_limited"))
	}
	for i := range nFree {
		ds = append(ds, newDelivery(fmt.Sprintf("evt_f%d", i), "ep_free"))
	}
	b.produce(0, ds...)
	b.start(dispatcher.Config{AllowPrivateNetworks: true}, runOpts{})
	eventually(t, 40*time.Second, func() bool { return limited.answered.Load() == nLimited && free.answered.Load() == nFree },
		"all delivered: limited %d, free %d", limited.answered.Load(), free.answered.Load())

	la, fa := limitedAt.sorted(), freeAt.sorted()
	span := la[len(la)-1].Sub(la[0])
	// Starts are at least 250ms apart; arrivals may bunch by the network
	// and scheduling jitter, so one extra request per window is tolerated.
	inSecond := maxInWindow(la, time.Second)
	require.LessOrEqual(t, inSecond, int(rate)+2, "requests in any 1s window at the receiver")
	require.LessOrEqual(t, maxInWindow(la, 2*time.Second), 2*int(rate)+2, "requests in any 2s window at the receiver")
	minSpan := time.Duration(float64(nLimited-1)/rate*float64(time.Second)) - 200*time.Millisecond
	require.GreaterOrEqual(t, span, minSpan, "%d requests at %g/s", nLimited, rate)
	freeDone := fa[len(fa)-1].Sub(la[0])
	require.Less(t, freeDone, span, "the unlimited endpoint on the same partition is not held up by the limited one")
	t.Logf("%d requests at %g/s over %s (max %d in a 1s window); %d unlimited deliveries done %s after the first limited one",
		nLimited, rate, span.Round(time.Millisecond), inSecond, nFree, freeDone.Round(time.Millisecond))
}
