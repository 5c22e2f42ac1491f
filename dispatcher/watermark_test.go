package dispatcher_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/metrictest"
)

// TestWatermarkNeverSkips: an unfinished record at the head of a partition
// holds the committed offset while the records behind it are delivered; a
// shutdown that abandons it leaves it to the next dispatcher, which re-reads
// from the watermark: the head is attempted again (its abandoned request is
// logged with outcome unknown, from its intent record), and the records
// behind it, answered already, are skipped (read back from the attempts
// topic): none is skipped unanswered, none is sent twice.
func TestWatermarkNeverSkips(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 1})
	release := make(chan struct{})
	slow := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	fast := newReceiver(t, nil)
	b.eps.set(dispatcher.Target{ID: "ep_slow", URL: slow.srv.URL, Timeout: 60 * time.Second})
	b.eps.set(dispatcher.Target{ID: "ep_fast", URL: fast.srv.URL})
	ds := []*delivery.Delivery{newDelivery("evt_head", "ep_slow")}
	for i := range 50 {
		ds = append(ds, newDelivery(fmt.Sprintf("evt_%d", i), "ep_fast"))
	}
	b.produce(0, ds...)

	stop := b.start(dispatcher.Config{AllowPrivateNetworks: true, Timeout: time.Minute, DrainTimeout: 300 * time.Millisecond}, runOpts{})
	eventually(t, 20*time.Second, func() bool { return fast.answered.Load() == 50 }, "records behind the head delivered")
	eventually(t, 20*time.Second, func() bool {
		_, by := b.committed("hookd-dispatchers", b.names.Deliveries)
		at, ok := by[0]
		return ok && at == 0
	}, "watermark committed at the unfinished head")
	_, by := b.committed("hookd-dispatchers", b.names.Deliveries)
	require.Equal(t, int64(0), by[0], "never past the unfinished head")

	stop() // drain times out: the head request is abandoned, not finished
	require.Empty(t, b.col.attemptsFor(ds[0].ID), "an abandoned attempt leaves no record")
	_, by = b.committed("hookd-dispatchers", b.names.Deliveries)
	require.Equal(t, int64(0), by[0])

	close(release)
	reg := prometheus.NewRegistry()
	b.start(dispatcher.Config{AllowPrivateNetworks: true}, runOpts{reg: reg})
	eventually(t, 20*time.Second, func() bool { return len(b.col.attemptsFor(ds[0].ID)) == 2 }, "head delivered by the next dispatcher")
	head := b.col.attemptsFor(ds[0].ID)
	require.Equal(t, attempt.OutcomeUnknown, head[0].Outcome, "the abandoned request is logged")
	require.Equal(t, attempt.ErrorUnknown, head[0].Error)
	require.Equal(t, attempt.OutcomeDelivered, head[1].Outcome)
	require.True(t, head[0].StartedAt.Before(head[1].StartedAt))
	eventually(t, 20*time.Second, func() bool {
		_, by := b.committed("hookd-dispatchers", b.names.Deliveries)
		return by[0] == 51
	}, "committed to the end")
	require.Equal(t, 2, slow.count("evt_head"), "the abandoned head is attempted again")
	require.EqualValues(t, 50, fast.answered.Load(), "the records behind the head are not sent again")
	require.Equal(t, 50.0, metrictest.Value(t, reg, "hookd_dispatcher_resume_skipped_total"))
	require.Equal(t, 1.0, metrictest.Value(t, reg, "hookd_dispatcher_resume_unknown_total"))
	for _, d := range ds[1:] {
		require.Len(t, b.col.attemptsFor(d.ID), 1, d.EventID)
	}
}

// TestBacklogDefersToFirstTier: past the endpoint backlog, records go to
// the first tier without spending an attempt.
func TestBacklogDefersToFirstTier(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 1})
	release := make(chan struct{})
	rc := newReceiver(t, hangUntil(release))
	b.eps.set(dispatcher.Target{ID: "ep_busy", URL: rc.srv.URL, MaxInFlight: 1, Timeout: 60 * time.Second})
	var ds []*delivery.Delivery
	for i := range 20 {
		ds = append(ds, newDelivery(fmt.Sprintf("evt_%d", i), "ep_busy"))
	}
	b.produce(0, ds...)
	b.start(dispatcher.Config{AllowPrivateNetworks: true, Timeout: time.Minute, EndpointBacklog: 5}, runOpts{})
	deferred := func() (n int) {
		att, _, _ := b.col.snapshot()
		for _, a := range att {
			if a.Outcome == attempt.OutcomeDeferred {
				n++
			}
		}
		return n
	}
	// One slot and a backlog of 5: at most 1 + 5 records are taken, the
	// others are deferred. If every record comes in the first poll, 5
	// queue before any starts and 15 are deferred; if the first record
	// came alone (the records were produced in more than one batch and
	// fetched apart, as happens under load), it was in flight before the
	// others were queued and 14 are deferred.
	eventually(t, 20*time.Second, func() bool { return deferred() >= 14 }, "at least 14 deferred: %d", deferred())
	eventually(t, 20*time.Second, func() bool { _, _, r := b.col.snapshot(); return len(r) == deferred() }, "deferred on the first tier")
	require.LessOrEqual(t, deferred(), 15)
	att, _, retries := b.col.snapshot()
	for _, a := range att {
		require.Equal(t, attempt.OutcomeDeferred, a.Outcome)
		require.Equal(t, 1, a.Attempt)
		require.Equal(t, attempt.NextRetry, a.NextAction)
		require.Zero(t, a.StatusCode)
	}
	for _, r := range retries {
		require.Equal(t, b.names.Retry[0], r.Topic)
		d, err := delivery.Decode(r)
		require.NoError(t, err)
		require.Equal(t, 1, d.Attempt, "no attempt spent")
		require.Equal(t, 1, d.Deferrals, "the first deferral in a row")
		require.True(t, d.FirstAttempt.IsZero())
	}
	require.Equal(t, int32(1), rc.maxSeen.Load())
	n := deferred()
	close(release)
	eventually(t, 20*time.Second, func() bool { return int(rc.answered.Load()) == 20-n }, "in-flight and queued delivered: %d", rc.answered.Load())
	require.Equal(t, n, deferred(), "nothing deferred once the endpoint drains")
}

// TestRepeatedDeferralsWaitOnTheSecondTier: a delivery deferred again
// goes to the second tier, not the first (a deferral in a row cycling
// through the first tier costs a retry record and an attempt row each
// time), still without spending an attempt; an attempt ends the run of
// deferrals, so a failure after them retries on the first tier.
func TestRepeatedDeferralsWaitOnTheSecondTier(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 1})
	release := make(chan struct{})
	busy := newReceiver(t, hangUntil(release))
	failing := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	b.eps.set(dispatcher.Target{ID: "ep_busy", URL: busy.srv.URL, MaxInFlight: 1, Timeout: 60 * time.Second})
	b.eps.set(dispatcher.Target{ID: "ep_fail", URL: failing.srv.URL, MaxInFlight: 1, Timeout: 60 * time.Second})
	fail := newDelivery("evt_fail", "ep_fail")
	fail.Deferrals = 3
	b.produce(0, fail)
	var ds []*delivery.Delivery
	for i := range 10 {
		d := newDelivery(fmt.Sprintf("evt_%d", i), "ep_busy")
		d.Deferrals = 1 // deferred once already
		ds = append(ds, d)
	}
	b.produce(0, ds...)
	b.start(dispatcher.Config{AllowPrivateNetworks: true, Timeout: time.Minute, EndpointBacklog: 2}, runOpts{})
	t.Cleanup(func() { close(release) })
	// One slot and a backlog of 2: at most 3 records are taken, 7 or more deferred.
	deferredAgain := func() (n int) {
		_, _, retries := b.col.snapshot()
		for _, r := range retries {
			d, err := delivery.Decode(r)
			require.NoError(t, err)
			if d.EndpointID != "ep_busy" {
				continue
			}
			require.Equal(t, b.names.Retry[1], r.Topic, "a second deferral in a row waits on the second tier")
			require.Equal(t, 2, d.Deferrals)
			require.Equal(t, 1, d.Attempt, "no attempt spent")
			n++
		}
		return n
	}
	eventually(t, 20*time.Second, func() bool { return deferredAgain() >= 7 }, "at least 7 deferred again: %d", deferredAgain())
	eventually(t, 20*time.Second, func() bool { return b.retryRecordFor(b.names.Retry[0], fail.ID, 2) != nil },
		"the failed attempt's retry on the first tier")
	require.Zero(t, b.retryRecordFor(b.names.Retry[0], fail.ID, 2).Deferrals, "an attempt ends the run of deferrals")
}

// TestBreakerOpensAndMetricsHaveNoEndpointLabel: a failing endpoint trips
// its breaker; later deliveries make no request (circuit_open) and go to
// the retry path. No metric carries an endpoint label.
func TestBreakerOpensAndMetricsHaveNoEndpointLabel(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 1})
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) })
	b.eps.set(dispatcher.Target{ID: "ep_down", URL: rc.srv.URL, MaxInFlight: 1})
	var ds []*delivery.Delivery
	for i := range 30 {
		ds = append(ds, newDelivery(fmt.Sprintf("evt_%d", i), "ep_down"))
	}
	b.produce(0, ds...)
	reg := prometheus.NewRegistry()
	b.start(dispatcher.Config{AllowPrivateNetworks: true,
		Breaker: dispatcher.BreakerConfig{MinRequests: 5, FailureRatio: 0.5, OpenFor: time.Hour}}, runOpts{reg: reg})
	eventually(t, 20*time.Second, func() bool { att, _, _ := b.col.snapshot(); return len(att) == 30 }, "30 attempt records")
	att, _, _ := b.col.snapshot()
	byOutcome := map[attempt.Outcome]int{}
	for _, a := range att {
		byOutcome[a.Outcome]++
		require.Equal(t, attempt.NextRetry, a.NextAction)
	}
	require.Equal(t, 5, byOutcome[attempt.OutcomeRetry], "trips after MinRequests failures")
	require.Equal(t, 25, byOutcome[attempt.OutcomeCircuitOpen])
	require.Equal(t, 5, rc.total(), "no request while open")

	mfs, err := reg.Gather()
	require.NoError(t, err)
	found := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				require.NotContains(t, strings.ToLower(l.GetName()), "endpoint", "metric %s", mf.GetName())
				if mf.GetName() == "hookd_dispatcher_breakers" {
					found[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	require.Equal(t, float64(1), found["open"], "one open breaker")
}

// TestPartitionMaxHeldOfOneResumes: with PartitionMaxHeld 1 (the least
// Config accepts), a partition is paused at every record it reads and must
// be resumed once that record is finished. Half of 1 is 0 in integers, so
// a partition resumed only below PartitionMaxHeld/2 was never resumed: its
// first record was delivered and the ones behind it never read.
func TestPartitionMaxHeldOfOneResumes(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 1})
	rc := newReceiver(t, nil)
	b.eps.set(dispatcher.Target{ID: "ep_1", URL: rc.srv.URL})
	var ds []*delivery.Delivery
	for i := range 5 {
		ds = append(ds, newDelivery(fmt.Sprintf("evt_%d", i), "ep_1"))
	}
	b.produce(0, ds...)
	b.start(dispatcher.Config{AllowPrivateNetworks: true, PartitionMaxHeld: 1, MaxPollRecords: 1}, runOpts{})
	t.Cleanup(func() { t.Logf("delivered %d of %d", rc.distinct(), len(ds)) })
	eventually(t, 20*time.Second, func() bool { return rc.distinct() == len(ds) }, "every record delivered")
	eventually(t, 20*time.Second, func() bool {
		_, by := b.committed("hookd-dispatchers", b.names.Deliveries)
		return by[0] == int64(len(ds))
	}, "committed to the end")
}
