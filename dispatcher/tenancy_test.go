package dispatcher_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/metrictest"
)

// hangingReceiver answers only once release is called (or the request is
// cancelled). Defer release: deferred calls run before the cleanups, so
// the dispatcher's drain does not wait for the hang.
func hangingReceiver(t testing.TB) (rc *receiver, release func()) {
	t.Helper()
	ch := make(chan struct{})
	rc = newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-ch:
		case <-r.Context().Done():
		}
	})
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release)
	return rc, release
}

// TestEndpointInFlightIsCappedByTheOperator: an endpoint that sets
// max_in_flight 100000 (issue 11 item 3) gets MaxEndpointInFlight.
func TestEndpointInFlightIsCappedByTheOperator(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 1})
	rc, release := hangingReceiver(t)
	defer release()
	b.eps.set(dispatcher.Target{ID: "ep_wide", URL: rc.srv.URL, MaxInFlight: 100_000, Timeout: time.Minute})
	var ds []*delivery.Delivery
	for i := range 100 {
		ds = append(ds, newDelivery(fmt.Sprintf("evt_%d", i), "ep_wide"))
	}
	b.produce(0, ds...)
	reg := prometheus.NewRegistry()
	b.start(dispatcher.Config{AllowPrivateNetworks: true, Timeout: time.Minute, MaxEndpointInFlight: 8}, runOpts{reg: reg})
	// Every start of a batch happens under one lock: once 8 requests
	// arrived and the gauge says 8, no more are coming.
	eventually(t, 20*time.Second, func() bool {
		return rc.inFlight.Load() == 8 && metrictest.Value(t, reg, "hookd_dispatcher_in_flight_requests") == 8
	}, "8 requests in flight (receiver and gauge)")
	require.Equal(t, int32(8), rc.maxSeen.Load(), "never more than --max-endpoint-in-flight")
}

// TestEndpointTimeoutIsCappedByTheOperator: an endpoint's own timeout
// never exceeds the operator's request timeout.
func TestEndpointTimeoutIsCappedByTheOperator(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	rc, release := hangingReceiver(t)
	defer release()
	b.eps.set(dispatcher.Target{ID: "ep_long", URL: rc.srv.URL, Timeout: 10 * time.Minute})
	b.eps.set(dispatcher.Target{ID: "ep_short", URL: rc.srv.URL, Timeout: 200 * time.Millisecond})
	b.start(dispatcher.Config{AllowPrivateNetworks: true, ConnectTimeout: 300 * time.Millisecond, Timeout: 600 * time.Millisecond}, runOpts{})
	long, short := newDelivery("evt_long", "ep_long"), newDelivery("evt_short", "ep_short")
	b.produce(-1, long, short)
	eventually(t, 20*time.Second, func() bool {
		return len(b.col.attemptsFor(long.ID)) == 1 && len(b.col.attemptsFor(short.ID)) == 1
	}, "attempt records")
	a := b.col.attemptsFor(long.ID)[0]
	require.Equal(t, dispatcher.ClassTimeout, a.ErrorClass)
	require.GreaterOrEqual(t, a.Duration, 600*time.Millisecond)
	require.Less(t, a.Duration, 5*time.Second, "the operator's 600ms, not the endpoint's 10m")
	a = b.col.attemptsFor(short.ID)[0]
	require.Equal(t, dispatcher.ClassTimeout, a.ErrorClass)
	require.Less(t, a.Duration, 600*time.Millisecond, "a shorter endpoint timeout applies")
}

// TestAccountMismatchIsNeverSent is issue 11 item 1 at the dispatcher: a
// record whose hookd-account is not its endpoint's account (an endpoint id
// deleted by one account and re-created by another) is dead-lettered as
// account_mismatch, first attempt or retry, and never POSTed.
func TestAccountMismatchIsNeverSent(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	rc := newReceiver(t, nil)
	b.eps.set(dispatcher.Target{ID: "ep_shared", Account: "acct_A", URL: rc.srv.URL})
	ok := newDelivery("evt_ok", "ep_shared")
	ok.Account = "acct_A"
	first := newDelivery("evt_first", "ep_shared")
	first.Account = "acct_B"
	retry := newDelivery("evt_retry", "ep_shared")
	retry.Account = "acct_B"
	retry.Attempt, retry.FirstAttempt, retry.LastStatus, retry.DueAt = 2, time.Now().Add(-time.Minute), 500, time.Now().Add(-time.Second)
	b.produce(-1, ok, first)
	rr := retry.Record(b.names.Retry[0])
	require.NoError(t, b.producer.ProduceSync(t.Context(), rr).FirstErr())
	b.start(dispatcher.Config{AllowPrivateNetworks: true}, runOpts{})

	eventually(t, 20*time.Second, func() bool { _, dlq, _ := b.col.snapshot(); return len(dlq) == 2 }, "two dead letters")
	eventually(t, 20*time.Second, func() bool { return rc.count("evt_ok") == 1 }, "the matching record is delivered")
	require.Zero(t, rc.count("evt_first"))
	require.Zero(t, rc.count("evt_retry"))
	_, dlq, _ := b.col.snapshot()
	for _, r := range dlq {
		p, err := deadletter.Read(r)
		require.NoError(t, err)
		require.Equal(t, deadletter.ReasonAccountMismatch, p.Reason)
		d, err := delivery.Decode(r)
		require.NoError(t, err)
		require.Equal(t, "acct_B", d.Account, "the record is kept as it was")
	}
	for _, d := range []*delivery.Delivery{first, retry} {
		eventually(t, 20*time.Second, func() bool { return len(b.col.attemptsFor(d.ID)) == 1 }, "attempt record of %s", d.EventID)
		a := b.col.attemptsFor(d.ID)[0]
		require.Equal(t, attempt.OutcomeSkipped, a.Outcome)
		require.Equal(t, dispatcher.ClassAccountMismatch, a.ErrorClass)
		require.Equal(t, deadletter.ReasonAccountMismatch, a.DeadReason)
		require.Zero(t, a.StatusCode)
	}
	require.Equal(t, 1, rc.total())
}

// syncBuffer is a bytes.Buffer safe for the logger's and the test's
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(substr string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range strings.Split(s.b.String(), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// TestSSRFRefusalWarnsOncePerEndpoint is issue 11 item 4 at the
// dispatcher: refusals were silent. Now each endpoint's refusals log one
// WARN naming the endpoint, its account and the refused address, not one
// per delivery.
func TestSSRFRefusalWarnsOncePerEndpoint(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	rc := newReceiver(t, nil)
	b.eps.set(dispatcher.Target{ID: "ep_local", Account: "acct_A", URL: rc.srv.URL})
	b.eps.set(dispatcher.Target{ID: "ep_local2", Account: "acct_B", URL: strings.Replace(rc.srv.URL, "127.0.0.1", "localhost", 1)})
	const n = 20
	var ds []*delivery.Delivery
	for i := range n {
		d := newDelivery(fmt.Sprintf("evt_%d", i), "ep_local")
		d.Account = "acct_A"
		ds = append(ds, d)
	}
	d2 := newDelivery("evt_other", "ep_local2")
	d2.Account = "acct_B"
	ds = append(ds, d2)
	b.produce(-1, ds...)
	var logs syncBuffer
	b.start(dispatcher.Config{}, runOpts{log: &logs})
	eventually(t, 20*time.Second, func() bool { _, dlq, _ := b.col.snapshot(); return len(dlq) == n+1 }, "every delivery refused")
	require.Zero(t, rc.total())

	warns := logs.lines("level=WARN")
	require.Len(t, warns, 2, "one WARN per endpoint, not per delivery:\n%s", strings.Join(warns, "\n"))
	byEndpoint := map[string]string{}
	for _, w := range warns {
		require.Contains(t, w, "refused by the SSRF guard")
		require.Contains(t, w, "address=127.0.0.1")
		require.Contains(t, w, "address_class=loopback")
		for _, id := range []string{"ep_local", "ep_local2"} {
			if strings.Contains(w, "endpoint_id="+id+" ") {
				byEndpoint[id] = w
			}
		}
	}
	require.Contains(t, byEndpoint["ep_local"], "account=acct_A")
	require.Contains(t, byEndpoint["ep_local2"], "account=acct_B")
	require.Contains(t, byEndpoint["ep_local2"], "host=localhost:")
}
