package router_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/producer/router"
)

// startRouterWith runs a router whose Kafka client also gets opts.
func (e *env) startRouterWith(t *testing.T, opts ...kgo.Opt) {
	t.Helper()
	r, err := router.New(router.Config{Topics: e.names}, router.Deps{Endpoints: e.index,
		KafkaOpts: append([]kgo.Opt{kgo.SeedBrokers(e.kafka.Addrs...)}, opts...), Logger: e.logger, Registerer: e.reg})
	require.NoError(t, err)
	run(t, r.Run)
}

// deliveriesOnTopic is the number of records on the deliveries topic.
func (e *env) deliveriesOnTopic(t *testing.T, adm *kadm.Client) int64 {
	t.Helper()
	ends, err := adm.ListEndOffsets(context.Background(), e.names.Deliveries)
	require.NoError(t, err)
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// A polled batch is sent to Kafka as soon as it is fanned out, not after
// the client's linger: with a linger of a minute in the shared options,
// the deliveries are on the topic within seconds.
func TestRouterSendsBatchWithoutLinger(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.endpoint(t, "ep_a", "acct_1", endpoint.StatusActive)
	e.startRouterWith(t, kgo.ProducerLinger(time.Minute))
	e.produce(t, `{"id":"evt_1","account":"acct_1","type":"invoice.paid"}`)
	adm := kadm.NewClient(e.kafka.Client(t))
	wait.For(t, 15*time.Second, "the delivery on the deliveries topic (a minute's linger not waited out)", func() bool {
		return e.deliveriesOnTopic(t, adm) >= 1
	})
}

// A batch's deliveries are invisible to read_committed readers until its
// transaction commits: while the broker holds the router's EndTxn, the
// deliveries are on the topic but below no partition's last stable offset
// and the event's offset is not committed; once let through, the delivery
// is readable and the offset committed.
func TestDeliveriesInvisibleUntilTransactionCommits(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.endpoint(t, "ep_a", "acct_1", endpoint.StatusActive)
	held, let := e.holdEndTxn(t, 0)
	e.startRouter(t)
	adm := kadm.NewClient(e.kafka.Client(t))

	e.produce(t, `{"id":"evt_1","account":"acct_1","type":"invoice.paid"}`)
	wait.For(t, 15*time.Second, "the first transaction's commit to be held", func() bool { return held.Load() >= 1 })
	require.EqualValues(t, 1, e.deliveriesOnTopic(t, adm), "the delivery is written, uncommitted")
	lso, err := adm.ListCommittedOffsets(context.Background(), e.names.Deliveries)
	require.NoError(t, err)
	lso.Each(func(o kadm.ListedOffset) {
		require.Zero(t, o.Offset, "partition %d: last stable offset past the open transaction's delivery", o.Partition)
	})
	let()
	require.Len(t, consume(t, e.kafka, e.names.Deliveries, 1, 15*time.Second), 1)
	e.waitCommitted(t, 1)
}

// A batch whose deliveries Kafka refuses for good is aborted, not
// committed: evt_1 is fanned out and committed; evt_2's deliveries fail
// permanently and Run returns. The committed offsets cover evt_1 only
// (committing evt_2's would lose it), and a read_committed reader sees
// evt_1's delivery alone.
func TestUnwrittenBatchIsNotCommittedOnReturn(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.endpoint(t, "ep_a", "acct_1", endpoint.StatusActive)
	var (
		failing atomic.Bool
		failed  atomic.Int64
	)
	e.kafka.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.names.Deliveries, Err: kerr.TopicAuthorizationFailed, Count: -1,
		When: func(kmsg.Request) bool {
			if !failing.Load() {
				return false
			}
			failed.Add(1)
			return true
		}})

	r, err := router.New(router.Config{Topics: e.names, DrainTimeout: drainTimeout}, router.Deps{Endpoints: e.index,
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(e.kafka.Addrs...)}, Logger: e.logger, Registerer: e.reg})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	adm := kadm.NewClient(e.kafka.Client(t))

	e.produce(t, `{"id":"evt_1","account":"acct_1","type":"invoice.paid"}`)
	e.waitCommitted(t, 1)
	failing.Store(true)
	e.produce(t, `{"id":"evt_2","account":"acct_1","type":"invoice.paid"}`)
	select {
	case err := <-done:
		require.ErrorIs(t, err, kerr.TopicAuthorizationFailed)
	case <-time.After(time.Minute):
		t.Fatal("Run did not return on a permanent error")
	}
	require.NotZero(t, failed.Load())

	offs, err := adm.FetchOffsets(context.Background(), "hookd-router")
	require.NoError(t, err)
	var sum int64
	offs.Each(func(o kadm.OffsetResponse) { sum += o.At })
	require.EqualValues(t, 1, sum, "committed offsets cover the event whose deliveries were never written")
	recs := consume(t, e.kafka, e.names.Deliveries, 1, 10*time.Second)
	require.Len(t, recs, 1)
	d, err := delivery.Decode(recs[0])
	require.NoError(t, err)
	require.Equal(t, "evt_1", d.EventID)
}

// holdEndTxn makes the broker hold the first EndTxn request after skip
// (the others pass) until let is called (also when t ends); held counts
// the requests held so far (0 or 1).
func (e *env) holdEndTxn(t *testing.T, skip int64) (held *atomic.Int64, let func()) {
	t.Helper()
	held = &atomic.Int64{}
	release := make(chan struct{})
	var once sync.Once
	let = func() { once.Do(func() { close(release) }) }
	t.Cleanup(let)
	var seen int64 // the cluster runs control functions serially
	e.kafka.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.kafka.KeepControl()
		if seen++; seen == skip+1 {
			held.Add(1)
			e.kafka.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	return held, let
}

// Events that arrive within TransactionInterval of a transaction's start
// wait for the next one together: after the first event's transaction, 20
// events produced one at a time (each acknowledged before the next) are
// fanned out in one more transaction, where starting one per poll makes
// several. EndTxn requests are counted at the broker.
func TestEventsArrivingWithinTheIntervalShareATransaction(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.endpoint(t, "ep_a", "acct_1", endpoint.StatusActive)
	var ends atomic.Int64
	e.kafka.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.kafka.KeepControl()
		ends.Add(1)
		return nil, nil, false
	})
	r, err := router.New(router.Config{Topics: e.names, TransactionInterval: time.Second}, router.Deps{Endpoints: e.index,
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(e.kafka.Addrs...)}, Logger: e.logger, Registerer: e.reg})
	require.NoError(t, err)
	run(t, r.Run)
	cl := e.kafka.Client(t)
	produce := func(i int) {
		v := fmt.Sprintf(`{"id":"evt_%d","account":"acct_1","type":"invoice.paid"}`, i)
		require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Topic: e.names.Events, Key: []byte("k"), Value: []byte(v)}).FirstErr())
	}

	// A reader without consume's settling pause: the window the 20 events
	// must fall in starts with the first event's transaction, so the time
	// is counted from before the first event is produced.
	reader := e.kafka.Client(t, kgo.ConsumeTopics(e.names.Deliveries), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	read := 0
	readUntil := func(n int) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		for read < n && ctx.Err() == nil {
			read += len(reader.PollFetches(ctx).Records())
		}
		require.Equal(t, n, read, "deliveries read")
	}

	start := time.Now()
	produce(0)
	readUntil(1)
	first := ends.Load()
	for i := 1; i <= 20; i++ {
		produce(i)
	}
	require.Less(t, time.Since(start), 900*time.Millisecond, "the events took longer than the interval to produce: the test proves nothing")
	readUntil(21)
	settle, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	require.Empty(t, reader.PollFetches(settle).Records(), "deliveries beyond the 21")
	require.Equal(t, int64(1), ends.Load()-first, "transactions for the 20 events")
}
