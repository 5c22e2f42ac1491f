package dispatcher_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/clock/fakeclock"
)

// TestCustomHeadersOnEveryAttempt: an endpoint's custom headers reach a
// real receiver on the first attempt and on each retry, with the value
// current at each attempt, and never replace the headers hookd sets.
func TestCustomHeadersOnEveryAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	clk := fakeclock.New(t0)
	var mu sync.Mutex
	var seen []http.Header
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		n := len(seen)
		mu.Unlock()
		if n < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	target := func(round string) dispatcher.Target {
		return dispatcher.Target{ID: "ep_h", URL: rc.srv.URL, Headers: map[string]string{
			"X-Tenant": "acme", "x-round": round,
			// Refused by the API and the store; the sender still never
			// lets one replace hookd's own.
			"Webhook-Id": "forged", "content-type": "text/plain"}}
	}
	b.eps.set(target("1"))
	b.start(dispatcher.Config{AllowPrivateNetworks: true, UserAgent: "hookd/test"}, runOpts{clock: clk})
	d := newDelivery("evt_h", "ep_h")
	b.produce(-1, d)
	for k := 1; k <= 3; k++ {
		eventually(t, 20*time.Second, func() bool { return len(b.col.attemptsFor(d.ID)) == k }, "attempt %d", k)
		a := b.col.attemptsFor(d.ID)[k-1]
		if k == 3 {
			require.Equal(t, attempt.OutcomeDelivered, a.Outcome)
			break
		}
		require.Equal(t, attempt.NextRetry, a.NextAction)
		b.eps.set(target([]string{"", "1", "2", "3"}[k+1])) // a change applies to the next attempt
		waitHeld(t, clk)
		clk.Set(a.NextDueAt)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 3)
	for i, h := range seen {
		require.Equal(t, []string{"acme"}, h.Values("X-Tenant"), "attempt %d", i+1)
		require.Equal(t, []string{string(rune('1' + i))}, h.Values("X-Round"), "attempt %d: the value current then", i+1)
		require.Equal(t, []string{d.EventID}, h.Values("Webhook-Id"), "attempt %d", i+1)
		require.Equal(t, []string{"application/json"}, h.Values("Content-Type"), "attempt %d", i+1)
		require.Equal(t, "hookd/test", h.Get("User-Agent"))
	}
}
