package dispatcher_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/clock/fakeclock"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/retrytiers"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// retryRecordFor returns the retry record of a delivery on topic, if read.
func (b *bundle) retryRecordFor(topic, deliveryID string, attemptNo int) *delivery.Delivery {
	_, _, retries := b.col.snapshot()
	for _, r := range retries {
		if r.Topic != topic {
			continue
		}
		d, err := delivery.Decode(r)
		if err == nil && d.ID == deliveryID && d.Attempt == attemptNo {
			return d
		}
	}
	return nil
}

// waitHeld waits until the tier gate holds a record (a timer is armed).
func waitHeld(t *testing.T, clk *fakeclock.Clock) {
	t.Helper()
	eventually(t, 20*time.Second, func() bool { n, _ := clk.Pending(); return n > 0 }, "tier gate holds the record")
}

// TestRetryTiers503ThenDeadLetter: an endpoint that always answers 503 is
// tried through every tier in order, each due time inside its jitter
// bounds and never attempted before it, then dead-lettered after 11
// attempts with its provenance.
func TestRetryTiers503ThenDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 3})
	clk := fakeclock.New(t0)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	b.eps.set(dispatcher.Target{ID: "ep_503", URL: rc.srv.URL})
	b.start(dispatcher.Config{AllowPrivateNetworks: true}, runOpts{clock: clk})
	policy := retrytiers.Policy{Schedule: b.tcfg.Schedule, Jitter: 0.1}
	require.Len(t, b.names.Retry, 10)

	d := newDelivery("evt_503", "ep_503")
	b.produce(-1, d)
	var prev *attempt.Record
	for k := 1; k <= 11; k++ {
		eventually(t, 20*time.Second, func() bool { return len(b.col.attemptsFor(d.ID)) >= k }, "attempt %d", k)
		all := b.col.attemptsFor(d.ID)
		require.Len(t, all, k, "exactly one attempt record per attempt")
		a := all[k-1]
		require.Equal(t, k, a.Attempt)
		require.Equal(t, attempt.OutcomeRetry, a.Outcome)
		require.Equal(t, 503, a.StatusCode)
		require.Equal(t, dispatcher.ClassHTTP5xx, a.ErrorClass)
		if k == 1 {
			require.Equal(t, b.names.Deliveries, a.Tier)
		} else {
			require.Equal(t, b.names.Retry[k-2], a.Tier, "tiers in order")
			require.False(t, a.StartedAt.Before(prev.NextDueAt), "attempt %d at %s before its due time %s", k, a.StartedAt, prev.NextDueAt)
		}
		require.Equal(t, k, rc.total())
		if k == 11 {
			require.Equal(t, attempt.NextDeadLetter, a.NextAction)
			require.Equal(t, deadletter.ReasonRetriesExhausted, a.DeadReason)
			require.NotNil(t, a.DLQ)
			break
		}
		require.Equal(t, attempt.NextRetry, a.NextAction)
		lo, hi := policy.Bounds(k-1, a.StartedAt)
		require.False(t, a.NextDueAt.Before(lo) || a.NextDueAt.After(hi), "attempt %d due %s not in [%s, %s]",
			k, a.NextDueAt.Sub(a.StartedAt), lo.Sub(a.StartedAt), hi.Sub(a.StartedAt))

		var next *delivery.Delivery
		eventually(t, 20*time.Second, func() bool { next = b.retryRecordFor(b.names.Retry[k-1], d.ID, k+1); return next != nil },
			"retry record on %s", b.names.Retry[k-1])
		require.True(t, next.DueAt.Equal(a.NextDueAt))
		require.Equal(t, 503, next.LastStatus)
		require.Equal(t, dispatcher.ClassHTTP5xx, next.LastError)
		require.Equal(t, d.Body, next.Body)
		require.Equal(t, d.EventID, next.EventID, "same webhook-id on every retry")

		waitHeld(t, clk)
		require.Len(t, b.col.attemptsFor(d.ID), k, "nothing attempted before the due time")
		clk.Set(a.NextDueAt)
		prev = a
	}

	_, dlq, _ := b.col.snapshot()
	require.Len(t, dlq, 1)
	p, err := deadletter.Read(dlq[0])
	require.NoError(t, err)
	first := b.col.attemptsFor(d.ID)[0]
	last := b.col.attemptsFor(d.ID)[10]
	require.Equal(t, deadletter.Provenance{
		OriginTopic: b.names.Retry[9], OriginPartition: dlq[0].Partition, OriginOffset: p.OriginOffset,
		Attempts: 11, FirstAttempt: first.StartedAt, LastAttempt: last.StartedAt, LastStatus: 503,
		ErrorClass: dispatcher.ClassHTTP5xx, Reason: deadletter.ReasonRetriesExhausted, DeadAt: p.DeadAt,
	}, p)
	require.Equal(t, []byte("ep_503"), dlq[0].Key)
	require.Equal(t, d.Body, dlq[0].Value)
	require.Equal(t, last.DLQ.Offset, dlq[0].Offset)
	require.Greater(t, last.StartedAt.Sub(first.StartedAt), 48*time.Hour, "about two days of retries")
}

// TestRetryAfterHonoured: 429 with Retry-After: 600 goes to the 10m tier
// and is not retried before 600s.
func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	clk := fakeclock.New(t0)
	var calls atomic.Int32
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "600")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	b.eps.set(dispatcher.Target{ID: "ep_429", URL: rc.srv.URL})
	b.start(dispatcher.Config{AllowPrivateNetworks: true}, runOpts{clock: clk})
	d := newDelivery("evt_429", "ep_429")
	b.produce(-1, d)
	eventually(t, 20*time.Second, func() bool { return len(b.col.attemptsFor(d.ID)) == 1 }, "first attempt")
	a := b.col.attemptsFor(d.ID)[0]
	require.Equal(t, dispatcher.ClassHTTP429, a.ErrorClass)
	require.Equal(t, attempt.NextRetry, a.NextAction)
	require.GreaterOrEqual(t, a.NextDueAt.Sub(a.StartedAt), 600*time.Second)
	eventually(t, 20*time.Second, func() bool { return b.retryRecordFor(b.names.Retry[2], d.ID, 2) != nil }, "on the 10m tier")
	require.Equal(t, "webhooks.retry.10m", b.names.Retry[2])

	waitHeld(t, clk)
	clk.Set(a.StartedAt.Add(599 * time.Second))
	n, _ := clk.Pending()
	require.Equal(t, 1, n, "still held at 599s")
	require.Len(t, b.col.attemptsFor(d.ID), 1)
	require.Equal(t, 1, rc.total())
	clk.Set(a.NextDueAt)
	eventually(t, 20*time.Second, func() bool { return len(b.col.attemptsFor(d.ID)) == 2 }, "second attempt")
	a2 := b.col.attemptsFor(d.ID)[1]
	require.Equal(t, attempt.OutcomeDelivered, a2.Outcome)
	require.Equal(t, 2, a2.Attempt)
	require.GreaterOrEqual(t, a2.StartedAt.Sub(a.StartedAt), 600*time.Second)
	require.Equal(t, 2, rc.count("evt_429"), "same webhook-id on the retry")
}

// TestGoneAndClientErrors: 410 dead-letters at once; 404 three times
// dead-letters after the third attempt.
func TestGoneAndClientErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	clk := fakeclock.New(t0)
	gone := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGone) })
	missing := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNotFound) })
	b.eps.set(dispatcher.Target{ID: "ep_gone", URL: gone.srv.URL})
	b.eps.set(dispatcher.Target{ID: "ep_404", URL: missing.srv.URL})
	b.start(dispatcher.Config{AllowPrivateNetworks: true}, runOpts{clock: clk})

	dg, d404 := newDelivery("evt_g", "ep_gone"), newDelivery("evt_404", "ep_404")
	b.produce(-1, dg, d404)

	eventually(t, 20*time.Second, func() bool { return len(b.col.attemptsFor(dg.ID)) == 1 }, "410 attempt")
	ag := b.col.attemptsFor(dg.ID)[0]
	require.Equal(t, attempt.OutcomeGone, ag.Outcome)
	require.Equal(t, attempt.NextDeadLetter, ag.NextAction)
	require.Equal(t, deadletter.ReasonEndpointGone, ag.DeadReason)
	require.Equal(t, 1, gone.total())

	for k := 1; k <= 3; k++ {
		eventually(t, 20*time.Second, func() bool { return len(b.col.attemptsFor(d404.ID)) == k }, "404 attempt %d", k)
		a := b.col.attemptsFor(d404.ID)[k-1]
		require.Equal(t, 404, a.StatusCode)
		if k < 3 {
			require.Equal(t, attempt.OutcomeRetry, a.Outcome)
			eventually(t, 20*time.Second, func() bool { return b.retryRecordFor(b.names.Retry[k-1], d404.ID, k+1) != nil }, "retry %d", k)
			require.Equal(t, k, b.retryRecordFor(b.names.Retry[k-1], d404.ID, k+1).ClientErrors)
			waitHeld(t, clk)
			clk.Set(a.NextDueAt)
			continue
		}
		require.Equal(t, attempt.OutcomePermanent, a.Outcome)
		require.Equal(t, deadletter.ReasonClientError, a.DeadReason)
	}
	require.Equal(t, 3, missing.total())
	_, dlq, _ := b.col.snapshot()
	reasons := map[string]int{}
	for _, r := range dlq {
		p, err := deadletter.Read(r)
		require.NoError(t, err)
		reasons[p.Reason]++
	}
	require.Equal(t, map[string]int{deadletter.ReasonEndpointGone: 1, deadletter.ReasonClientError: 1}, reasons)
}

// TestDisabledAndDeletedEndpoints: no request; dead letters with a reason.
func TestDisabledAndDeletedEndpoints(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	rc := newReceiver(t, nil)
	b.eps.set(dispatcher.Target{ID: "ep_off", URL: rc.srv.URL, Disabled: true})
	b.start(dispatcher.Config{AllowPrivateNetworks: true}, runOpts{})
	off, gone := newDelivery("evt_off", "ep_off"), newDelivery("evt_del", "ep_deleted")
	b.produce(-1, off, gone)
	bad := &kgo.Record{Topic: b.names.Deliveries, Key: []byte("ep_x"), Value: []byte("{}")} // no event id
	require.NoError(t, b.producer.ProduceSync(t.Context(), bad).FirstErr())
	eventually(t, 20*time.Second, func() bool { _, dlq, _ := b.col.snapshot(); return len(dlq) == 3 }, "three dead letters")
	require.Zero(t, rc.total())
	_, dlq, _ := b.col.snapshot()
	reasons := map[string]bool{}
	for _, r := range dlq {
		p, err := deadletter.Read(r)
		require.NoError(t, err)
		reasons[p.Reason] = true
	}
	require.Equal(t, map[string]bool{deadletter.ReasonEndpointDisabled: true, deadletter.ReasonEndpointDeleted: true,
		deadletter.ReasonMalformed: true}, reasons)
	eventually(t, 20*time.Second, func() bool { return len(b.col.attemptsFor(off.ID)) == 1 && len(b.col.attemptsFor(gone.ID)) == 1 }, "attempt records")
	for _, id := range []string{off.ID, gone.ID} {
		a := b.col.attemptsFor(id)[0]
		require.Equal(t, attempt.OutcomeSkipped, a.Outcome)
		require.Equal(t, attempt.NextDeadLetter, a.NextAction)
	}
}
