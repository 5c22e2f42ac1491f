package dispatcher_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/metrictest"
)

// TestResumeFollowsAFollowUpWithoutItsAttemptRecord: a dispatcher killed
// after a record's retry record (or dead letter) was acknowledged and
// before its attempt record was leaves the follow-up without the attempt
// record that finishes the source. The next owner reads the retry tiers
// and the DLQ back too: the source is not sent again (that would fork the
// delivery into two chains, each ending in a 2xx), the retry record is
// sent once, and the lost attempt record is written from the follow-up.
// An intent with neither is sent again, as before. The DLQ partition
// ends in a transaction's marker, as the router's dead letters leave it.
func TestResumeFollowsAFollowUpWithoutItsAttemptRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 1})
	rc := newReceiver(t, nil)
	b.eps.set(dispatcher.Target{ID: "ep_1", URL: rc.srv.URL})
	var ds []*delivery.Delivery
	for i := range 4 {
		ds = append(ds, newDelivery(fmt.Sprintf("evt_%d", i), "ep_1"))
	}
	b.produce(0, ds...)

	// The dead owner's trail: intents for records 0-2; record 0's retry
	// record (attempt 2, due now) and record 1's dead letter, no attempt
	// record for any of them.
	var ins []*attempt.Intent
	for i := range 3 {
		ins = append(ins, &attempt.Intent{AttemptID: fmt.Sprintf("att_dead_%d", i), Attempt: 1,
			StartedAt: time.Now(), Destination: rc.srv.URL,
			Source: attempt.Position{Topic: b.names.Deliveries, Partition: 0, Offset: int64(i)}})
	}
	intents, err := attempt.IntentBatch(b.names.Intents, ins)
	require.NoError(t, err)
	due := time.Now().Add(-time.Second).UTC().Truncate(time.Millisecond)
	next := *ds[0]
	next.Attempt, next.DueAt, next.FirstAttempt, next.LastStatus, next.LastError = 2, due, time.Now(), 503, dispatcher.ClassHTTP5xx
	retry := next.Record(b.names.Retry[0])
	retry.Partition = 0
	retry.Headers = append(retry.Headers, kgo.RecordHeader{Key: "hookd-source", Value: []byte(b.names.Deliveries + "/0/0")})
	src1 := ds[1].Record(b.names.Deliveries)
	src1.Partition, src1.Offset = 0, 1
	dead := deadletter.Record(b.names.DLQ, src1, deadletter.Provenance{OriginTopic: b.names.Deliveries, OriginPartition: 0,
		OriginOffset: 1, Attempts: 1, LastStatus: 400, ErrorClass: dispatcher.ClassHTTP4xx,
		Reason: deadletter.ReasonClientError, DeadAt: time.Now()})
	cl := b.cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, intents, retry, dead).FirstErr())
	// The router dead-letters in transactions: the DLQ partition ends in a
	// commit marker, which the read-back must read past.
	txn := b.cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID("router-like"))
	require.NoError(t, txn.BeginTransaction())
	require.NoError(t, txn.ProduceSync(ctx, &kgo.Record{Topic: b.names.DLQ, Partition: 0, Value: []byte("{}")}).FirstErr())
	require.NoError(t, txn.EndTransaction(ctx, kgo.TryCommit))

	reg := prometheus.NewRegistry()
	b.start(dispatcher.Config{AllowPrivateNetworks: true, ResumeMargin: 30 * time.Second}, runOpts{reg: reg})
	eventually(t, 20*time.Second, func() bool { return rc.total() >= 3 }, "records 0 (its retry record), 2 and 3 sent")
	eventually(t, 20*time.Second, func() bool {
		_, by := b.committed("hookd-dispatchers", b.names.Deliveries)
		_, tier := b.committed("hookd-dispatchers", b.names.Retry[0])
		return by[0] == 4 && tier[0] == 1
	}, "committed to the end of the deliveries and the tier")
	for i, want := range []int{1, 0, 1, 1} {
		require.Equal(t, want, rc.count(ds[i].EventID), "requests of record %d", i)
	}

	eventually(t, 10*time.Second, func() bool { return len(b.col.attemptsFor(ds[0].ID)) == 2 }, "record 0's attempts")
	zero := b.col.attemptsFor(ds[0].ID)
	require.Equal(t, "att_dead_0", zero[0].AttemptID, "the lost attempt record, written from the retry record")
	require.Equal(t, attempt.OutcomeRetry, zero[0].Outcome)
	require.Equal(t, 503, zero[0].StatusCode)
	require.Equal(t, dispatcher.ClassHTTP5xx, zero[0].ErrorClass)
	require.Equal(t, attempt.NextRetry, zero[0].NextAction)
	require.True(t, due.Equal(zero[0].NextDueAt), "next due %s, want %s", zero[0].NextDueAt, due)
	require.Equal(t, attempt.OutcomeDelivered, zero[1].Outcome, "the retry record, sent once")
	require.Equal(t, 2, zero[1].Attempt)

	eventually(t, 10*time.Second, func() bool { return len(b.col.attemptsFor(ds[1].ID)) == 1 }, "record 1's attempt")
	one := b.col.attemptsFor(ds[1].ID)[0]
	require.Equal(t, "att_dead_1", one.AttemptID, "the lost attempt record, written from the dead letter")
	require.Equal(t, attempt.OutcomePermanent, one.Outcome)
	require.Equal(t, attempt.NextDeadLetter, one.NextAction)
	require.Equal(t, deadletter.ReasonClientError, one.DeadReason)
	require.Equal(t, 400, one.StatusCode)
	require.NotNil(t, one.DLQ)
	require.Equal(t, b.names.DLQ, one.DLQ.Topic)

	eventually(t, 10*time.Second, func() bool { return len(b.col.attemptsFor(ds[2].ID)) == 2 }, "record 2's attempts")
	two := b.col.attemptsFor(ds[2].ID)
	require.Equal(t, attempt.OutcomeUnknown, two[0].Outcome, "an intent with no follow-up: outcome unknown, sent again")
	require.Equal(t, attempt.OutcomeDelivered, two[1].Outcome)

	require.Equal(t, 2.0, metrictest.Value(t, reg, "hookd_dispatcher_resume_skipped_total"))
	require.Equal(t, 3.0, metrictest.Value(t, reg, "hookd_dispatcher_resume_unknown_total"))
	_, dlq, retries := b.col.snapshot()
	require.Len(t, dlq, 2, "no dead letter but the two written here")
	require.Len(t, retries, 1, "no second retry record")
}

// TestRetryRecordNamesItsSource: a retry record carries hookd-source, the
// position of the record whose attempt produced it, which a read-back
// needs to find the record's follow-up.
func TestRetryRecordNamesItsSource(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 1})
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	b.eps.set(dispatcher.Target{ID: "ep_1", URL: rc.srv.URL})
	b.produce(0, newDelivery("evt_a", "ep_1"), newDelivery("evt_b", "ep_1"))
	b.start(dispatcher.Config{AllowPrivateNetworks: true}, runOpts{})
	eventually(t, 20*time.Second, func() bool { _, _, r := b.col.snapshot(); return len(r) == 2 }, "two retry records")
	_, _, retries := b.col.snapshot()
	var got []string
	for _, r := range retries {
		for _, h := range r.Headers {
			if h.Key == "hookd-source" {
				got = append(got, string(h.Value))
			}
		}
	}
	require.ElementsMatch(t, []string{b.names.Deliveries + "/0/0", b.names.Deliveries + "/0/1"}, got)
}
