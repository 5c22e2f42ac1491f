package dispatcher_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/metrictest"
)

// TestResumeSkipsAnsweredAndRecordsUnknown: what a dispatcher killed with
// kill -9 leaves behind (nothing committed; attempt records for records
// past the committed offset; an intent whose request got no attempt
// record) is read back by the next owner of the partition: the answered
// records are not sent again, the intent is logged as an attempt with
// outcome unknown and its delivery is sent again, and an attempt record
// older than the read-back's start (the first record's time less
// ResumeMargin) is not looked at.
//
// The unknown requests' attempt records are made from their delivery
// records: found in the partition's first fetch, or, when that fetch
// stops before them (MaxPollRecords 1), read again by offset.
func TestResumeSkipsAnsweredAndRecordsUnknown(t *testing.T) {
	t.Parallel()
	for _, maxPoll := range []int{0, 1} {
		t.Run(fmt.Sprintf("max_poll_records=%d", maxPoll), func(t *testing.T) {
			t.Parallel()
			testResumeSkipsAnsweredAndRecordsUnknown(t, maxPoll)
		})
	}
}

func testResumeSkipsAnsweredAndRecordsUnknown(t *testing.T, maxPoll int) {
	b := setup(t, setupOpts{partitions: 1})
	rc := newReceiver(t, nil)
	b.eps.set(dispatcher.Target{ID: "ep_1", URL: rc.srv.URL})
	var ds []*delivery.Delivery
	for i := range 10 {
		ds = append(ds, newDelivery(fmt.Sprintf("evt_%d", i), "ep_1"))
	}
	b.produce(0, ds...)

	// The dead owner's trail on attempts partition 0: records 1-6
	// answered, an intent for 7, and an answer for 8 from long ago.
	var trail []*kgo.Record
	rec := func(i int, outcome attempt.Outcome) *kgo.Record {
		r := attempt.Record{AttemptID: fmt.Sprintf("att_dead_%d", i), DeliveryID: ds[i].ID, EventID: ds[i].EventID,
			EventType: ds[i].EventType, EndpointID: "ep_1", Account: "acct_1", EventCreated: ds[i].EventCreated,
			Attempt: 1, Tier: b.names.Deliveries, StartedAt: time.Now(), Outcome: outcome, NextAction: attempt.NextDone,
			Source: &attempt.Position{Topic: b.names.Deliveries, Partition: 0, Offset: int64(i)}}
		if outcome == attempt.OutcomeUnknown {
			r.NextAction, r.Error = attempt.NextRetry, attempt.ErrorUnknown
		}
		kr, err := r.KafkaRecord(b.names.Attempts)
		require.NoError(t, err)
		kr.Partition = 0
		return kr
	}
	for i := 1; i <= 6; i++ {
		trail = append(trail, rec(i, attempt.OutcomeDelivered))
	}
	// One intent record for the requests of 6 (answered) and 7 (not).
	var both []*attempt.Intent
	for _, i := range []int{6, 7} {
		both = append(both, &attempt.Intent{AttemptID: fmt.Sprintf("att_dead_%d", i), Attempt: 1,
			StartedAt: time.Now(), Destination: rc.srv.URL,
			Source: attempt.Position{Topic: b.names.Deliveries, Partition: 0, Offset: int64(i)}})
	}
	intent, err := attempt.IntentBatch(b.names.Intents, both)
	require.NoError(t, err)
	// An intent on the attempts topic, as dispatchers before the intents
	// topic wrote them (the whole attempt record), counts too.
	legacy := rec(9, attempt.OutcomeUnknown)
	legacy.Headers = []kgo.RecordHeader{{Key: attempt.IntentHeader}}
	old := rec(8, attempt.OutcomeDelivered)
	old.Timestamp = time.Now().Add(-2 * time.Minute)
	trail = append([]*kgo.Record{old}, append(trail, intent, legacy)...)
	cl := b.cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, trail...).FirstErr())

	reg := prometheus.NewRegistry()
	b.start(dispatcher.Config{AllowPrivateNetworks: true, ResumeMargin: 30 * time.Second, MaxPollRecords: maxPoll}, runOpts{reg: reg})
	eventually(t, 20*time.Second, func() bool { return rc.total() >= 4 }, "the unanswered records sent")
	eventually(t, 20*time.Second, func() bool {
		_, by := b.committed("hookd-dispatchers", b.names.Deliveries)
		return by[0] == 10
	}, "committed to the end")
	for i, d := range ds {
		want := 0
		if i == 0 || i >= 7 {
			want = 1
		}
		require.Equal(t, want, rc.count(d.EventID), "requests of record %d", i)
	}
	eventually(t, 10*time.Second, func() bool { return len(b.col.attemptsFor(ds[7].ID)) == 2 }, "record 7's attempts")
	seven := b.col.attemptsFor(ds[7].ID)
	require.Equal(t, "att_dead_7", seven[0].AttemptID, "the intent, produced again as the attempt record")
	require.Equal(t, attempt.OutcomeUnknown, seven[0].Outcome)
	require.Equal(t, attempt.ErrorUnknown, seven[0].Error)
	require.Equal(t, ds[7].EventID, seven[0].EventID, "made from the delivery record")
	require.Equal(t, rc.srv.URL, seven[0].Destination)
	require.Equal(t, seven[1].BodySHA256, seven[0].BodySHA256, "the digest of the body the request sent")
	require.Equal(t, attempt.Position{Topic: b.names.Deliveries, Partition: 0, Offset: 7}, *seven[0].Source)
	require.Equal(t, attempt.OutcomeDelivered, seven[1].Outcome)
	require.Equal(t, attempt.Position{Topic: b.names.Deliveries, Partition: 0, Offset: 7}, *seven[1].Source)
	eventually(t, 10*time.Second, func() bool { return len(b.col.attemptsFor(ds[9].ID)) == 2 }, "record 9's attempts")
	nine := b.col.attemptsFor(ds[9].ID)
	require.Equal(t, "att_dead_9", nine[0].AttemptID, "the legacy intent, produced again as the attempt record")
	require.Equal(t, attempt.OutcomeUnknown, nine[0].Outcome)
	require.Equal(t, 6.0, metrictest.Value(t, reg, "hookd_dispatcher_resume_skipped_total"))
	require.Equal(t, 2.0, metrictest.Value(t, reg, "hookd_dispatcher_resume_unknown_total"))
	require.GreaterOrEqual(t, metrictest.Value(t, reg, "hookd_dispatcher_resume_seconds"), 1.0, "the read-back timed")
	require.GreaterOrEqual(t, metrictest.Value(t, reg, "hookd_dispatcher_intents_total"), 4.0, "one intent per request")
	require.GreaterOrEqual(t, metrictest.Value(t, reg, "hookd_dispatcher_intent_records_total"), 1.0)

	// Every request made has its intent, under the attempt record's id.
	b.col.mu.Lock()
	defer b.col.mu.Unlock()
	intents := map[string]bool{}
	for _, in := range b.col.intents {
		intents[in.AttemptID] = true
	}
	for _, a := range b.col.attempts {
		if a.AttemptID != "att_dead_7" && a.AttemptID != "att_dead_9" && a.StatusCode != 0 {
			require.True(t, intents[a.AttemptID], "attempt %s without an intent", a.AttemptID)
		}
	}
}

// TestScaleUpAndDownSendsNothingTwice: under a steady stream, a second
// dispatcher joins (a rebalance: the first revokes every partition, waits
// for its requests and commits) and leaves again (a graceful stop); every
// record answered past a committed offset is read back by its next owner
// and skipped. Every webhook-id reaches the receiver exactly once.
func TestScaleUpAndDownSendsNothingTwice(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 4})
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { time.Sleep(5 * time.Millisecond) })
	const endpoints, total = 8, 1600
	for e := range endpoints {
		b.eps.set(dispatcher.Target{ID: fmt.Sprintf("ep_%d", e), URL: rc.srv.URL})
	}
	var produced atomic.Int32
	streamDone := make(chan struct{})
	go func() {
		defer close(streamDone)
		for i := 0; i < total; i += 40 {
			var ds []*delivery.Delivery
			for j := i; j < i+40; j++ {
				ds = append(ds, newDelivery(fmt.Sprintf("evt_%d", j), fmt.Sprintf("ep_%d", j%endpoints)))
			}
			b.produce(-1, ds...)
			produced.Add(40)
			time.Sleep(10 * time.Millisecond) // a stream, not a burst
		}
	}()
	cfg := dispatcher.Config{AllowPrivateNetworks: true, CommitInterval: time.Hour} // commits only at hand-overs
	b.start(cfg, runOpts{})
	eventually(t, 20*time.Second, func() bool { return rc.total() >= total/4 }, "a quarter delivered by one dispatcher")
	stopSecond := b.start(cfg, runOpts{})
	eventually(t, 20*time.Second, func() bool { return rc.total() >= total/2 }, "half delivered by two")
	stopSecond()
	<-streamDone
	eventually(t, 30*time.Second, func() bool { return rc.distinct() == total }, "every delivery at the receiver")
	dups := 0
	for i := range total {
		if n := rc.count(fmt.Sprintf("evt_%d", i)); n > 1 {
			dups += n - 1
		}
	}
	require.Zero(t, dups, "duplicates over a scale-up and a scale-down")
	require.Equal(t, total, rc.total())
}

// TestResumeWaitsForAPreviousOwnersRequest: a partition lost without a
// revoke (its owner's membership ended under it: a broker restarted
// without its group state, or frozen past the session timeout) is
// assigned to another dispatcher while its previous owner still runs a
// request. The new owner, which saw Kafka fail (one failed fetch here),
// finds the intent without its attempt record in its read-back; it waits
// for the request's deadline rather than send the delivery again, and
// skips the record once the previous owner's attempt record comes
// (TestChaosBrokerRestart's duplicates). Fails without awaitRunning: the
// delivery is sent at once.
func TestResumeWaitsForAPreviousOwnersRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 1})
	rc := newReceiver(t, nil)
	b.eps.set(dispatcher.Target{ID: "ep_1", URL: rc.srv.URL})
	dl := newDelivery("evt_running", "ep_1")
	b.produce(0, dl)
	intent, answer := previousOwnersAttempt(t, b, dl)
	cl := b.cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, intent).FirstErr())

	failed := failFirstFetch(b) // the broker fault the new owner saw
	readBack := watchReadBack(b)
	reg := prometheus.NewRegistry()
	b.start(dispatcher.Config{AllowPrivateNetworks: true}, runOpts{reg: reg})
	readBack(ctx)
	require.True(t, failed.Load(), "no fetch failed before the read-back")
	require.NoError(t, cl.ProduceSync(ctx, answer).FirstErr())

	eventually(t, 20*time.Second, func() bool {
		_, by := b.committed("hookd-dispatchers", b.names.Deliveries)
		return by[0] == 1
	}, "committed past the record")
	require.Zero(t, rc.count(dl.EventID), "the previous owner's request was sent again")
	require.Equal(t, 1.0, metrictest.Value(t, reg, "hookd_dispatcher_resume_skipped_total"))
	require.Zero(t, metrictest.Value(t, reg, "hookd_dispatcher_resume_unknown_total"))
}

// TestResumeAfterAKafkaFailureWaitsForLateIntents: after a Kafka failure
// (here one failed fetch) a previous owner may not know yet that it lost
// the partition and start a request after the new owner's read-back
// began (TestChaosBrokerRestart: an intent written 0.5 s after the new
// owner's assignment). The read-back goes on reading for a while, finds
// the intent and then its attempt record, and skips the record. Fails
// without the wait after a failure: the delivery is sent at once.
func TestResumeAfterAKafkaFailureWaitsForLateIntents(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 1})
	rc := newReceiver(t, nil)
	b.eps.set(dispatcher.Target{ID: "ep_1", URL: rc.srv.URL})
	dl := newDelivery("evt_late", "ep_1")
	b.produce(0, dl)
	intent, answer := previousOwnersAttempt(t, b, dl)
	cl := b.cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	failed := failFirstFetch(b)
	readBack := watchReadBack(b)
	reg := prometheus.NewRegistry()
	b.start(dispatcher.Config{AllowPrivateNetworks: true}, runOpts{reg: reg})
	readBack(ctx)
	require.True(t, failed.Load(), "no fetch failed before the read-back")
	require.NoError(t, cl.ProduceSync(ctx, intent).FirstErr())
	require.NoError(t, cl.ProduceSync(ctx, answer).FirstErr())

	eventually(t, 20*time.Second, func() bool {
		_, by := b.committed("hookd-dispatchers", b.names.Deliveries)
		return by[0] == 1
	}, "committed past the record")
	require.Zero(t, rc.count(dl.EventID), "the previous owner's request was sent again")
	require.Equal(t, 1.0, metrictest.Value(t, reg, "hookd_dispatcher_resume_skipped_total"))
}

// failFirstFetch fails the first fetch of the deliveries topic
// (UNKNOWN_SERVER_ERROR) and reports whether it did.
func failFirstFetch(b *bundle) *atomic.Bool {
	var failed atomic.Bool
	ids := b.topicNames()
	b.cluster.ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.FetchRequest)
		hit := false
		for _, t := range req.Topics {
			hit = hit || t.Topic == b.names.Deliveries || ids[t.TopicID] == b.names.Deliveries
		}
		if !hit || failed.Swap(true) {
			b.cluster.KeepControl()
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewFetchResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.UnknownServerError.Code
				rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	return &failed
}

// previousOwnersAttempt is another dispatcher's request for dl's record
// (deliveries partition 0, offset 0), started now: its intent and its
// attempt record (delivered).
func previousOwnersAttempt(t *testing.T, b *bundle, dl *delivery.Delivery) (intent, answer *kgo.Record) {
	t.Helper()
	rec := attempt.Record{AttemptID: "att_running", DeliveryID: dl.ID, EventID: dl.EventID,
		EventType: dl.EventType, EndpointID: "ep_1", Account: "acct_1", EventCreated: dl.EventCreated,
		Attempt: 1, Tier: b.names.Deliveries, StartedAt: time.Now(), Outcome: attempt.OutcomeUnknown,
		NextAction: attempt.NextRetry, Error: attempt.ErrorUnknown,
		Source: &attempt.Position{Topic: b.names.Deliveries, Partition: 0, Offset: 0}}
	intent, err := rec.KafkaRecord(b.names.Intents)
	require.NoError(t, err)
	intent.Partition = 0
	intent.Headers = []kgo.RecordHeader{{Key: attempt.IntentHeader}}
	rec.Outcome, rec.NextAction, rec.Error = attempt.OutcomeDelivered, attempt.NextDone, ""
	rec.StatusCode, rec.Duration = 200, 50*time.Millisecond
	answer, err = rec.KafkaRecord(b.names.Attempts)
	require.NoError(t, err)
	answer.Partition = 0
	return intent, answer
}

// watchReadBack returns a function that waits until a dispatcher's
// read-back has listed the attempts topic's offsets by time, after its
// end offsets (kfake answers the request after the watcher saw it: what
// is produced after the wait is past the end offsets the read-back reads
// to).
func watchReadBack(b *bundle) func(ctx context.Context) {
	seen := make(chan struct{})
	var once sync.Once
	b.cluster.ControlKey(int16(kmsg.ListOffsets), func(r kmsg.Request) (kmsg.Response, error, bool) {
		b.cluster.KeepControl()
		for _, rt := range r.(*kmsg.ListOffsetsRequest).Topics {
			for _, p := range rt.Partitions {
				// By time: only a read-back lists the attempts topic so
				// (the collector lists its start, -2).
				if rt.Topic == b.names.Attempts && p.Timestamp >= 0 {
					once.Do(func() { close(seen) })
				}
			}
		}
		return nil, nil, false // kfake answers it
	})
	return func(ctx context.Context) {
		b.t.Helper()
		select {
		case <-seen:
		case <-ctx.Done():
			b.t.Fatal("no read-back of the attempts topic")
		}
	}
}
