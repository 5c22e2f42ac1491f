package dispatcher_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/stage"
)

// stageHist returns the sample count and sum of the stage histogram's
// series for st.
func stageHist(t *testing.T, reg *prometheus.Registry, st string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != stage.Name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stage" && l.GetValue() == st {
					return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return 0, 0
}

// TestStageLatency: the dispatcher observes dispatch_wait (the delivery
// record's timestamp to its first request's start), http (the first
// request's duration) and intent (the part of http spent on the request's
// intent record), once per delivery: the retry of a delivery whose first
// attempt failed adds nothing.
func TestStageLatency(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 1, schedule: "1s"})
	const answerAfter = 50 * time.Millisecond
	var failedOnce atomic.Bool
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(answerAfter) // a slow receiver: the http stage includes it
		if r.Header.Get("webhook-id") == "evt_retry" && failedOnce.CompareAndSwap(false, true) {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	b.eps.set(dispatcher.Target{ID: "ep_1", URL: rc.srv.URL, MaxInFlight: 1})
	reg := prometheus.NewRegistry()
	b.start(dispatcher.Config{AllowPrivateNetworks: true, MaxInFlight: 1}, runOpts{reg: reg})

	// A record written 5s before it is read: dispatch_wait counts from
	// the record's timestamp.
	const age = 5 * time.Second
	d := newDelivery("evt_old", "ep_1")
	r := d.Record(b.names.Deliveries)
	r.Timestamp = time.Now().Add(-age)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, b.producer.ProduceSync(ctx, r).FirstErr())
	eventually(t, 20*time.Second, func() bool { n, _ := stageHist(t, reg, stage.HTTP); return n == 1 }, "http observed")
	n, sum := stageHist(t, reg, stage.DispatchWait)
	require.Equal(t, uint64(1), n, "one dispatch_wait")
	require.GreaterOrEqual(t, sum, age.Seconds())
	require.Less(t, sum, age.Seconds()+15)
	_, httpSum := stageHist(t, reg, stage.HTTP)
	require.GreaterOrEqual(t, httpSum, answerAfter.Seconds())
	n, intentSum := stageHist(t, reg, stage.Intent)
	require.Equal(t, uint64(1), n, "one intent")
	require.Greater(t, intentSum, 0.0)
	require.Less(t, intentSum, httpSum-answerAfter.Seconds()+1e-9, "the intent is a part of http, before the receiver's answer")

	// A first attempt that fails, then its retry: only the first counts.
	b.produce(-1, newDelivery("evt_retry", "ep_1"))
	eventually(t, 30*time.Second, func() bool {
		return rc.count("evt_retry") == 2 && len(b.col.attemptsFor(newDelivery("evt_retry", "ep_1").ID)) == 2
	},
		"evt_retry attempted twice")
	n, _ = stageHist(t, reg, stage.DispatchWait)
	require.Equal(t, uint64(2), n, "dispatch_wait: first attempts only")
	n, _ = stageHist(t, reg, stage.HTTP)
	require.Equal(t, uint64(2), n, "http: first attempts only")
	n, _ = stageHist(t, reg, stage.Intent)
	require.Equal(t, uint64(2), n, "intent: first attempts only")
}
