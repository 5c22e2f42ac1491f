package dispatcher_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
)

// TestFIFORetriesInPlaceAndDeadLettersFirst: a FIFO endpoint whose first
// event always fails (schedule 1s, 2s) gets it three times, the schedule's
// delays apart, then the later events in order, the first of them only
// after the dead letter was written; nothing goes to a retry tier, and
// the failed attempts are logged with their due time.
func TestFIFORetriesInPlaceAndDeadLettersFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 1, schedule: "1s,2s"})
	type arrival struct {
		id string
		at time.Time
	}
	var mu sync.Mutex
	var arrivals []arrival
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("webhook-id")
		mu.Lock()
		arrivals = append(arrivals, arrival{id, time.Now()})
		mu.Unlock()
		if id == "evt_0" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	b.eps.set(dispatcher.Target{ID: "ep_1", URL: rc.srv.URL, FIFO: true, MaxInFlight: 8})
	var ds []*delivery.Delivery
	for i := range 5 {
		ds = append(ds, newDelivery(fmt.Sprintf("evt_%d", i), "ep_1"))
	}
	b.produce(0, ds...)
	b.start(dispatcher.Config{AllowPrivateNetworks: true}, runOpts{})
	eventually(t, 30*time.Second, func() bool { return rc.count("evt_4") == 1 }, "the last event delivered")

	eventually(t, 10*time.Second, func() bool { return len(b.col.attemptsFor(ds[4].ID)) == 1 }, "the attempt records")
	mu.Lock()
	defer mu.Unlock()
	var ids []string
	for _, a := range arrivals {
		ids = append(ids, a.id)
	}
	require.Equal(t, []string{"evt_0", "evt_0", "evt_0", "evt_1", "evt_2", "evt_3", "evt_4"}, ids)
	require.GreaterOrEqual(t, arrivals[1].at.Sub(arrivals[0].at), time.Second, "the first retry after 1s")
	require.GreaterOrEqual(t, arrivals[2].at.Sub(arrivals[1].at), 2*time.Second, "the second after 2s")
	require.EqualValues(t, 1, rc.maxSeen.Load(), "one request at a time")

	_, dlq, retries := b.col.snapshot()
	require.Empty(t, retries, "a FIFO endpoint's retries do not go through the tiers")
	require.Len(t, dlq, 1)
	p, err := deadletter.Read(dlq[0])
	require.NoError(t, err)
	require.Equal(t, deadletter.ReasonRetriesExhausted, p.Reason)
	require.Equal(t, 3, p.Attempts)
	require.False(t, dlq[0].Timestamp.After(arrivals[3].at), "the dead letter written before the next event went out")
	att := b.col.attemptsFor(ds[0].ID)
	require.Len(t, att, 3)
	for i, a := range att {
		require.Equal(t, i+1, a.Attempt)
		require.Equal(t, b.names.Deliveries, a.Tier)
	}
	require.Equal(t, attempt.NextRetry, att[0].NextAction)
	require.False(t, att[0].NextDueAt.IsZero(), "a retry in place is logged with its due time")
	require.Equal(t, attempt.NextDeadLetter, att[2].NextAction)
}

// TestFIFOAttemptRecordsCarryTraceparent: with tracing on, a FIFO
// endpoint's attempt records carry their attempt span's traceparent, as
// other endpoints' do: the failed attempt retried in place (its record
// produced by fifo.go) and the delivered one.
func TestFIFOAttemptRecordsCarryTraceparent(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 1, schedule: "1s"})
	var calls atomic.Int32
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	b.eps.set(dispatcher.Target{ID: "ep_1", URL: rc.srv.URL, FIFO: true})
	d := newDelivery("evt_0", "ep_1")
	b.produce(0, d)
	spans := tracetest.NewSpanRecorder()
	prov := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { require.NoError(t, prov.Shutdown(context.Background())) })
	b.start(dispatcher.Config{AllowPrivateNetworks: true}, runOpts{tracer: prov.Tracer("t")})
	eventually(t, 30*time.Second, func() bool { return len(b.col.attemptsFor(d.ID)) == 2 }, "both attempt records")

	att := b.col.attemptsFor(d.ID)
	require.Equal(t, attempt.NextRetry, att[0].NextAction, "the first attempt retried in place")
	require.Equal(t, attempt.NextDone, att[1].NextAction)
	ended := spans.Ended()
	require.Len(t, ended, 2, "one span per attempt")
	for i, a := range att {
		tp := b.col.traceparent(a.AttemptID)
		require.NotEmpty(t, tp, "attempt %d's record has no traceparent", a.Attempt)
		require.Equal(t, ended[i].SpanContext().SpanID().String(), tp[36:52], "attempt %d: its own span's traceparent", a.Attempt)
	}
}

// TestResumeDoesNotSkipRetriedInPlace: a FIFO record whose attempt
// record says it was retried in place (hookd-retry-in-place) was not
// answered: the next owner of its partition sends it again, and skips
// the answered record after it.
func TestResumeDoesNotSkipRetriedInPlace(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 1})
	rc := newReceiver(t, nil)
	b.eps.set(dispatcher.Target{ID: "ep_1", URL: rc.srv.URL, FIFO: true})
	ds := []*delivery.Delivery{newDelivery("evt_0", "ep_1"), newDelivery("evt_1", "ep_1")}
	b.produce(0, ds...)
	rec := func(i int, outcome attempt.Outcome, next attempt.NextAction) *kgo.Record {
		r := attempt.Record{AttemptID: fmt.Sprintf("att_dead_%d", i), DeliveryID: ds[i].ID, EventID: ds[i].EventID,
			EventType: ds[i].EventType, EndpointID: "ep_1", Account: "acct_1", EventCreated: ds[i].EventCreated,
			Attempt: 1, Tier: b.names.Deliveries, StartedAt: time.Now(), Outcome: outcome, NextAction: next,
			StatusCode: 503, Source: &attempt.Position{Topic: b.names.Deliveries, Partition: 0, Offset: int64(i)}}
		if next == attempt.NextRetry {
			r.NextDueAt = time.Now().Add(time.Hour)
		}
		kr, err := r.KafkaRecord(b.names.Attempts)
		require.NoError(t, err)
		kr.Partition = 0
		return kr
	}
	inPlace := rec(0, attempt.OutcomeRetry, attempt.NextRetry)
	inPlace.Headers = append(inPlace.Headers, kgo.RecordHeader{Key: dispatcher.RetryInPlaceHeader})
	cl := b.cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, inPlace, rec(1, attempt.OutcomeDelivered, attempt.NextDone)).FirstErr())

	b.start(dispatcher.Config{AllowPrivateNetworks: true}, runOpts{})
	eventually(t, 20*time.Second, func() bool { return rc.count("evt_0") == 1 }, "the record retried in place sent again")
	eventually(t, 20*time.Second, func() bool {
		_, by := b.committed("hookd-dispatchers", b.names.Deliveries)
		return by[0] == 2
	}, "committed to the end")
	require.Equal(t, 1, rc.count("evt_0"), "the record retried in place sent again")
	require.Equal(t, 0, rc.count("evt_1"), "the answered record skipped")
}
