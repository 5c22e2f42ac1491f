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
	e.indexedEndpoint(t, "ep_a", "acct_1")
	e.startRouterWith(t, kgo.ProducerLinger(time.Minute))
	e.produce(t, `{"id":"evt_1","account":"acct_1","type":"invoice.paid"}`)
	adm := kadm.NewClient(e.kafka.Client(t))
	wait.For(t, 15*time.Second, "the delivery on the deliveries topic (a minute's linger not waited out)", func() bool {
		return e.deliveriesOnTopic(t, adm) >= 1
	})
}

// A slow offset commit does not hold back fan-out: while the commit of the
// first batch is held by the broker, the next event is fanned out; once
// the commit is let through, every event's offset is committed.
func TestSlowOffsetCommitDoesNotHoldBackFanOut(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.indexedEndpoint(t, "ep_a", "acct_1")
	held, let := e.holdCommits(t)
	e.startRouter(t)
	adm := kadm.NewClient(e.kafka.Client(t))

	e.produce(t, `{"id":"evt_1","account":"acct_1","type":"invoice.paid"}`)
	wait.For(t, 15*time.Second, "the first event's commit to be held", func() bool { return held.Load() >= 1 })
	for i := 2; i <= 3; i++ {
		e.produce(t, fmt.Sprintf(`{"id":"evt_%d","account":"acct_1","type":"invoice.paid"}`, i))
		wait.For(t, 15*time.Second, fmt.Sprintf("event %d fanned out while the first commit is held", i), func() bool {
			return e.deliveriesOnTopic(t, adm) >= int64(i)
		})
	}
	let()
	e.waitCommitted(t, 3)
}

// A batch that was polled but never acknowledged is not committed when Run
// returns: evt_1's commit is held by the broker, so evt_2's offset is owed
// to the next commit; evt_3's deliveries then fail permanently and Run
// returns. The commit Run makes on its way out (after the held one is let
// through) covers evt_1 and evt_2, never evt_3, which was not written: its
// offset committed would lose it.
func TestUnwrittenBatchIsNotCommittedOnReturn(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.indexedEndpoint(t, "ep_a", "acct_1")
	held, let := e.holdCommits(t)
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
	wait.For(t, 15*time.Second, "the first event's commit to be held", func() bool { return held.Load() >= 1 })
	e.produce(t, `{"id":"evt_2","account":"acct_1","type":"invoice.paid"}`)
	wait.For(t, 15*time.Second, "the second event fanned out while the first commit is held", func() bool {
		return e.deliveriesOnTopic(t, adm) >= 2
	})
	failing.Store(true)
	e.produce(t, `{"id":"evt_3","account":"acct_1","type":"invoice.paid"}`)
	wait.For(t, 15*time.Second, "the third event's deliveries to fail", func() bool { return failed.Load() >= 1 })
	let()
	select {
	case err := <-done:
		require.ErrorIs(t, err, kerr.TopicAuthorizationFailed)
	case <-time.After(time.Minute):
		t.Fatal("Run did not return on a permanent error")
	}

	offs, err := adm.FetchOffsets(context.Background(), "hookd-router")
	require.NoError(t, err)
	var sum int64
	offs.Each(func(o kadm.OffsetResponse) { sum += o.At })
	require.LessOrEqual(t, sum, int64(2), "committed offsets cover the event whose deliveries were never written")
}

// holdCommits makes the broker hold every offset commit until let is
// called (also when t ends); held counts the commits held so far. Once
// let, commits pass through.
func (e *env) holdCommits(t *testing.T) (held *atomic.Int64, let func()) {
	t.Helper()
	held = &atomic.Int64{}
	release := make(chan struct{})
	var once sync.Once
	let = func() { once.Do(func() { close(release) }) }
	t.Cleanup(let)
	e.kafka.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.kafka.KeepControl()
		select {
		case <-release:
		default:
			held.Add(1)
			e.kafka.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	return held, let
}
