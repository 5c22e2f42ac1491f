package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

// Kafka faults during a replay, injected through kfake's control hooks
// (Cluster.Fault answers chosen requests with an error code, ControlKey
// takes the whole broker down). What a user sees either way: the replay
// completes with every selected dead letter re-enqueued exactly once (same
// event and delivery id), or it fails with a clear status and its progress,
// and running it again re-enqueues only what had not gone.

// faultEndpoints are the endpoints of the fault tests, each on a DLQ and
// deliveries partition of its own (1, 0 and 2 of 4).
var faultEndpoints = []string{"ep_a", "ep_d", "ep_e"}

// setupFaults is setup with three active endpoints of acct_a, perEP dead
// letters each, and kgo retrying requests every 10 ms instead of 250 ms to
// 5 s, so that a client's retry budget (20 tries) runs out in a fraction of
// a second and an outage outlasts it quickly.
func setupFaults(t *testing.T, perEP int) *bundle {
	t.Helper()
	b := setup(t)
	b.deps.KafkaOpts = append(b.deps.KafkaOpts, kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }))
	for _, ep := range faultEndpoints {
		b.endpoint(t, ep, "acct_a", endpoint.StatusActive)
		b.deadLetters(t, ep, "acct_a", "invoice.paid", deadletter.ReasonRetriesExhausted, perEP)
	}
	return b
}

// requireEachOnce asserts that the deliveries topic holds want replayed
// records, one per dead letter, each with its dead letter's event and
// delivery id and res's replay id.
func (b *bundle) requireEachOnce(t *testing.T, res Result, want int) {
	t.Helper()
	require.Equal(t, store.ReplayDone, res.Status, "error: %s", res.Error)
	require.EqualValues(t, want, res.Replayed)
	got := b.replayed(t)
	require.Len(t, got, want, "every selected dead letter re-enqueued")
	for evt, recs := range got {
		require.Len(t, recs, 1, "re-enqueued more than once: %s", evt)
		d, err := delivery.Decode(recs[0])
		require.NoError(t, err)
		ep, _, _ := strings.Cut(evt, "-evt-")
		require.Equal(t, delivery.ID(evt, ep), d.ID, "same delivery id")
		require.Equal(t, res.ID, d.ReplayID)
	}
}

// afterFirstChunk returns an OnProgress that calls inject once, after the
// first chunk was acknowledged and saved: the fault lands mid-replay.
func afterFirstChunk(inject func()) func(Progress) {
	var once sync.Once
	return func(p Progress) {
		if p.Replayed > 0 {
			once.Do(inject)
		}
	}
}

// Produce errors mid-replay: NOT_LEADER_FOR_PARTITION (rejected, nothing
// written) and REQUEST_TIMED_OUT (kfake writes the batch, then answers the
// timeout, as a broker whose replication was slow: the retry must not
// write it twice). Either kgo retries them (its default: until
// acknowledged), or, with a producer that gives up (RecordRetries(1) in
// Deps.KafkaOpts, as an operator's delivery timeout would), the run takes
// the failure as an outage and makes the attempt again, reading back what
// was written. The replay completes, each dead letter once. Checked to
// fail with idempotence off (kgo.DisableIdempotentWrite in runner.connect:
// REQUEST_TIMED_OUT duplicates records) and with a producer that gives up
// and a run that does not wait (kafkaErr returning err unmarked: the run
// fails with NOT_LEADER_FOR_PARTITION).
func TestReplayProduceErrorsMidReplay(t *testing.T) {
	t.Parallel()
	for _, code := range []*kerr.Error{kerr.NotLeaderForPartition, kerr.RequestTimedOut} {
		for _, givesUp := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/producer_gives_up=%v", code.Message, givesUp), func(t *testing.T) {
				t.Parallel()
				b := setupFaults(t, 40)
				if givesUp {
					b.deps.KafkaOpts = append(b.deps.KafkaOpts, kgo.RecordRetries(1))
				}
				var fault *kfake.FaultHandle
				req := Request{Actor: "a", Reason: "r", chunk: 7}
				req.OnProgress = afterFirstChunk(func() {
					fault = b.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: b.deps.Names.Deliveries,
						Err: code, Count: 2})
				})
				res, err := Run(context.Background(), b.deps, req)
				require.NoError(t, err)
				require.NotNil(t, fault)
				require.Equal(t, 2, fault.Hits(), "every injected error was answered")
				b.requireEachOnce(t, res, 120)
			})
		}
	}
}

// A permanent produce error (TOPIC_AUTHORIZATION_FAILED) on one deliveries
// partition mid-chunk (chunks of 50 span two endpoints of 40 dead letters;
// the fault hits the endpoint read last): the records of the chunk on the
// other partition are acknowledged, this partition's are refused. The run fails with a clear
// status and error, its row says how far it got, and running the request
// again re-enqueues the rest, each dead letter once (the acknowledged part
// of the failed chunk is read back, not sent again). Checked to fail with
// recovery disabled (runner.recover returning nil at once).
func TestReplayPermanentProduceErrorFailsThenResumes(t *testing.T) {
	t.Parallel()
	b := setupFaults(t, 40)
	ctx := context.Background()
	req := Request{Actor: "a", Reason: "r", chunk: 50}
	seen := map[string]bool{}
	req.OnEntry = func(e Entry, _ string) { seen[e.EndpointID] = true }
	var fault *kfake.FaultHandle
	req.OnProgress = afterFirstChunk(func() {
		var last string
		for _, ep := range faultEndpoints {
			if !seen[ep] {
				last = ep
			}
		}
		fault = b.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: b.deps.Names.Deliveries,
			Partitions: []int32{partitionOf(last, 4)}, Err: kerr.TopicAuthorizationFailed, Count: -1})
	})
	res, err := Run(ctx, b.deps, req)
	require.ErrorIs(t, err, kerr.TopicAuthorizationFailed)
	require.Equal(t, store.ReplayFailed, res.Status)
	require.Contains(t, res.Error, "TOPIC_AUTHORIZATION_FAILED")
	require.Greater(t, res.Replayed, int64(0), "how far it got")
	require.Less(t, res.Replayed, int64(120))
	require.Positive(t, fault.Hits())
	produced := len(b.replayed(t))
	require.Greater(t, produced, int(res.Replayed), "the failed chunk's other partitions were acknowledged")

	fault.Remove()
	req.OnProgress, req.OnEntry = nil, nil
	res, err = Run(ctx, b.deps, req)
	require.NoError(t, err)
	b.requireEachOnce(t, res, 120)
}

// Fetch errors while a resumed replay reads the DLQ from its saved
// position: NOT_LEADER_FOR_PARTITION (kgo retries it), OFFSET_OUT_OF_RANGE
// (kgo resets the partition to its start and fetches records the request
// handled already) and UNKNOWN_SERVER_ERROR (not retriable: kgo hands it
// over). The run either completes or fails with its status and error, and
// a re-run completes; over all runs each dead letter goes once.
// OFFSET_OUT_OF_RANGE failed before reads skipped records below their
// position: 30 dead letters were re-enqueued twice.
func TestReplayFetchErrorsReadingTheDLQ(t *testing.T) {
	t.Parallel()
	for _, code := range []*kerr.Error{kerr.NotLeaderForPartition, kerr.OffsetOutOfRange, kerr.UnknownServerError} {
		t.Run(code.Message, func(t *testing.T) {
			t.Parallel()
			b := setupFaults(t, 40)
			ctx := context.Background()
			req := Request{Actor: "a", Reason: "r", chunk: 7}
			runCtx, cancel := context.WithCancel(ctx)
			req.OnProgress = func(p Progress) {
				if p.Replayed >= 30 {
					cancel()
				}
			}
			res, err := Run(runCtx, b.deps, req)
			cancel()
			require.ErrorIs(t, err, context.Canceled)
			require.Equal(t, store.ReplayInterrupted, res.Status)

			fault := b.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: b.deps.Names.DLQ, Err: code, Count: 2})
			req.OnProgress = nil
			res, err = Run(ctx, b.deps, req)
			if err != nil {
				require.Equal(t, store.ReplayFailed, res.Status)
				require.Contains(t, res.Error, code.Message)
				require.GreaterOrEqual(t, res.Replayed, int64(30), "how far it got")
				res, err = Run(ctx, b.deps, req)
			}
			require.NoError(t, err)
			require.Equal(t, 2, fault.Hits(), "the DLQ fetches met the faults")
			b.requireEachOnce(t, res, 120)
		})
	}
}

// brokerOutage takes the kfake broker down while down is set: every
// request (every key, ApiVersions included) has its connection closed
// unanswered, as a broker that is gone (SIGKILL) or, frozen, is held
// unanswered until the outage ends, as a broker that is stopped (SIGSTOP:
// connections open, nothing answers). met counts the requests it took.
type brokerOutage struct {
	frozen bool
	down   atomic.Bool
	thaw   chan struct{}
	met    atomic.Int64
}

func newBrokerOutage(c *kfake.Cluster, frozen bool) *brokerOutage {
	o := &brokerOutage{frozen: frozen, thaw: make(chan struct{})}
	c.ControlKey(-1, func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !o.down.Load() {
			return nil, nil, false
		}
		o.met.Add(1)
		if o.frozen {
			c.SleepControl(func() { <-o.thaw })
			return nil, nil, false
		}
		return nil, errors.New("test: broker down"), true
	})
	return o
}

// lastFor keeps the broker down for d, then brings it back.
func (o *brokerOutage) lastFor(d time.Duration) {
	time.Sleep(d) // the outage's length, the scenario itself: nothing waits on it
	o.down.Store(false)
	close(o.thaw)
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// outageLength outlasts every timeout of a run: kgo's request retries (20
// tries, 10 ms apart in these tests), its 10 s dial and request timeouts,
// the reader's idle poll (5 s) and the produce stall report (10 s).
const outageLength = 15 * time.Second

// A broker outage longer than every timeout of the replay (outageLength),
// the broker gone or frozen, before the run starts, while it reads the DLQ
// (big dead letters: the DLQ takes several fetches) and while it produces:
// the run waits for the broker and completes, each dead letter once. A
// broker gone is one WARN line; a frozen one at most one (a request held
// for less than kgo's timeouts and retries is only slow). Before the
// replay waited out Kafka, the run failed ("listing end offsets of
// webhooks.dlq", "listing start offsets of webhooks.dlq: ... test: broker
// down"), and logged nothing while a produce waited.
func TestReplayWaitsOutBrokerOutage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		when   string
		frozen bool
	}{{"before_start", false}, {"mid_read", false}, {"mid_produce", false},
		{"before_start", true}, {"mid_read", true}, {"mid_produce", true}} {
		when := tc.when
		t.Run(fmt.Sprintf("%s/frozen=%v", tc.when, tc.frozen), func(t *testing.T) {
			t.Parallel()
			b := setupFaults(t, 0)
			if when == "mid_read" {
				for _, ep := range faultEndpoints {
					b.bigDeadLetters(t, ep, 40, 64<<10)
				}
			} else {
				for _, ep := range faultEndpoints {
					b.deadLetters(t, ep, "acct_a", "invoice.paid", deadletter.ReasonRetriesExhausted, 40)
				}
			}
			var logs syncBuffer
			b.deps.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			out := newBrokerOutage(b.cluster.Cluster, tc.frozen)
			ended := make(chan struct{})
			begin := func() {
				out.down.Store(true)
				go func() { defer close(ended); out.lastFor(outageLength) }()
			}
			req := Request{Actor: "a", Reason: "r", chunk: 7}
			switch when {
			case "before_start":
				begin()
			case "mid_read":
				var fetches atomic.Int64
				b.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: b.deps.Names.DLQ, Count: -1,
					When: func(kmsg.Request) bool {
						if fetches.Add(1) == 2 {
							begin()
						}
						return false
					}})
			case "mid_produce":
				req.OnProgress = afterFirstChunk(begin)
			}
			res, err := Run(context.Background(), b.deps, req)
			<-ended
			require.NoError(t, err)
			require.Positive(t, out.met.Load(), "the run met the outage")
			b.requireEachOnce(t, res, 120)
			warns := strings.Count(logs.String(), "level=WARN")
			if tc.frozen {
				require.LessOrEqual(t, warns, 1, "at most one WARN line for the outage:\n%s", logs.String())
			} else {
				require.Equal(t, 1, warns, "one WARN line for the outage:\n%s", logs.String())
			}
		})
	}
}

// bigDeadLetters produces n dead letters of about size bytes for endpoint
// ep of acct_a, event ids "<ep>-evt-<i>", one produce request each.
func (b *bundle) bigDeadLetters(t *testing.T, ep string, n, size int) {
	t.Helper()
	cl := b.cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(2<<20))
	pad := strings.Repeat("x", size)
	for i := range n {
		evt := fmt.Sprintf("%s-evt-%d", ep, i)
		body, err := delivery.Body(evt, "invoice.paid", time.Now(), []byte(`{"pad":"`+pad+`"}`))
		require.NoError(t, err)
		d := delivery.Delivery{ID: delivery.ID(evt, ep), EventID: evt, EventType: "invoice.paid", EndpointID: ep, Account: "acct_a",
			EventCreated: time.Now(), Attempt: 5, FirstAttempt: time.Now(), LastStatus: 503, LastError: "http_5xx", Body: body}
		src := d.Record(b.deps.Names.Retry[0])
		src.Partition = partitionOf(ep, 4)
		rec := deadletter.Record(b.deps.Names.DLQ, src, deadletter.Provenance{OriginTopic: src.Topic,
			Attempts: 5, LastStatus: 503, ErrorClass: "http_5xx", Reason: deadletter.ReasonRetriesExhausted, DeadAt: time.Now()})
		require.NoError(t, cl.ProduceSync(context.Background(), rec).FirstErr())
	}
}
