package dispatcher_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
)

// TestDeliversSignedRequests: exact body, Standard Webhooks headers that
// verify with the official library under both secrets of a rotation, one
// attempt record each, offsets committed to the end.
func TestDeliversSignedRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	rc := newReceiver(t, nil)
	b.eps.set(dispatcher.Target{ID: "ep_1", URL: rc.srv.URL + "/hook", Secrets: []string{secretB, secretA}})
	b.start(dispatcher.Config{AllowPrivateNetworks: true, UserAgent: "hookd/test"}, runOpts{})

	var ds []*delivery.Delivery
	for i := range 20 {
		ds = append(ds, newDelivery(fmt.Sprintf("evt_%d", i), "ep_1"))
	}
	b.produce(-1, ds...)
	eventually(t, 20*time.Second, func() bool { return len(b.col.attemptsFor(ds[19].ID)) == 1 && rc.distinct() == 20 }, "20 deliveries")

	whA, err := standardwebhooks.NewWebhook(secretA)
	require.NoError(t, err)
	whB, err := standardwebhooks.NewWebhook(secretB)
	require.NoError(t, err)
	for _, d := range ds {
		rc.mu.Lock()
		body, h := rc.bodies[d.EventID], rc.headers[d.EventID]
		rc.mu.Unlock()
		require.Equal(t, d.Body, body, "the exact bytes are sent")
		require.Equal(t, d.EventID, h.Get("webhook-id"))
		require.Equal(t, "application/json", h.Get("content-type"))
		require.Equal(t, "hookd/test", h.Get("user-agent"))
		require.Len(t, strings.Fields(h.Get("webhook-signature")), 2, "one signature per active secret")
		require.NoError(t, whA.Verify(body, h), "old secret verifies during rotation")
		require.NoError(t, whB.Verify(body, h), "new secret verifies")
	}
	eventually(t, 10*time.Second, func() bool {
		n := 0
		for _, d := range ds {
			n += len(b.col.attemptsFor(d.ID))
		}
		return n == 20
	}, "one attempt record per delivery")
	for _, d := range ds {
		a := b.col.attemptsFor(d.ID)[0]
		require.Equal(t, attempt.OutcomeDelivered, a.Outcome)
		require.Equal(t, attempt.NextDone, a.NextAction)
		require.Equal(t, 1, a.Attempt)
		require.Equal(t, 200, a.StatusCode)
		require.Equal(t, b.names.Deliveries, a.Tier)
		require.Equal(t, "ep_1", a.EndpointID)
		require.NotEmpty(t, a.AttemptID)
	}
	eventually(t, 10*time.Second, func() bool {
		sum, _ := b.committed("hookd-dispatchers", b.names.Deliveries)
		return sum == 20
	}, "offsets committed to the end")
}

// TestRedirectNotFollowed: a 302 to another local server is a failed
// attempt and the other server sees nothing.
func TestRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	target := newReceiver(t, nil)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.srv.URL+"/elsewhere", http.StatusFound)
	})
	b.eps.set(dispatcher.Target{ID: "ep_r", URL: rc.srv.URL})
	b.start(dispatcher.Config{AllowPrivateNetworks: true}, runOpts{})
	d := newDelivery("evt_r", "ep_r")
	b.produce(-1, d)
	eventually(t, 20*time.Second, func() bool { return len(b.col.attemptsFor(d.ID)) == 1 }, "attempt record")
	a := b.col.attemptsFor(d.ID)[0]
	require.Equal(t, attempt.OutcomeRetry, a.Outcome)
	require.Equal(t, dispatcher.ClassHTTP3xx, a.ErrorClass)
	require.Equal(t, 302, a.StatusCode)
	require.Equal(t, attempt.NextRetry, a.NextAction)
	require.Zero(t, target.total(), "redirect target must not be called")
	require.Equal(t, 1, rc.total())
}

// TestHugeResponseNotReadWhole: an endless 200 body is cut at the read
// limit; the attempt is delivered and fast.
func TestHugeResponseNotReadWhole(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	var written int64
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		chunk := []byte(strings.Repeat("x", 64<<10))
		for written < 2<<30 { // "2 GB"
			n, err := w.Write(chunk)
			written += int64(n)
			if err != nil {
				return
			}
		}
	})
	b.eps.set(dispatcher.Target{ID: "ep_big", URL: rc.srv.URL})
	b.start(dispatcher.Config{AllowPrivateNetworks: true, ResponseReadLimit: 1 << 20, ResponseExcerpt: 100}, runOpts{})
	d := newDelivery("evt_big", "ep_big")
	b.produce(-1, d)
	eventually(t, 20*time.Second, func() bool { return len(b.col.attemptsFor(d.ID)) == 1 }, "attempt record")
	a := b.col.attemptsFor(d.ID)[0]
	require.Equal(t, attempt.OutcomeDelivered, a.Outcome)
	require.Len(t, a.ResponseExcerpt, 100)
	require.Less(t, a.Duration, 5*time.Second)
	eventually(t, 10*time.Second, func() bool { return rc.inFlight.Load() == 0 }, "server handler ends")
	require.Less(t, written, int64(256<<20), "the body is not read whole")
}

// TestHangingEndpointCostsAtMostTheTimeout.
func TestHangingEndpointCostsAtMostTheTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	b.eps.set(dispatcher.Target{ID: "ep_hang", URL: rc.srv.URL, Timeout: 300 * time.Millisecond})
	b.start(dispatcher.Config{AllowPrivateNetworks: true}, runOpts{})
	d := newDelivery("evt_hang", "ep_hang")
	b.produce(-1, d)
	eventually(t, 20*time.Second, func() bool { return len(b.col.attemptsFor(d.ID)) == 1 }, "attempt record")
	a := b.col.attemptsFor(d.ID)[0]
	require.Equal(t, attempt.OutcomeRetry, a.Outcome)
	require.Equal(t, dispatcher.ClassTimeout, a.ErrorClass)
	require.GreaterOrEqual(t, a.Duration, 300*time.Millisecond)
	require.Less(t, a.Duration, 3*time.Second)
}

// TestSSRFGuardRefusesLocalhost: with the guard on, a name resolving to
// 127.0.0.1 is refused at connect time and dead-lettered.
func TestSSRFGuardRefusesLocalhost(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	rc := newReceiver(t, nil)
	url := strings.Replace(rc.srv.URL, "127.0.0.1", "localhost", 1)
	b.eps.set(dispatcher.Target{ID: "ep_local", URL: url})
	b.start(dispatcher.Config{}, runOpts{})
	d := newDelivery("evt_ssrf", "ep_local")
	b.produce(-1, d)
	eventually(t, 20*time.Second, func() bool { return len(b.col.attemptsFor(d.ID)) == 1 }, "attempt record")
	a := b.col.attemptsFor(d.ID)[0]
	require.Equal(t, attempt.OutcomeRefused, a.Outcome)
	require.Equal(t, dispatcher.ClassSSRF, a.ErrorClass)
	require.Equal(t, attempt.NextDeadLetter, a.NextAction)
	require.Equal(t, deadletter.ReasonSSRFRefused, a.DeadReason)
	require.NotNil(t, a.DLQ)
	require.Zero(t, rc.total())
	_, dlq, _ := b.col.snapshot()
	require.Len(t, dlq, 1)
	p, err := deadletter.Read(dlq[0])
	require.NoError(t, err)
	require.Equal(t, deadletter.ReasonSSRFRefused, p.Reason)
	require.Equal(t, d.Body, dlq[0].Value)
	require.Equal(t, []byte("ep_local"), dlq[0].Key)
}
