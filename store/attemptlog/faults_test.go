package attemptlog_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/internal/metrictest"
	"github.com/hookd/hookd/store/attemptlog"
)

// Issue 16: Kafka faults injected at the broker (kfake's control hooks).
// In each, every attempt record ends in Postgres exactly once (counted
// once as inserted: none lost, none skipped, duplicates only as no-ops),
// and the writer keeps running.

// faultWriter starts a writer whose Kafka client gives up on a request
// quickly, so that every injected fault outlasts the client's own retries
// and timeouts. It returns the writer's WARN lines and a channel closed if
// Run returns before the test stops it.
func (b *bundle) faultWriter(t *testing.T) (logs *lockedBuffer, exited <-chan struct{}) {
	t.Helper()
	logs = &lockedBuffer{}
	b.logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg := attemptlog.Config{Topic: b.names.Attempts, DeliveriesTopic: b.names.Deliveries, OpsTopic: b.names.Ops,
		EventsTopic: b.names.Events, RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond}
	w, err := attemptlog.New(cfg, attemptlog.Deps{
		Store: b.db.Store, Logger: b.logger, Registerer: b.reg, Clock: b.clock,
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(b.kafka.Addrs...), kgo.FetchMaxWait(100 * time.Millisecond),
			kgo.RetryTimeout(300 * time.Millisecond), kgo.RequestRetries(1),
			kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond })},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done, ex := make(chan error, 1), make(chan struct{})
	go func() {
		err := w.Run(ctx)
		if ctx.Err() == nil {
			close(ex)
		}
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Fatal("writer did not stop within 20s")
		}
	})
	return logs, ex
}

// outage makes the broker refuse every request (the connection is closed)
// while on is set.
func (b *bundle) outage(on *atomic.Bool) {
	b.kafka.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		b.kafka.KeepControl()
		if on.Load() {
			return nil, errors.New("injected outage"), true
		}
		return nil, nil, false
	})
}

func TestWriterRidesOutABrokerOutage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	recs := history("o", "ep1", 40)
	b.produce(t, recs[:50]...)
	var on atomic.Bool
	b.outage(&on)
	// The outage starts with the writer's first offset commit: its first
	// batch is written, its offsets are not.
	var once sync.Once
	b.kafka.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.kafka.KeepControl()
		once.Do(func() { on.Store(true) })
		return nil, nil, false
	})
	logs, exited := b.faultWriter(t)
	eventually(t, 20*time.Second, "the outage to start", on.Load)
	// Longer than every timeout of the client (300ms per request, 1 retry).
	deadline := time.Now().Add(4 * time.Second)
	eventually(t, 10*time.Second, "the outage to last", func() bool {
		select {
		case <-exited:
			t.Fatal("Run returned during the outage")
		default:
		}
		return time.Now().After(deadline)
	})
	on.Store(false)
	b.produce(t, recs[50:]...)
	eventually(t, 30*time.Second, "every attempt in the log", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.attempts`) == len(recs) &&
			metrictest.Value(t, b.reg, "hookd_attempt_log_records_total", "inserted") == float64(len(recs))
	})
	b.requireOneOutage(t, logs)
	require.Zero(t, b.queryInt(t, `SELECT count(*) FROM (SELECT attempt_id FROM webhooks.attempts GROUP BY 1 HAVING count(*) > 1) d`))
}

// requireOneOutage asserts that the writer logged the fault as one outage:
// one WARN when it started, one INFO when it ended.
func (b *bundle) requireOneOutage(t *testing.T, logs *lockedBuffer) {
	t.Helper()
	eventually(t, 20*time.Second, "the end of the outage logged", func() bool {
		return len(logs.lines("kafka is working again")) == 1
	})
	require.Len(t, logs.lines("level=WARN"), 1, "one WARN per outage: %q", logs.lines("level=WARN"))
	require.Len(t, logs.lines("kafka is failing"), 1)
	require.Equal(t, 1.0, metrictest.Value(t, b.reg, "hookd_attempt_log_kafka_up"))
}

// committedAtEnd is whether the writers' group committed the end offset
// of every partition of the attempts and deliveries topics.
func (b *bundle) committedAtEnd(t *testing.T) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	adm := kadm.NewClient(b.producer)
	ends, err := adm.ListEndOffsets(ctx, b.names.Attempts, b.names.Deliveries)
	require.NoError(t, err)
	committed, err := adm.FetchOffsets(ctx, attemptlog.DefaultGroup)
	if err != nil {
		return false
	}
	ok := true
	ends.Each(func(o kadm.ListedOffset) {
		c, found := committed.Lookup(o.Topic, o.Partition)
		if o.Offset > 0 && (!found || c.At != o.Offset) {
			ok = false
		}
	})
	return ok
}

// Offset commits that fail (the coordinator answers REQUEST_TIMED_OUT for
// every partition, several times running): the batch is in Postgres once,
// and its offsets are committed once the broker answers again, though no
// record follows it (nothing is read again after a restart).
func TestWriterRetriesFailedOffsetCommits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	recs := history("c", "ep1", 20)
	b.produce(t, recs...)
	var failures atomic.Int32
	b.kafka.ControlKey(kmsg.OffsetCommit.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		b.kafka.KeepControl()
		if failures.Add(1) > 3 {
			b.kafka.DropControl()
			return nil, nil, false
		}
		req := r.(*kmsg.OffsetCommitRequest)
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.RequestTimedOut.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	logs, exited := b.faultWriter(t)
	eventually(t, 20*time.Second, "every attempt in the log", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.attempts`) == len(recs)
	})
	eventually(t, 20*time.Second, "the offsets committed at the end", func() bool { return b.committedAtEnd(t) })
	require.GreaterOrEqual(t, failures.Load(), int32(3))
	require.Equal(t, float64(len(recs)), metrictest.Value(t, b.reg, "hookd_attempt_log_records_total", "inserted"))
	require.Zero(t, metrictest.Value(t, b.reg, "hookd_attempt_log_records_total", "duplicate"))
	b.requireOneOutage(t, logs)
	select {
	case <-exited:
		t.Fatal("Run returned")
	default:
	}
}

// fetchFault answers a Fetch request with code as the error of every
// partition it asks for.
func fetchFault(req *kmsg.FetchRequest, code int16) *kmsg.FetchResponse {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewFetchResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewFetchResponseTopicPartition()
			sp.Partition, sp.ErrorCode, sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = rp.Partition, code, -1, -1, -1
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// Fetch errors mid-stream, once the writer has written its first batch:
// partitions answer NOT_LEADER_FOR_PARTITION, then UNKNOWN_SERVER_ERROR,
// then OFFSET_OUT_OF_RANGE (the writer resets to the start, never to the
// end: records read again are no-ops, none is skipped). Records produced
// meanwhile are all written, once.
func TestWriterRidesOutFetchErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	recs := history("f", "ep1", 40)
	b.produce(t, recs[:30]...)
	var faults atomic.Int32
	var armed atomic.Bool
	b.kafka.ControlKey(kmsg.Fetch.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		b.kafka.KeepControl()
		if !armed.Load() {
			return nil, nil, false
		}
		n := faults.Add(1)
		var code int16
		switch {
		case n <= 5:
			code = kerr.NotLeaderForPartition.Code
		case n <= 10:
			code = kerr.UnknownServerError.Code
		case n <= 12:
			code = kerr.OffsetOutOfRange.Code
		default:
			b.kafka.DropControl()
			return nil, nil, false
		}
		return fetchFault(r.(*kmsg.FetchRequest), code), nil, true
	})
	logs, exited := b.faultWriter(t)
	eventually(t, 20*time.Second, "the first records in the log", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.attempts`) == 30
	})
	armed.Store(true)
	b.produce(t, recs[30:]...)
	eventually(t, 30*time.Second, "every attempt in the log", func() bool {
		return faults.Load() > 12 && b.queryInt(t, `SELECT count(*) FROM webhooks.attempts`) == len(recs)
	})
	eventually(t, 20*time.Second, "every record counted", func() bool {
		return metrictest.Value(t, b.reg, "hookd_attempt_log_records_total", "inserted") == float64(len(recs))
	})
	// The OFFSET_OUT_OF_RANGE answers make the client reset partitions and
	// report it (kgo.ErrDataLoss), possibly after a successful poll: that
	// is the outage's doing, an INFO, not a second outage.
	b.requireOneOutage(t, logs)
	select {
	case <-exited:
		t.Fatal("Run returned")
	default:
	}
}
